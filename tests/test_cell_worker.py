"""A target that kills its process or its CUDA context must not end the campaign.

The faults are simulated on the CPU by ``tests/targets/crashing.py``: the worker
process really dies (``os._exit``) or really believes its context is lost.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from kernels.registry import get_target
from reports import campaign
from reports.cell_worker import IsolatedCells
from reports.check_report import cell_to_dict
from verify import artifacts, engine, search
from verify.loader import load_target
from verify.search import CheckOptions

CRASHING = Path(__file__).parent / "targets" / "crashing.py"


def _target(func: str):
    return load_target(f"{CRASHING}:{func}", "softmax")


def _opts(tmp_path: Path, **kw) -> CheckOptions:
    return CheckOptions(max_examples=200, seed=5, artifact_dir=str(tmp_path / "cex"), compare_naive=False, **kw)


def test_a_lost_context_is_reported_as_found_and_the_other_dtypes_are_not_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(engine, "_uses_cuda", lambda values: True)
    monkeypatch.setattr(engine, "_wait_for_device", lambda: None)
    monkeypatch.setattr(engine, "device_context_alive", lambda: False)
    target = _target("raise_cuda_error")
    cells = search.check_target(target, _opts(tmp_path, dtypes=("float32", "float16")))
    lost, rest = cells
    assert lost.status == "violated" and lost.context_lost
    assert lost.violation.kind == "device-error" and "misaligned address" in lost.violation.message
    assert "not shrunk" in lost.counterexample
    # the saved input is the one in flight: it triggers the fault again on replay
    art = artifacts.load(lost.artifact)
    assert art.inputs["x"].shape[-1] >= 5
    assert rest.status == "error" and "context was lost in the float32 cell" in rest.reason


def test_an_ordinary_exception_on_a_live_context_stays_an_exception_violation(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(engine, "_uses_cuda", lambda values: True)
    monkeypatch.setattr(engine, "_wait_for_device", lambda: None)
    monkeypatch.setattr(engine, "device_context_alive", lambda: True)
    cell = search.check_cell(_target("raise_cuda_error"), "float32", _opts(tmp_path))
    assert cell.status == "violated" and not cell.context_lost
    assert cell.violation.kind == "exception"


def test_worker_survives_a_hard_crash_and_a_lost_context(tmp_path) -> None:
    runner = IsolatedCells()
    base = _opts(tmp_path)
    good = get_target("torch.softmax")
    try:
        crashed = runner.run(_target("exit_hard"), "float32", base, 20.0, 1, 200).cell
        assert crashed.status == "violated" and crashed.violation.kind == "crash"
        assert "exit code 7" in crashed.violation.message
        # the input in flight was recorded before the call, and replays the crash's trigger
        assert crashed.artifact and artifacts.load(crashed.artifact).inputs["x"].shape[-1] >= 3
        after = runner.run(good, "float32", base, 3.0, 1, 30)
        assert after.cell.status == "passed" and after.cell.examples > 0
        assert runner.workers_started == 2
        lost = runner.run(_target("lose_context"), "float32", base, 20.0, 1, 200).cell
        assert lost.status == "violated" and lost.context_lost and lost.violation.kind == "device-error"
        again = runner.run(good, "float16", base, 3.0, 1, 30)
        assert again.cell.status == "passed"
        assert runner.workers_started == 3  # the worker that lost its context was replaced
    finally:
        runner.close()


def _killed_after_a_warm_cell(tmp_path: Path, func: str, grace_s: float):
    """The run of ``crashing.func`` on a worker warmed by one passing cell, then given a stall
    allowance of 2 s, and how many workers the runner started."""
    # The warm cell pays the worker's imports, under a stall allowance of a minute: on a loaded
    # machine they outlasted 2 s (CI, 2026-12-01) and the worker was killed before its first
    # example.  The allowance is read at each run, so the cell after it gets 2 s.
    runner = IsolatedCells(grace_s=grace_s, stall_s=60.0)
    try:
        warm = runner.run(get_target("torch.softmax"), "float32", _opts(tmp_path), 0.3, 1, 5).cell
        assert warm.status == "passed", warm.violation
        runner.stall_s = 2.0
        return runner.run(_target(func), "float32", _opts(tmp_path), 0.5, 1, 10), runner.workers_started
    finally:
        runner.close()


def test_worker_that_overruns_its_cell_is_killed_and_its_input_saved(tmp_path) -> None:
    # The target sleeps inside a function of its own: the kill's message must also point there,
    # in the target's thread, so a reader can tell a stuck target from a stuck suite.
    run, workers = _killed_after_a_warm_cell(tmp_path, "sleep_forever", 3.0)
    assert workers == 1
    cell = run.cell
    assert cell.status == "violated" and cell.violation.kind == "hang"
    message = cell.violation.message
    assert "did not finish within its budget + 3 s and started no example for 2 s" in message
    assert cell.artifact is not None
    assert "stacks at the kill" in message, message
    target_stack = message.split("[target] ", 1)[1].split(";")[0]
    assert "tests/targets/crashing.py:" in target_stack and "sleep_forever" in target_stack, message
    assert "[main] " in message, message


def test_a_long_shrink_past_the_grace_is_progress_not_a_hang(tmp_path) -> None:
    # Rows of 2+ elements are wrong: the search finds one at once and Hypothesis shrinks it,
    # a few hundred examples, far past budget + grace.  Each example starts with a write of
    # the in-flight file, the worker's heartbeat, so the parent lets the shrink finish.
    runner = IsolatedCells(grace_s=0.3, stall_s=30.0)
    t0 = time.monotonic()
    try:
        # No probe round: a probe's long rows would keep the slow shrink going for minutes.
        # A budget of 1.5 s: with 0.5 s a loaded CI machine ran out of it before the first wrong
        # row (2026-11-30), and the test needs the search to find one.
        run = runner.run(_target("slow_and_wrong"), "float32", _opts(tmp_path, probe_examples=0), 1.5, 1, 50)
    finally:
        runner.close()
    elapsed = time.monotonic() - t0
    cell = run.cell
    assert cell.status == "violated" and cell.violation.kind == "accuracy", cell.violation
    assert elapsed > 1.5 + 0.3 + 2.0  # the shrink ran on past budget + grace, and was let finish


def test_campaign_in_worker_processes_matches_the_cells_run_in_process(tmp_path) -> None:
    opts = campaign.CampaignOptions(device="cpu", budget_s=6, targets=["torch.softmax"], dtypes=("float32",),
                                    seed=3, mutants=False, fa3=False, progress="none", isolation="process",
                                    artifact_dir=str(tmp_path / "cex"))
    result = campaign.run_campaign(opts)
    (run,) = result.runs
    assert run.cell.status == "passed" and run.cell.examples > 0
    assert run.observer.records and len(run.observer.records) == run.cell.examples


def test_replay_rebuilds_a_misaligned_input_with_its_offset(tmp_path) -> None:
    from strategies.replay import case_from_dict
    from strategies.softmax import SoftmaxCase

    case = None
    # any drawn case will do; force the misaligned layout on it
    from hypothesis import given, settings
    import strategies

    @settings(max_examples=1, database=None)
    @given(strategies.softmax_cases(dtypes=("float32",), max_length=8))
    def grab(c):
        nonlocal case
        case = c

    grab()
    d = case.spec.to_dict()
    d["layout"] = "misaligned"
    case = case_from_dict(d)
    assert isinstance(case, SoftmaxCase)
    cell = search.CellResult("torch.softmax", "softmax", "float32", "cpu")
    path = search._save(case, cell, _opts(tmp_path), None, "violation")
    inputs, how = artifacts.replay_inputs(artifacts.load(path), "cpu")
    assert how.startswith("rebuilt from the spec")
    assert inputs["x"].storage_offset() == 1 and inputs["x"].data_ptr() % 8 == 4
    assert torch.equal(inputs["x"].nan_to_num(), case.build("cpu").nan_to_num())


def test_mutants_after_a_lost_context_are_reported_not_run(tmp_path, monkeypatch) -> None:
    from kernels.mutants import Mutant
    from verify import mutation

    monkeypatch.setattr(engine, "_uses_cuda", lambda values: True)
    monkeypatch.setattr(engine, "_wait_for_device", lambda: None)
    monkeypatch.setattr(engine, "device_context_alive", lambda: False)
    breaker = _target("raise_cuda_error")
    fake = [Mutant("breaks-context", "softmax", "d", "c", "r", breaker.fn, breaker.caps),
            Mutant("next-one", "softmax", "d", "c", "r", breaker.fn, breaker.caps)]
    monkeypatch.setattr(mutation, "all_mutants", lambda: (fake, []))
    monkeypatch.setattr(mutation, "get_target", lambda name: breaker)
    first, second = mutation.run_all(_opts(tmp_path, dtypes=("float32",)))
    assert first.status == "killed" and first.context_lost
    assert second.status == "unavailable" and second.violation.startswith("not run: breaks-context")


def test_hang_stacks_summarizes_a_faulthandler_dump() -> None:
    from reports.cell_worker import hang_stacks

    dump = """Thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in wait
  File "/usr/lib/python3.11/threading.py", line 629 in wait
  File "/usr/lib/python3.11/threading.py", line 1045 in _bootstrap

