"""``python -m verify fuzz``, its pytest engine, the Redis example database, HypoFuzz, and the regression corpus.

CPU, about 2 min with -n 2 on the 2-core machine (the two Redis round trips and the short
fuzz runs are most of it).  The HypoFuzz tests skip when hypofuzz (the optional ``fuzz``
extra) is not installed; the real-Redis test skips when no ``redis-server`` is on PATH.

The multi-GPU plumbing (``--gpus``, children and xdist workers pinned with
CUDA_VISIBLE_DEVICES) is tested without a GPU: its choices are pure functions, and the
pinning is observed in the environment of real child processes.

The corpus replay (``test_corpus_entry_replays``) is a normal CI test: every counterexample
the nightly fuzzer ever committed to ``tests/corpus`` is re-checked on every run.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import hypothesis
import pytest
from hypothesis.internal.reflection import function_digest

from verify.fuzz import (DEFAULT_CORPUS, FuzzUsageError, corpus_entry, load_corpus, pick_gpu, read_property_results,
                         replay_entry, resolve_gpus, throughput, write_corpus_entry, xdist_worker_gpu)

ROOT = Path(__file__).resolve().parents[1]


def _cmd(tmp: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "verify", "fuzz", "--database", str(tmp / "db"), "--corpus", str(tmp / "corpus"),
            *args]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLASHVERIFY_", "HYPOTHESIS_PROFILE", "PYTEST_XDIST", "PYTEST_CURRENT"))}
    return dict(env, PYTHONPATH=str(ROOT), **extra)


def fuzz(tmp: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(tmp, *args), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)


# ----------------------------------------------------------------- the fuzz command


def test_fuzz_correct_target_writes_report_with_coverage(tmp_path: Path) -> None:
    r = fuzz(tmp_path, "--hours", "0.005", "--targets", "torch.softmax", "--report", str(tmp_path / "rep"),
             "--engine", "inprocess")
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert rep["schema"] == "flashverify-check/1"
    assert rep["cells"] and all(c["target"] == "torch.softmax" for c in rep["cells"])
    assert sum(c["examples"] for c in rep["cells"]) > 0
    doc = json.loads((tmp_path / "rep" / "fuzz.json").read_text())
    t = doc["targets"]["torch.softmax"]
    assert t["status"] == "finished" and t["exit_code"] == 0 and t["examples"] > 0
    assert sum(doc["coverage"].values()) > 0 and any(k.startswith("len:") for k in doc["coverage"])
    assert any(n == 0 for n in t["coverage"].values()) or t["features_never_hit"] == []  # zeros are listed too
    for d in t["dtypes"].values():  # worst case and its improvement over the run
        assert d["checkpoints"] and d["checkpoints"][-1]["max_ratio"] == d["max_ratio"]
        # a worst case wherever an element was measured (on a loaded CI machine, 2026-12-02, one
        # dtype's few examples in the 18 s had none: fully masked or NaN rows only)
        assert d["max_ratio"] <= 1 and (d["worst_case"] or d["max_ratio"] == 0.0)
    assert not (tmp_path / "corpus").exists() or not list((tmp_path / "corpus").iterdir())
    assert (tmp_path / "rep" / "summary.md").exists()
    assert doc["options"]["workers"] == 1 and doc["options"]["gpus"] == [] and t["gpu"] is None  # cpu defaults
    assert doc["throughput"]["examples"] == t["examples"] and doc["throughput"]["examples_per_gpu"] == {
        "cpu": t["examples"]}


def test_fuzz_named_mutant_adds_corpus_file_and_exits_1(tmp_path: Path) -> None:
    r = fuzz(tmp_path, "--hours", "0.004", "--targets", "softmax-tail-pad-zero", "--dtype", "float32",
             "--report", str(tmp_path / "rep"), "--engine", "inprocess", "--no-shrink", "--seed", "1")
    assert r.returncode == 1, r.stdout + r.stderr
    files = list((tmp_path / "corpus").glob("*.json"))
    assert len(files) == 1, r.stdout
    entry = json.loads(files[0].read_text())
    assert entry["target"] == "softmax-tail-pad-zero" and entry["expect"] == "violation"
    assert entry["spec"]["op"] == "softmax" and entry["violation"]
    doc = json.loads((tmp_path / "rep" / "fuzz.json").read_text())
    assert doc["targets"]["softmax-tail-pad-zero"]["status"] == "violated"
    assert doc["corpus_added"] == [str(files[0])]
    # the file replays: still caught on the mutant, clean on a correct softmax
    assert replay_entry(entry)[0].evaluation.violations
    assert not replay_entry(entry, "torch.softmax")[0].evaluation.violations


def _sigterm_once(p: subprocess.Popen, ready, wait_s: float, *, settle_s: float, what: str,
                  exit_timeout_s: float = 60) -> str:
    """Wait until ready() (at most wait_s), let the run settle, send SIGTERM; return its output."""
    try:
        t0 = time.time()
        while not ready() and time.time() - t0 < wait_s:
            time.sleep(0.2)
        assert ready(), what
        time.sleep(settle_s)
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=exit_timeout_s)
    finally:
        if p.poll() is None:
            p.kill()
    return out


def test_sigterm_mid_run_still_writes_report(tmp_path: Path) -> None:
    rep = tmp_path / "rep"
    p = subprocess.Popen(_cmd(tmp_path, "--hours", "1", "--targets", "torch.softmax", "--report", str(rep),
                              "--engine", "inprocess", "--grace", "30"),
                         cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    state = rep / "state" / "torch_softmax.pkl"
    out = _sigterm_once(p, state.exists, 60, settle_s=2, what="the child never started")
    assert p.returncode == 0, out
    doc = json.loads((rep / "fuzz.json").read_text())
    assert doc["interrupted"] is True and doc["signal"] == signal.SIGTERM
    assert doc["targets"]["torch.softmax"]["status"] in ("stopped", "finished")
    assert (rep / "report.json").exists() and "interrupted" in out


def test_crashing_target_is_reported_as_crashed(tmp_path: Path) -> None:
    (tmp_path / "crashy.py").write_text(textwrap.dedent("""
        import ctypes
        def boom(x):
            ctypes.string_at(0)  # segfault, like a kernel's illegal address
    """))
    r = fuzz(tmp_path, "--hours", "0.003", "--targets", f"{tmp_path / 'crashy.py'}:boom", "--op", "softmax",
             "--report", str(tmp_path / "rep"), "--engine", "inprocess")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads((tmp_path / "rep" / "fuzz.json").read_text())
    (t,) = doc["targets"].values()
    assert t["status"] == "crashed" and t["exit_code"] == -signal.SIGSEGV
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert any("crashed" in c["reason"] for c in rep["cells"])


@pytest.mark.parametrize("args, needle", [
    (["--hours", "0", "--targets", "torch.softmax"], "positive"),
    (["--hours", "0.001", "--targets", "no-such-target"], "no-such-target"),
    (["--hours", "0.001", "--targets", "torch.softmax", "--device", "cpu", "--gpus", "0"],
     "--gpus 0 needs --device cuda"),
    (["--hours", "0.001", "--targets", "torch.softmax", "--device", "cpu", "--workers", "0"], "at least 1"),
])
def test_bad_arguments_exit_2(tmp_path: Path, args: list[str], needle: str, capsys) -> None:
    from verify.cli import main

    rc = main(["fuzz", *args, "--report", str(tmp_path / "rep"), "--corpus", str(tmp_path / "corpus")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert needle in err and "Traceback" not in err


# ----------------------------------------------------------------- the pytest engine


def test_fuzz_pytest_engine_reports_every_property_within_a_short_run(tmp_path: Path) -> None:
    """43 s in all: each property gets its share as a wall-clock budget and reports, none is cut at the end."""
    rep = tmp_path / "rep"
    r = fuzz(tmp_path, "--hours", "0.012", "--engine", "pytest", "--targets", "torch.softmax", "--dtype", "float32",
             "--dtype", "float16", "--report", str(rep), timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr + (rep / "pytest.log").read_text()
    doc = json.loads((rep / "fuzz.json").read_text())
    py = doc["pytest"]
    assert py["ran"] and py["properties_total"] == 2 and py["properties_reported"] == 2, py
    (session,) = py["sessions"]  # 43 s leave no room for a second session (30 s at least)
    assert session["exit_code"] == 0 and not session["stopped_at_deadline"] and session["property_budget_s"] > 2
    for nodeid, prop in py["properties"].items():
        assert prop["outcome"] == "passed" and prop["stopped_by"] == {"budget": 1}, (nodeid, prop)
        assert prop["examples"] > 0 and prop["features"] and prop["worst_case"] and 0 <= prop["max_ratio"] <= 1
        assert prop["seconds"] < session["property_budget_s"] + 20  # the budget stopped it, not max_examples
    t = doc["targets"]["torch.softmax"]
    assert set(t["pytest"]) == {"float16", "float32"} and t["pytest_examples"] > 0
    assert sum(t["coverage"].values()) > 0  # the pytest engine's examples count towards coverage
    lines = [json.loads(line) for line in (rep / "pytest-properties.jsonl").read_text().splitlines()]
    assert {(r["worker"], r["gpu"]) for r in lines} == {("gw0", None)}  # one xdist worker (cpu default), no GPU
    assert all(p["workers"] == ["gw0"] and p["examples_by_gpu"] == {"cpu": p["examples"]} for p in t["pytest"].values())
    assert doc["throughput"]["pytest_examples"] == t["pytest_examples"] == doc["throughput"]["examples"]
    assert "pytest engine" in (rep / "summary.md").read_text()
    assert 'tests="2"' in (rep / "pytest-junit-1.xml").read_text()


def test_sigterm_stops_the_pytest_engine_and_keeps_the_property_in_flight(tmp_path: Path) -> None:
    rep, db = tmp_path / "rep", tmp_path / "db"
    p = subprocess.Popen(_cmd(tmp_path, "--hours", "1", "--engine", "pytest", "--targets", "torch.softmax",
                              "--dtype", "float32", "--report", str(rep), "--grace", "30"),
                         cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # the property is under way once Hypothesis saves its first pareto entries
    out = _sigterm_once(p, lambda: db.exists() and any(f.is_file() for f in db.rglob("*")), 120, settle_s=1,
                        what="the property never started", exit_timeout_s=90)
    assert p.returncode == 0, out
    doc = json.loads((rep / "fuzz.json").read_text())
    assert doc["interrupted"] is True and doc["signal"] == signal.SIGTERM
    (session,) = doc["pytest"]["sessions"]
    assert session["stopped_at_deadline"] is True
    (prop,) = doc["pytest"]["properties"].values()  # what the property did before the stop is kept
    assert prop["outcome"] == "interrupted" and prop["stopped_by"] == {"interrupted": 1} and prop["examples"] > 0


def test_pytest_engine_keeps_starting_sessions_until_the_deadline(tmp_path: Path, monkeypatch) -> None:
    """A long run keeps going: when every property ends early (max_examples), the next session starts."""
    import verify.fuzz as vf
    from kernels.registry import get_target

    budgets: list[str] = []

    class Finished:  # a session that ends at once
        pid = 2**22 + 12345  # never signalled (it has already ended), and not a real process group

        def __init__(self, cmd, *, env, **kwargs) -> None:
            budgets.append(env["FLASHVERIFY_FUZZ_PROPERTY_BUDGET_S"])
            self.returncode = 0

        def poll(self) -> int:
            return 0

        def wait(self, timeout=None) -> int:
            return 0

    monkeypatch.setattr(vf.subprocess, "Popen", Finished)
    monkeypatch.setattr(vf, "PYTEST_MIN_SESSION_S", 0.5)
    eng = vf._PytestEngine(tmp_path, [get_target("torch.softmax")], "cpu", str(tmp_path / "db"), tmp_path / "c",
                           1, [], True, None, time.time() + 2.0, log=lambda m: None)
    eng.finish(5.0, vf._Stop())
    info = eng.info()
    assert len(info["sessions"]) >= 3 and len(budgets) == len(info["sessions"])
    assert all(s["exit_code"] == 0 and not s["stopped_at_deadline"] for s in info["sessions"])
    assert info["properties_total"] == 4  # torch.softmax: float16, bfloat16, float32, float64


def test_property_results_fold_over_sessions(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    rows = [
        dict(nodeid="n1", target="t", dtype="float32", outcome="passed", stopped_by="budget", seconds=2.0,
             examples=10, max_ratio=0.5, worst_case="a", features={"len:1": 3}, worker="gw1", gpu="5"),
        dict(nodeid="n1", target="t", dtype="float32", outcome="interrupted", stopped_by="interrupted", seconds=1.0,
             examples=5, max_ratio=0.7, worst_case="b", features={"len:1": 1, "mask:none": 5}, worker="gw0", gpu="4"),
        dict(nodeid="n2", target="t", dtype="float16", outcome="passed", stopped_by="max_examples", seconds=1.0,
             examples=4, max_ratio=0.1, worst_case="c", features={}, worker="gw0", gpu=None),
        dict(nodeid="n2", target="t", dtype="float16", outcome="failed", stopped_by="failure", seconds=1.0,
             examples=2, max_ratio=3.0, worst_case="d", features={}, violation="boom", worker="gw0", gpu=None),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut by a ki')
    props = read_property_results(path)
    assert props["n1"]["outcome"] == "passed" and props["n1"]["examples"] == 15 and props["n1"]["runs"] == 2
    assert props["n1"]["max_ratio"] == 0.7 and props["n1"]["worst_case"] == "b" and props["n1"]["examples_per_s"] == 5
    assert props["n1"]["features"] == {"len:1": 4, "mask:none": 5}
    assert props["n1"]["stopped_by"] == {"budget": 1, "interrupted": 1}
    assert props["n2"]["outcome"] == "failed" and props["n2"]["violation"] == "boom"
    assert props["n1"]["workers"] == ["gw0", "gw1"] and props["n1"]["examples_by_gpu"] == {"5": 10, "4": 5}
    assert props["n2"]["workers"] == ["gw0"] and props["n2"]["examples_by_gpu"] == {"cpu": 6}


# ----------------------------------------------------------------- several GPUs (tested without one)


@pytest.mark.parametrize("spec, device, count, visible, want", [
    (None, "cuda", 4, None, ["0", "1", "2", "3"]),  # the default on cuda: every GPU
    ("all", "cuda", 2, None, ["0", "1"]),
    ("2,0", "cuda", 3, None, ["2", "0"]),
    (" 1 ", "cuda", 2, None, ["1"]),
    (None, "cuda", 2, "3,5", ["3", "5"]),  # indices into CUDA_VISIBLE_DEVICES, mapped to its entries
    ("1", "cuda", 2, "3, 5", ["5"]),
    ("0", "cuda", 1, "GPU-8f1c", ["GPU-8f1c"]),  # UUIDs pass through
    (None, "cuda:1", 2, "6,7", ["7"]),  # --device cuda:K is --gpus K
    (None, "cpu", 0, "0", []),
])
def test_resolve_gpus(spec: str | None, device: str, count: int, visible: str | None, want: list[str]) -> None:
    assert resolve_gpus(spec, device, count, visible) == want


@pytest.mark.parametrize("spec, device, count, visible, needle", [
    ("0", "cpu", 0, None, "--gpus 0 needs --device cuda"),
    ("all", "cpu", 2, None, "--gpus all needs --device cuda"),
    ("2", "cuda", 2, None, "there is no GPU 2; torch sees 2 GPU(s), indices 0..1"),
    ("1", "cuda", 2, "4,5,6", None),  # control: in range
    ("2", "cuda", 2, "4,5", "(the entries of CUDA_VISIBLE_DEVICES=4,5)"),
    (None, "cuda:3", 2, None, "--device cuda:3: there is no GPU 3"),
    ("0,x", "cuda", 2, None, "neither 'all' nor a comma-separated list"),
    ("0,,1", "cuda", 2, None, "neither 'all' nor a comma-separated list"),
    ("-1", "cuda", 2, None, "neither 'all' nor a comma-separated list"),
    ("", "cuda", 2, None, "neither 'all' nor a comma-separated list"),
    ("1,1", "cuda", 2, None, "GPU 1 is listed more than once"),
    ("0", "cuda:1", 2, None, "both choose GPUs"),
    (None, "cuda:x", 2, None, "--device must be"),
    (None, "cuda", 0, None, "torch sees no CUDA device"),
    (None, "cuda", 3, "0,1", "CUDA_VISIBLE_DEVICES=0,1 lists 2 device(s) but torch sees 3"),
])
def test_resolve_gpus_rejects_bad_input(spec: str | None, device: str, count: int, visible: str | None,
                                        needle: str | None) -> None:
    if needle is None:
        assert resolve_gpus(spec, device, count, visible) == ["5"]
        return
    with pytest.raises(FuzzUsageError) as e:
        resolve_gpus(spec, device, count, visible)
    assert needle in str(e.value)


@pytest.mark.parametrize("running, want", [
    ([], "0"),  # all idle: the lowest index
    (["0"], "1"),
    (["0", "1"], "2"),
    (["2", "0", "1"], "0"),  # a tie again
    (["1", "1", "2", "0"], "0"),  # 0 and 2 tie below 1
    (["0", "0", "1", "2"], "1"),
])
def test_pick_gpu_takes_the_least_loaded_then_the_lowest_index(running: list[str], want: str) -> None:
    assert pick_gpu(["0", "1", "2"], running) == want


def test_pick_gpu_spreads_children_over_all_gpus() -> None:
    running: list[str] = []
    for _ in range(5):
        running.append(pick_gpu(["3", "5"], running))
    assert running == ["3", "5", "3", "5", "3"]


@pytest.mark.parametrize("worker, gpus, want", [
    ("gw0", "4,6", "4"), ("gw1", "4,6", "6"), ("gw2", "4,6", "4"), ("gw7", " 4, 6 ", "6"),
    ("gw3", "GPU-a", "GPU-a"),
    ("gw0", None, None), ("gw0", "", None),  # no GPU list: leave CUDA_VISIBLE_DEVICES alone
    (None, "4,6", None), ("main", "4,6", None),  # the xdist controller, or no xdist
])
def test_xdist_worker_gpu(worker: str | None, gpus: str | None, want: str | None) -> None:
    assert xdist_worker_gpu(worker, gpus) == want


def test_verify_fuzz_imports_only_the_standard_library() -> None:
    """A spawned child imports verify.fuzz before _child_main pins its GPU: that import must not reach CUDA."""
    script = ("import sys, verify.fuzz; "
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'numpy', 'hypothesis', "
              "'kernels', 'strategies')))")
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=_env(), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_child_pins_its_gpu_and_records_it(tmp_path: Path, monkeypatch) -> None:
    """A real spawned _child_main (on cpu, deadline already past) sets CUDA_VISIBLE_DEVICES to its GPU."""
    import multiprocessing as mp
    import pickle

    import verify.fuzz as vf

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")  # inherited by the child, which must replace it
    state = tmp_path / "state.pkl"
    now = time.time()
    p = mp.get_context("spawn").Process(target=vf._child_main, args=(
        "torch.softmax", None, "cpu", ["float32"], now - 1, now, str(state), str(tmp_path / "corpus"), None,
        str(tmp_path / "artifacts"), False, 0, "3"))
    p.start()
    p.join(120)
    assert p.exitcode == 0
    with open(state, "rb") as f:
        got = pickle.load(f)
    assert got["finished"] and got["gpu"] == {"id": "3", "name": None}


def test_root_conftest_pins_an_xdist_worker_before_torch_is_imported() -> None:
    """The root conftest imports torch and asks it for CUDA; a fuzz worker's CUDA_VISIBLE_DEVICES must come first."""
    script = textwrap.dedent("""
        import importlib.abc, json, os, sys
        seen = {}
        class Spy(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name in ("torch", "triton"):
                    seen.setdefault(name, os.environ.get("CUDA_VISIBLE_DEVICES"))
        sys.meta_path.insert(0, Spy())
        import conftest
        print(json.dumps({"at_import": seen, "after": os.environ.get("CUDA_VISIBLE_DEVICES")}))
    """)
    env = _env(PYTEST_XDIST_WORKER="gw3", FLASHVERIFY_FUZZ_GPUS="4,5", CUDA_VISIBLE_DEVICES="0")
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    # torch (and triton, which conftest's import of every suite module brings in) saw the pin
    assert got["after"] == "5" and got["at_import"].get("torch") == "5" and set(got["at_import"].values()) == {"5"}


