"""The command line: exit codes, messages, reports and replay, run as a user would."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from dataclasses import replace

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "verify", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_targets_lists_builtins_with_capabilities() -> None:
    r = run("targets", "--json")
    assert r.returncode == 0, r.stderr
    rows = {t["name"]: t for t in json.loads(r.stdout)}
    assert {"torch.softmax", "sdpa-math", "ref-online-softmax", "ref-blocked-attention"} <= set(rows)
    assert "cpu" in rows["torch.softmax"]["available_here"]
    # head dims a backend refuses: cuDNN's multiples of 8, efficient's of 4 (its -lse twin pads them)
    named = ("sdpa-cudnn", "sdpa-efficient", "sdpa-efficient-lse", "sdpa-math")
    assert [rows[n]["head_dim_multiple"] for n in named] == [8, 4, 1, 1]
    text = run("targets").stdout
    assert "D=1..512 (multiples of 4)" in text and "D=1..128 (multiples of 8)" in text
    import torch

    # "here" is this machine: no target is available on CUDA where torch sees no CUDA device
    assert any("cuda" in t["available_here"] for t in rows.values()) == torch.cuda.is_available()


def test_check_passes_a_correct_target_and_writes_report(tmp_path: Path) -> None:
    r = run("check", "--op", "softmax", "--target", "torch.softmax", "--dtype", "float32", "--dtype", "bf16",
            "--max-examples", "25", "--seed", "3", "--report", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((tmp_path / "report.json").read_text())
    cells = {c["dtype"]: c for c in doc["cells"]}
    assert set(cells) == {"float32", "bfloat16"}
    for c in cells.values():
        assert c["status"] == "passed" and c["examples"] == 25 and c["violation"] is None
        assert 0 <= c["max_error"] and c["max_error_over_tolerance"] <= 1
        assert c["worst_case_artifact"] and Path(c["worst_case_artifact"]).exists()


def test_violation_exits_1_prints_counterexample_and_replays(tmp_path: Path) -> None:
    r = run("check", "--op", "softmax", "--target", "softmax-tail-pad-zero", "--dtype", "float32",
            "--max-examples", "50", "--seed", "1", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "VIOLATION" in r.stdout and "shrunk counterexample" in r.stdout
    m = re.search(r"replay: (python -m verify replay (\S+))", r.stdout)
    assert m, r.stdout
    rep = run("replay", m.group(2), cwd=tmp_path)
    assert rep.returncode == 1 and "VIOLATION" in rep.stdout
    # the same artifact replays clean against a correct target: the inputs are what failed, not the file
    art = json.loads(Path(tmp_path / m.group(2)).with_suffix(".json").read_text())
    assert art["target"] == "softmax-tail-pad-zero" and art["violation"]["kind"] == "accuracy"
    # The JSON beside it (what a GPU run sends back) replays alone, rebuilt from its spec.
    sidecar = Path(tmp_path / m.group(2)).with_suffix(".json")
    alone = tmp_path / "elsewhere" / sidecar.name
    alone.parent.mkdir()
    alone.write_text(sidecar.read_text())
    rep = run("replay", str(alone), cwd=tmp_path)
    assert rep.returncode == 1 and "VIOLATION" in rep.stdout and "rebuilt from the spec (the .json alone" in rep.stdout
    # A description without a spec cannot rebuild anything: a clear refusal, exit 2.
    art["spec"] = None
    alone.write_text(json.dumps(art))
    rep = run("replay", str(alone), cwd=tmp_path)
    assert rep.returncode == 2 and "needs the .pt file" in rep.stderr and "Traceback" not in rep.stderr


@pytest.mark.parametrize("args, needle", [
    (["check", "--op", "softmax", "--target", "no-such-target"], "no registered target"),
    (["check", "--op", "softmax", "--target", "torch.softmax", "--dtype", "float7"], "unknown dtype"),
    (["check", "--op", "softmax", "--target", "not_a_module_xyz:fn"], "cannot import module"),
    (["check", "--op", "softmax", "--target", "missing_file.py:fn"], "does not exist"),
    (["check", "--op", "attention", "--target", "torch.softmax"], "computes softmax"),
    (["check", "--op", "softmax", "--target", "torch.softmax", "--max-examples", "0"], "at least 1"),
    (["check", "--op", "softmax"], "required"),
    (["replay", "nowhere.pt"], "no such artifact"),
    (["run", "--jobs", "0", "--budget", "5"], "--jobs must be 'auto' or a whole number of at least 1"),
    (["run", "--jobs", "two", "--budget", "5"], "--jobs must be 'auto' or a whole number of at least 1"),
    (["run", "--jobs", "2", "--isolation", "none", "--budget", "5"], "drop one of the two"),
])
def test_bad_input_exits_2_with_a_clear_message(args: list[str], needle: str) -> None:
    r = run(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert needle in r.stderr
    assert "Traceback" not in r.stderr


def test_user_file_targets_and_their_failures(tmp_path: Path) -> None:
    (tmp_path / "mykernels.py").write_text(textwrap.dedent("""
        import torch
        CONSTANT = 3
        def good(x):
            return torch.softmax(x.double(), -1).to(x.dtype)
        def raises(x):
            raise RuntimeError("kernel launch failed")
        def wrong_shape(x):
            return torch.softmax(x, -1)[..., :1]
    """))
    ok = run("check", "--op", "softmax", "--target", "mykernels.py:good", "--dtype", "float32",
             "--max-examples", "15", cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run("check", "--op", "softmax", "--target", "mykernels.py:raises", "--dtype", "float32",
              "--max-examples", "5", cwd=tmp_path)
    assert bad.returncode == 1 and "RuntimeError: kernel launch failed" in bad.stdout
    shape = run("check", "--op", "softmax", "--target", "mykernels.py:wrong_shape", "--dtype", "float32",
                "--max-examples", "5", cwd=tmp_path)
    assert shape.returncode == 1 and "expected shape" in shape.stdout
    notcallable = run("check", "--op", "softmax", "--target", "mykernels.py:CONSTANT", cwd=tmp_path)
    assert notcallable.returncode == 2 and "not a callable" in notcallable.stderr


def _a_file(tmp_path: Path) -> str:
    path = tmp_path / "afile.txt"
    path.write_text("not a directory")
    return str(path)


# Mistakes found before any work: in process (no interpreter start), each a usage error.
@pytest.mark.parametrize("args, needle", [
    (["check", "--op", "softmax", "--target", "torch.softmax", "--report", "{file}"], "that is a file"),
    (["check", "--op", "softmax", "--target", "torch.softmax", "--report", ""], "needs a directory name"),
    (["check", "--op", "softmax", "--target", "torch.softmax", "--timeout", "nan"], "--timeout must be a positive"),
    (["check", "--op", "softmax", "--target", "torch.softmax", "--timeout", "0"], "--timeout must be a positive"),
    (["check", "--op", "softmax", "--target", "triton-softmax", "--dtype", "float64"], "does not declare float64"),
    (["run", "--budget", "5", "--report", "{file}"], "that is a file"),
    (["run", "--budget", "5", "--targets", "torch.softmax", "--dtypes", "e4m3", "--report", "{dir}"],
     "nothing to search"),
    (["fuzz", "--hours", "nan"], "--hours must be a positive number"),
    (["fuzz", "--hours", "0.01", "--report", "{file}"], "that is a file"),
    (["mutants", "--only", "no-such-mutant"], "no mutant or control of that name"),
    (["mutants", "--device", "gpu"], "--device must be cpu or cuda"),
    (["mutants", "--max-examples", "0"], "--max-examples must be at least 1"),
    (["mutants", "--budget", "-5"], "--budget must be a positive"),
    (["mutants", "--only", "softmax-no-max-shift", "--json", "{file}/out.json"], "is a file, not a directory"),
    (["replay", "x.pt", "--device", "gpu"], "--device must be cpu or cuda"),
])
def test_mistakes_are_usage_errors_before_any_work(tmp_path: Path, capsys, args: list[str], needle: str) -> None:
    from verify.cli import EXIT_USAGE, main

    file = _a_file(tmp_path)
    assert main([a.replace("{file}", file).replace("{dir}", str(tmp_path / "rep")) for a in args]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert Path(file).read_text() == "not a directory"
    assert not (tmp_path / "rep").exists()  # refused before anything ran: nothing made


def test_a_hang_is_saved_as_found_and_replays_as_a_hang(tmp_path: Path) -> None:
    # The hung call's thread cannot be stopped, so the search stops at once (no shrinking, which
    # would call the target again) and keeps the input in flight; replay honours --timeout.
    (tmp_path / "slow.py").write_text(textwrap.dedent("""
        import time, torch
        def hangs(x):
            if x.shape[-1] > 3:
                time.sleep(600)
            return torch.softmax(x, -1)
    """))
    r = run("check", "--op", "softmax", "--target", "slow.py:hangs", "--dtype", "float32", "--timeout", "1",
            "--max-examples", "20", "--seed", "1", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "VIOLATION hang: the target did not return within 1 s" in r.stdout and "flaky" not in r.stdout
    saved = re.search(r"saved to (\S+\.pt)", r.stdout)
    assert saved and "[as found: not shrunk" in r.stdout
    rep = run("replay", saved.group(1), "--timeout", "1", cwd=tmp_path)
    assert rep.returncode == 1 and "VIOLATION hang" in rep.stdout and "Traceback" not in rep.stderr


@pytest.mark.parametrize("argv, field, want", [
    (["check", "--op", "softmax", "--target", "t", "--dtype", "float16", "--dtype", "float32"], "dtypes",
     ["float16", "float32"]),
    (["check", "--op", "softmax", "--target", "t", "--dtypes", "float16", "float32"], "dtypes", ["float16", "float32"]),
    (["run", "--dtypes", "float16", "--dtype", "bfloat16"], "dtypes", ["float16", "bfloat16"]),
    (["run", "--target", "a", "--targets", "b", "c"], "targets", ["a", "b", "c"]),
    (["fuzz", "--hours", "1", "--target", "a", "--dtypes", "float32", "float64"], "dtypes", ["float32", "float64"]),
    (["fuzz", "--hours", "1", "--target", "a", "--target", "b"], "targets", ["a", "b"]),
    (["mutants", "--only", "a", "b", "--only", "c"], "only", ["a", "b", "c"]),
])
def test_list_options_take_either_spelling_and_accumulate(argv: list[str], field: str, want: list[str]) -> None:
    """--dtype and --dtypes (and --target and --targets, where a command takes several) are one
    option in every command, taking one or more values and repeatable: a user who learnt one
    command's spelling is not told the other's is unknown."""
    from verify.cli import build_parser

    assert getattr(build_parser().parse_args(argv), field) == want


def test_an_explicit_masked_rows_policy_overrides_the_declared_one_either_way(tmp_path) -> None:
    """A target that declares zeros for fully masked rows is held to them by default; an explicit
    --masked-rows either loosens it (NaN rows pass), as nan replaces it; the artifact keeps the
    policy the rows were held to (what ``replay`` holds them to)."""
    import torch

    from kernels.registry import Target
    from verify import artifacts, engine
    from verify.capabilities import Capabilities

    def nan_rows(x: torch.Tensor) -> torch.Tensor:
        out = torch.softmax(x.float(), -1).to(x.dtype)
        return torch.where(torch.isinf(x).all(-1, keepdim=True) & (x < 0).all(-1, keepdim=True),
                           torch.full_like(out, float("nan")), out)

    from verify import search

    target = Target("nan-rows", "softmax", nan_rows, Capabilities(dtypes=("float32",), masked_rows="zero"),
                    "NaN for fully masked rows, declared zero")
    x = torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]])
    assert engine.masked_rows_for(target, "declared") == "zero"
    assert engine.masked_rows_for(target, "either") == "either"
    assert engine.check_softmax_input(target, x).evaluation.violations  # declared zero
    assert engine.check_softmax_input(target, x, masked_rows="either").evaluation.violations == []
    assert engine.check_softmax_input(target, x, masked_rows="nan").evaluation.violations == []
    with pytest.raises(ValueError, match=r"masked_rows must be one of \('declared', 'either', 'nan', 'zero'\)"):
        engine.masked_rows_for(target, "none")
    # A search finds the declared policy broken and records it for the replay.
    opts = search.CheckOptions(max_examples=60, seed=1, artifact_dir=str(tmp_path), compare_naive=False)
    cell = search.check_cell(target, "float32", opts)
    assert cell.status == "violated" and "masked" in cell.violation.one_line(), cell.violation
    art = artifacts.load(cell.artifact)
    assert art.options["masked_rows"] == "declared" and art.options["masked_rows_checked"] == "zero"
    loose = search.check_cell(target, "float32", replace(opts, masked_rows="either"))
    assert loose.status == "passed", loose.violation