Thread 0x00007f0000000001 (most recent call first):
  File "/x/site-packages/torch/cuda/__init__.py", line 900 in synchronize
  File "/x/site-packages/torch/_ops.py", line 10 in a
  File "/x/site-packages/torch/_ops.py", line 11 in b
  File "/x/site-packages/torch/_ops.py", line 12 in c
  File "/repo/verify/oracle.py", line 456 in attention_truth
  File "/repo/verify/engine.py", line 800 in check_attention_input
  File "/repo/reports/cell_worker.py", line 160 in _worker_main
"""
    line = hang_stacks(dump.replace("/repo/", str(Path(__file__).resolve().parents[1]) + "/"))
    assert line == ("[main] torch/cuda/__init__.py:900 synchronize < torch/_ops.py:10 a < torch/_ops.py:11 b "
                    "< torch/_ops.py:12 c < ... verify/oracle.py:456 attention_truth")
    assert hang_stacks("") == ""


@pytest.mark.parametrize("exempt, budget", [(True, 2.0), (False, 1.0)])
def test_the_first_examples_compile_time_is_left_out_of_the_budget_where_asked(tmp_path, exempt: bool,
                                                                                budget: float) -> None:
    # The first call takes 1.5 s, as a GPU compile does.  Exempt, the cell searches for its
    # whole 2 s budget after it: it cannot end before 1.5 + 2 s.  Not exempt, the first
    # example uses up the 1 s budget and the cell ends after it.
    from tests.targets import crashing

    crashing._CALLS["n"] = 0
    cell = search.check_cell(_target("slow_first_call"), "float32",
                             _opts(tmp_path, budget_s=budget, exempt_warmup=exempt, probe_examples=0))
    assert cell.status == "passed" and cell.cut_by_budget, cell.violation
    if exempt:
        assert cell.seconds >= 3.5 and cell.examples > 1
    else:
        assert cell.examples == 1


def test_a_campaign_cell_leaves_its_warmup_out_once_across_its_chunks(tmp_path, monkeypatch) -> None:
    # run_cell searches a cell as chunks (here the first is 3 examples; how many follow depends
    # on the examples' speed): the warm-up of the first is left out of the cell's budget, so
    # the chunks after it still get the whole 2 s of search between them.
    from tests.targets import crashing

    monkeypatch.setattr(campaign, "FIRST_CHUNK", 3)
    crashing._CALLS["n"] = 0
    base = _opts(tmp_path, exempt_warmup=True, probe_examples=0)
    run = campaign.run_cell(_target("slow_first_call"), "float32", base, 2.0, 1, 10_000, observe=False)
    assert run.cell.status == "passed" and run.stop_reason == "budget"
    assert run.cell.warmup_seconds >= 1.5
    assert cell_to_dict(run.cell)["warmup_seconds"] == round(run.cell.warmup_seconds, 3)  # the report says so
    # 1.5 s of warm-up and 2 s of search, less at most an example's time (run_cell stops a cell
    # whose time left is less than its mean example); without the rule the cell ends at ~2 s
    assert run.cell.seconds >= 3.0


def test_a_stall_outside_the_target_is_an_error_of_the_suite_not_a_hang(tmp_path) -> None:
    # The target returns; then the suite's own oracle never does.  No call of the target is in
    # flight at the kill, so the cell is the suite's error, with the stacks to say where.
    cell = _killed_after_a_warm_cell(tmp_path, "stall_the_oracle", 1.0)[0].cell
    assert cell.status == "error" and cell.violation is None
    assert cell.reason.startswith("the suite stalled, not the target"), cell.reason
    assert "[main] " in cell.reason and "crashing.py" in cell.reason and "[target]" not in cell.reason
    assert "the input in flight:" in cell.reason