def test_pytest_engine_hands_the_gpu_list_to_its_workers(tmp_path: Path, monkeypatch) -> None:
    import verify.fuzz as vf
    from kernels.registry import get_target

    started: list[tuple[list[str], dict[str, str]]] = []

    class Started:
        pid = 2**22 + 12345

        def __init__(self, cmd, *, env, **kwargs) -> None:
            started.append((cmd, env))

    monkeypatch.setattr(vf.subprocess, "Popen", Started)
    monkeypatch.setenv(vf.GPUS_ENV, "9")  # left over in the caller's environment: never passed on as it is
    for gpus, want in ((["4", "6"], "4,6"), ([], None)):
        eng = vf._PytestEngine(tmp_path, [get_target("torch.softmax")], "cuda" if gpus else "cpu", str(tmp_path / "db"),
                               tmp_path / "c", 3, gpus, True, None, time.time() + 600, log=lambda m: None)
        eng._start()
        eng.logf.close()
        cmd, env = started[-1]
        assert cmd[cmd.index("-n") + 1] == "3" and env.get(vf.GPUS_ENV) == want


def test_throughput_counts_both_engines_per_gpu() -> None:
    targets = {"a": {"examples": 30, "gpu": {"id": "4", "name": "H"}}, "b": {"examples": 0, "gpu": None},
               "c": {"examples": 10, "gpu": {"id": "4", "name": "H"}}}
    props = {"n1": {"examples": 7, "examples_by_gpu": {"6": 5, "4": 2}}}
    got = throughput(targets, props, 4.0, ["4", "6", "7"])
    assert got == {"examples": 47, "inprocess_examples": 40, "pytest_examples": 7, "wall_s": 4.0,
                   "examples_per_s": 11.75, "examples_per_gpu": {"4": 42, "6": 5, "7": 0}}  # an idle GPU shows 0
    cpu = throughput({"a": {"examples": 3, "gpu": None}}, {"n": {"examples": 2, "examples_by_gpu": {"cpu": 2}}},
                     1.0, [])
    assert cpu["examples_per_gpu"] == {"cpu": 5} and cpu["examples_per_s"] == 5.0


