"""``python -m verify fuzz`` and the regression corpus (CPU, well under 90 s with -n 4).

The corpus replay (``test_corpus_entry_replays``) is a normal CI test: every counterexample
the nightly fuzzer ever committed to ``tests/corpus`` is re-checked on every run.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import hypothesis
import pytest

from verify.fuzz import DEFAULT_CORPUS, corpus_entry, load_corpus, replay_entry, write_corpus_entry

ROOT = Path(__file__).resolve().parents[1]


def _cmd(tmp: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "verify", "fuzz", "--database", str(tmp / "db"), "--corpus", str(tmp / "corpus"),
            *args]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT))


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
        assert d["max_ratio"] <= 1 and d["worst_case"]
    assert not (tmp_path / "corpus").exists() or not list((tmp_path / "corpus").iterdir())
    assert (tmp_path / "rep" / "summary.md").exists()


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


def test_sigterm_mid_run_still_writes_report(tmp_path: Path) -> None:
    rep = tmp_path / "rep"
    p = subprocess.Popen(_cmd(tmp_path, "--hours", "1", "--targets", "torch.softmax", "--report", str(rep),
                              "--engine", "inprocess", "--grace", "30"),
                         cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        state = rep / "state" / "torch_softmax.pkl"
        t0 = time.time()
        while not state.exists() and time.time() - t0 < 60:
            time.sleep(0.2)
        assert state.exists(), "the child never started"
        time.sleep(2)
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
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
    (["--hours", "0.001", "--database", "redis://localhost:6379/0", "--targets", "torch.softmax"], "redis"),
    (["--hours", "0", "--targets", "torch.softmax"], "positive"),
    (["--hours", "0.001", "--targets", "no-such-target"], "no-such-target"),
])
def test_bad_arguments_exit_2(tmp_path: Path, args: list[str], needle: str, capsys) -> None:
    if "redis://" in " ".join(args) and importlib.util.find_spec("redis") is not None:
        pytest.skip("redis is installed here; the missing-package message cannot be shown")
    from verify.cli import main

    rc = main(["fuzz", *args, "--report", str(tmp_path / "rep"), "--corpus", str(tmp_path / "corpus")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert needle in err and "Traceback" not in err


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