def test_fuzz_workers_merge_into_one_report(tmp_path: Path) -> None:
    """Two children at once (--workers 2): report.json and the throughput count the examples of both."""
    rep = tmp_path / "rep"
    r = fuzz(tmp_path, "--hours", "0.003", "--targets", "torch.softmax", "ref-online-softmax", "--dtype", "float32",
             "--workers", "2", "--engine", "inprocess", "--no-shrink", "--report", str(rep))
    assert r.returncode == 0, r.stdout + r.stderr
    first_end = next(i for i, line in enumerate(r.stdout.splitlines()) if "(exit code" in line)
    assert sum("  started " in line for line in r.stdout.splitlines()[:first_end]) == 2, r.stdout  # side by side
    cells = json.loads((rep / "report.json").read_text())["cells"]
    doc = json.loads((rep / "fuzz.json").read_text())
    assert {c["target"] for c in cells} == {"torch.softmax", "ref-online-softmax"}
    assert all(t["examples"] > 0 and t["gpu"] is None for t in doc["targets"].values())
    tp = doc["throughput"]
    assert tp["examples"] == tp["inprocess_examples"] == sum(c["examples"] for c in cells)
    assert tp["examples_per_gpu"] == {"cpu": tp["examples"]} and tp["pytest_examples"] == 0
    # the report rounds the rate to 3 decimals: below 0.5 examples a second that is more than
    # 1e-3 relative (0.194 for 0.19435 on a loaded machine, 2026-12-04)
    assert tp["examples_per_s"] == pytest.approx(tp["examples"] / tp["wall_s"], rel=1e-3, abs=5e-4)
    assert f"| {tp['examples']} ({tp['examples']} + 0) |" in (rep / "summary.md").read_text()


# ----------------------------------------------------------------- the Redis example database

REDIS_MISSING = "the redis / fakeredis packages are not installed (pip install -e '.[test]')"


def test_open_database_redis_url_gives_a_redis_example_database(monkeypatch) -> None:
    redis = pytest.importorskip("redis", reason=REDIS_MISSING)
    fakeredis = pytest.importorskip("fakeredis", reason=REDIS_MISSING)
    from hypothesis.database import DirectoryBasedExampleDatabase
    from hypothesis.extra.redis import RedisExampleDatabase

    from verify.fuzz import open_database

    server, urls = fakeredis.FakeServer(), []

    def from_url(cls, url, **kwargs):  # the client open_database builds, on an in-memory server
        urls.append(url)
        return fakeredis.FakeRedis(server=server)

    monkeypatch.setattr(redis.Redis, "from_url", classmethod(from_url))
    db = open_database("redis://fuzz-db.example:6379/3")
    assert isinstance(db, RedisExampleDatabase) and urls == ["redis://fuzz-db.example:6379/3"]
    db.save(b"key", b"value")
    other = open_database("rediss://fuzz-db.example:6380/3")  # a second machine sees what the first saved
    assert isinstance(other, RedisExampleDatabase) and list(other.fetch(b"key")) == [b"value"]
    assert isinstance(open_database("some/dir"), DirectoryBasedExampleDatabase) and open_database(None) is None


def test_redis_database_without_the_redis_package_exits_2(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # `import redis` now fails, as when it is not installed
    from verify.cli import main

    rc = main(["fuzz", "--hours", "0.001", "--database", "redis://localhost:6379/0", "--targets", "torch.softmax",
               "--report", str(tmp_path / "rep"), "--corpus", str(tmp_path / "corpus")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "redis://localhost:6379/0 is a Redis URL" in err and "pip install redis" in err and "Traceback" not in err
    assert not (tmp_path / "rep").exists()  # refused before anything ran


def _nightly_pytest(db_url: str, profile: str, tmp: Path) -> subprocess.CompletedProcess:
    """`pytest tests/fuzz -m nightly` on one mutant property, with FLASHVERIFY_DB=db_url."""
    env = _env(FLASHVERIFY_DB=db_url, FLASHVERIFY_FUZZ_TARGETS="softmax-tail-pad-zero",
               FLASHVERIFY_FUZZ_DTYPES="float32", FLASHVERIFY_CORPUS=str(tmp / "corpus"),
               HYPOTHESIS_STORAGE_DIRECTORY=str(tmp / "hypothesis"))
    return subprocess.run([sys.executable, "-m", "pytest", "tests/fuzz", "-m", "nightly", "--hypothesis-profile", profile,
                           "--hypothesis-show-statistics", "-p", "no:cacheprovider", "-q", "-rs"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _case_line(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith("E") and "case: " in line]
    assert lines, out
    return lines[-1].split("case: ", 1)[1].strip()


def _redis_round_trip(url: str, tmp: Path) -> None:
    """A failure found by one run is saved in Redis, and a later plain pytest replays it from there."""
    import redis

    found = _nightly_pytest(f"{url}/0", "nightly", tmp)
    assert found.returncode == 1 and "violated its contract" in found.stdout, found.stdout + found.stderr
    assert redis.Redis.from_url(f"{url}/0").keys("hypothesis-example:*"), "nothing was saved in Redis"
    (entry,) = [json.loads(p.read_text()) for p in (tmp / "corpus").glob("*.json")]
    assert entry["target"] == "softmax-tail-pad-zero" and entry["expect"] == "violation"
    # `--hypothesis-profile replay` generates nothing: the failure can only come from the database
    replayed = _nightly_pytest(f"{url}/0", "replay", tmp)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "during reuse phase" in replayed.stdout and "1 failing examples" in replayed.stdout
    assert "during generate phase" not in replayed.stdout
    assert _case_line(replayed.stdout) == _case_line(found.stdout)
    # control: the same replay against an empty Redis database has nothing to run
    empty = _nightly_pytest(f"{url}/1", "replay", tmp)
    assert empty.returncode == 0 and "1 skipped" in empty.stdout, empty.stdout + empty.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_failure_saved_in_redis_is_replayed_by_a_later_pytest(tmp_path: Path) -> None:
    pytest.importorskip("redis", reason=REDIS_MISSING)
    fakeredis = pytest.importorskip("fakeredis", reason=REDIS_MISSING)
    server = fakeredis.TcpFakeServer(("127.0.0.1", 0), server_type="redis")  # a Redis over TCP, in a thread
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _redis_round_trip(f"redis://127.0.0.1:{server.server_address[1]}", tmp_path)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(shutil.which("redis-server") is None,
                    reason="no redis-server binary on PATH (apt-get install redis-server; .ci/run installs it): "
                           "the fakeredis round trip above covers the same path")
def test_failure_saved_in_a_real_redis_server_is_replayed(tmp_path: Path, monkeypatch) -> None:
    redis = pytest.importorskip("redis", reason=REDIS_MISSING)
    from hypothesis.extra.redis import RedisExampleDatabase

    port = _free_port()
    (tmp_path / "redis").mkdir()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path / "redis"),
                             "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client, t0 = redis.Redis(host="127.0.0.1", port=port), time.time()
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                assert proc.poll() is None and time.time() - t0 < 20, "redis-server did not come up"
                time.sleep(0.1)
        # Find the failure here, in-process (a pytest start-up less), on the property's own
        # database key; the later run finds the database through FLASHVERIFY_DB, as in the
        # fakeredis round trip.
        monkeypatch.setenv("FLASHVERIFY_FUZZ_TARGETS", "softmax-tail-pad-zero")
        monkeypatch.setenv("FLASHVERIFY_FUZZ_DTYPES", "float32")
        (prop,) = _properties_module().PROPERTIES.values()
        prop = hypothesis.settings(hypothesis.settings.get_profile("nightly"),
                                   database=RedisExampleDatabase(redis.Redis(host="127.0.0.1", port=port)))(prop)
        with pytest.raises(AssertionError, match="violated its contract"):
            prop()
        assert client.keys("hypothesis-example:*"), "nothing was saved in Redis"
        replayed = _nightly_pytest(f"redis://127.0.0.1:{port}/0", "replay", tmp_path)
        assert replayed.returncode == 1, replayed.stdout + replayed.stderr
        assert "during reuse phase" in replayed.stdout and "1 failing examples" in replayed.stdout
        assert "during generate phase" not in replayed.stdout and "violated its contract" in replayed.stdout
    finally:
        proc.terminate()
        proc.wait(20)


# ----------------------------------------------------------------- the nightly properties


def _properties_module():
    path = ROOT / "tests" / "fuzz" / "test_properties.py"
    spec = importlib.util.spec_from_file_location("flashverify_fuzz_properties", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fuzz_properties_take_no_fixtures_and_are_nightly() -> None:
    mod = _properties_module()
    tests = {n: f for n, f in vars(mod).items() if n.startswith("test_") and callable(f)}
    assert tests and set(tests.values()) == set(mod.PROPERTIES.values())
    for name, fn in tests.items():
        assert hypothesis.is_hypothesis_test(fn), name
        assert list(inspect.signature(fn).parameters) == [], f"{name} asks for fixtures"
    names = {t for t, _ in mod.PROPERTIES}
    assert {"torch.softmax", "sdpa-math", "ref-blocked-attention"} <= names
    from kernels.registry import get_target

    assert all(get_target(n).kind != "mutant" for n in names)
    assert mod.pytestmark.name == "nightly"


def test_each_fuzz_property_has_its_own_database_key() -> None:
    """They share one source; without their node id in the key they would share one database entry."""
    mod = _properties_module()
    keys = {function_digest(fn.hypothesis.inner_test) for fn in mod.PROPERTIES.values()}
    assert len(keys) == len(mod.PROPERTIES)


HYPOFUZZ_MISSING = "hypofuzz is not installed (optional: pip install -e '.[fuzz]')"


def test_hypofuzz_collects_every_fuzz_property(tmp_path: Path) -> None:
    """HypoFuzz's own collection (hypofuzz.collection.collect_tests, what `hypothesis fuzz` runs) takes every
    property, skips none, and keys each on the same database entry as pytest and `verify fuzz`."""
    pytest.importorskip("hypofuzz.collection", reason=HYPOFUZZ_MISSING)
    script = textwrap.dedent("""
        import json
        from hypofuzz.collection import collect_tests
        res = collect_tests(["tests/fuzz", "--hypothesis-profile", "nightly", "-p", "no:cacheprovider", "-q"])
        print("HYPOFUZZ " + json.dumps({"targets": {t.nodeid: t.database_key.hex() for t in res.fuzz_targets},
                                        "not_collected": {k: str(v) for k, v in res.not_collected.items()}}))
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=_env(FLASHVERIFY_DB=str(tmp_path / "db")),
                       capture_output=True, text=True, timeout=180)
    lines = [line for line in r.stdout.splitlines() if line.startswith("HYPOFUZZ ")]
    assert r.returncode == 0 and lines, r.stdout + r.stderr
    got = json.loads(lines[-1].split(" ", 1)[1])
    assert got["not_collected"] == {}
    mod = _properties_module()
    assert got["targets"] == {f"{mod.NODE_PREFIX}::{fn.__name__}": function_digest(fn.hypothesis.inner_test).hex()
                              for fn in mod.PROPERTIES.values()}


def test_hypofuzz_fuzzes_a_property(tmp_path: Path) -> None:
    """`hypothesis fuzz` itself, on one property, until it has saved a progress report with 10 inputs."""
    pytest.importorskip("hypofuzz.collection", reason=HYPOFUZZ_MISSING)
    from hypothesis.database import DirectoryBasedExampleDatabase
    from hypofuzz.database import HypofuzzDatabase

    mod = _properties_module()
    fn = mod.PROPERTIES[("torch.softmax", "float32")]
    key = function_digest(fn.hypothesis.inner_test)
    db = HypofuzzDatabase(DirectoryBasedExampleDatabase(str(tmp_path / "db")))
    cmd = [sys.executable, "-c", "from hypothesis.extra.cli import main; main()", "fuzz", "--no-dashboard", "-n", "1",
           "--", "tests/fuzz", "--hypothesis-profile", "nightly", "-p", "no:cacheprovider", "-k", fn.__name__]
    p = subprocess.Popen(cmd, cwd=ROOT, env=_env(FLASHVERIFY_DB=str(tmp_path / "db")), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    inputs, t0 = 0, time.time()
    try:
        while inputs < 10 and p.poll() is None and time.time() - t0 < 150:
            time.sleep(1)
            inputs = max([sum(r.status_counts.values()) for r in db.reports.fetch(key)] or [0])
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
    assert inputs >= 10, out
    assert "using 1 process to fuzz 1 test" in out, out
    assert db.fatal_failures.fetch(key) is None, out


# ----------------------------------------------------------------- the regression corpus

CORPUS = load_corpus(DEFAULT_CORPUS)


def assert_replays_as_expected(entry: dict, target_name: str | None = None) -> None:
    """A corpus entry must pass on a correct target; on a mutant it must still be caught."""
    from kernels.registry import get_target

    target = get_target(target_name or entry["target"])
    why = target.unavailable_reason("cpu")
    if why:
        pytest.skip(why)
    outcome, case = replay_entry(entry, target.name)
    found = outcome.evaluation.violations
    expect = "violation" if target.kind == "mutant" else "pass"
    if expect == "pass":
        assert not found, (f"{target.name} violates its contract on corpus case {case.describe()}: "
                           f"{found[0].one_line()} (first found: {entry.get('found')}: {entry.get('violation')})")
    else:
        assert found, f"the suite no longer catches mutant {target.name} on {case.describe()}"


@pytest.mark.parametrize("path, entry", [pytest.param(p, e, id=p.stem) for p, e in CORPUS] or [
    pytest.param(None, None, marks=pytest.mark.skip(reason="tests/corpus is empty"))])
def test_corpus_entry_replays(path: Path, entry: dict) -> None:
    assert entry["spec"]["op"] in ("softmax", "attention"), path
    assert_replays_as_expected(entry)


def test_corpus_replay_fails_on_broken_target_and_passes_on_correct(tmp_path: Path) -> None:
    spec = {"op": "softmax", "dtype": "float32", "batch": 0, "rows": 2, "length": 37, "layout": "contiguous",
            "explicit": None, "mask": {"kind": "none"}, "recipes": [{"kind": "normal"}], "seed": 3, "specials": []}
    entry = corpus_entry("torch.softmax", spec, "hand-made", expect="pass")
    path = write_corpus_entry(entry, tmp_path)
    (_, loaded), = load_corpus(tmp_path)
    assert loaded["spec"] == spec and path is not None
    assert write_corpus_entry(entry, tmp_path) is None  # the same case is not added twice
    assert_replays_as_expected(loaded, "torch.softmax")  # correct: passes
    from kernels.registry import get_target

    broken = get_target("softmax-tail-pad-zero")
    outcome, _ = replay_entry(loaded, broken.name)
    assert outcome.evaluation.violations  # broken: the replay reports the violation
    # and the replay test fails for a broken target treated as if it should pass
    import kernels.registry as reg

    fake = reg.Target("fake-broken", "softmax", broken.fn, broken.caps, "tail-pad-zero posing as correct",
                      kind="torch")
    reg.register(fake)
    try:
        with pytest.raises(AssertionError, match="violates its contract"):
            assert_replays_as_expected(loaded, "fake-broken")
    finally:
        reg._REGISTRY.pop("fake-broken", None)


def test_budget_stop_saves_no_failure_to_the_database() -> None:
    """Stopping a cell at its budget raises inside the property; nothing may be saved as a failure."""
    from hypothesis.database import InMemoryExampleDatabase

    from kernels.registry import get_target
    from verify import search

    db = InMemoryExampleDatabase()
    opts = search.CheckOptions(max_examples=10_000, seed=None, compare_naive=False, shrink=False, budget_s=1.5,
                               database=db, artifact_dir=".flashverify/test-artifacts")
    cell = search.check_cell(get_target("ref-online-softmax"), "float32", opts)
    assert cell.status == "passed" and cell.cut_by_budget
    failures = {k: v for k, v in db.data.items() if v and not k.endswith((b".pareto", b".secondary"))}
    assert not failures, f"{len(failures)} key(s) hold examples saved as failures"


def test_nightly_profile_is_random_even_on_a_ci_runner() -> None:
    """With CI=true Hypothesis's default profile is derandomized; the nightly profiles must not inherit that."""
    script = ("import conftest; from hypothesis import settings; "
              "print(*(settings.get_profile(n).derandomize for n in ('dev', 'nightly', 'replay', 'ci')))")
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=_env(CI="true", FLASHVERIFY_NO_INTERPRET="1"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "False", "True"]


@pytest.mark.parametrize("found_attr", ["interesting_test_cases", "interesting_examples"])
def test_budget_stop_reads_no_runner_counter_that_hypothesis_renamed(found_attr: str, monkeypatch) -> None:
    """The budget hook must work on runners of Hypothesis 6.155 and 6.168 alike (found on the GPU
    machine, 2026-11-29: 6.168.3 has no ``valid_examples``, and every property failed)."""
    from types import SimpleNamespace

    from hypothesis.internal.conjecture.data import Status
    from hypothesis.internal.conjecture.engine import ExitReason, RunIsComplete

    spec = importlib.util.spec_from_file_location("fuzz_conftest_under_test", ROOT / "tests" / "fuzz" / "conftest.py")
    fuzz_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz_conftest)
    monkeypatch.setattr(fuzz_conftest.BUDGET, "deadline", time.monotonic() - 1.0)
    monkeypatch.setattr(fuzz_conftest.BUDGET, "valid_examples", 0)
    monkeypatch.setattr(fuzz_conftest.BUDGET, "seconds", 1.0)
    monkeypatch.setattr(fuzz_conftest.BUDGET, "fired", False)
    calls = []
    wrapped = fuzz_conftest.budgeted_test_function(lambda runner, data: calls.append(data))
    # Only the attributes both versions share, plus one of the two names for failures found.
    runner = SimpleNamespace(statistics={}, best_observed_targets={}, exit_reason=None, **{found_attr: {}})
    wrapped(runner, SimpleNamespace(status=Status.INVALID))  # no valid case yet: keep going
    assert not fuzz_conftest.BUDGET.fired
    with pytest.raises(RunIsComplete):
        wrapped(runner, SimpleNamespace(status=Status.VALID))
    assert fuzz_conftest.BUDGET.fired and runner.exit_reason is ExitReason.finished
    assert "wall-clock budget" in runner.statistics["stopped-because"] and len(calls) == 2
    setattr(runner, found_attr, {b"key": object()})  # a failure found: never stopped, it must shrink
    fuzz_conftest.BUDGET.fired = False
    wrapped(runner, SimpleNamespace(status=Status.VALID))
    assert not fuzz_conftest.BUDGET.fired
