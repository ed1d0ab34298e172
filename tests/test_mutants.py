"""Mutation testing: every CPU-runnable mutant is killed; its control (same code, no bug) is not.

Each mutant gets at most 300 examples per dtype (about a minute of search on the
2-core CI machine at the slowest); the kill table with times is printed by
``python -m verify mutants``.  Seeds are fixed so CI is reproducible.
"""

from __future__ import annotations

import pytest

from kernels.mutants import MUTANTS, all_mutants
from verify import mutation, search

OPTS = search.CheckOptions(max_examples=300, seed=12345, compare_naive=False, shrink=False,
                           artifact_dir=".flashverify/test-artifacts")


def test_catalog_is_complete_and_referenced() -> None:
    assert len(MUTANTS) >= 16
    assert any(m.form == "triton" for m in ALL_MUTANTS)
    classes = {m.bug_class for m in MUTANTS}
    assert len(classes) >= 12
    for m in MUTANTS:
        assert m.description and m.reference.startswith("https://"), m.name


ALL_MUTANTS, ALL_CONTROLS = all_mutants()


@pytest.mark.parametrize("mutant", ALL_MUTANTS, ids=lambda m: m.name)
def test_mutant_is_killed(mutant) -> None:
    r = mutation.run_one(mutant, OPTS)
    if r.status == "unavailable":  # the stream-order mutants are declared for the GPU: no stream on the CPU
        pytest.skip(r.violation)
    assert r.status == "killed", f"{mutant.name} survived {OPTS.max_examples} examples per dtype"
    assert r.counterexample


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=lambda m: m.name)
def test_control_is_not_killed(control) -> None:
    # An interpreted Triton control costs about 0.7 s an example (50 s for 25 a dtype, CI's
    # fourth slowest test, 2026-12-01): 12 a dtype.  ``python -m verify mutants`` runs each
    # control with its mutants' options (300 examples a dtype by default).
    # 8 a dtype for the Triton ones since 2026-12-03 (CI's time, see tests/test_policy.py).
    examples = 8 if control.form == "triton" else 25
    r = mutation.run_one(control, search.CheckOptions(max_examples=examples, seed=777, compare_naive=False,
                                                      shrink=False, artifact_dir=".flashverify/test-artifacts"))
    assert r.status == "control-passed", r.violation


def test_a_mutant_the_suite_failed_on_is_an_error_left_out_of_the_score(tmp_path) -> None:
    # A runner whose every cell is an error of the suite (a stalled worker): no kill, no
    # survivor, and the summary names it apart.
    from reports import campaign
    from reports.campaign import CellObserver, CellRun
    from verify.search import CellResult

    class Stalled:
        def run(self, target, dtype, base, budget_s, seed, max_examples, tick=None, observe=True):
            cell = CellResult(target.name, target.op, dtype, base.device, status="error",
                              reason="the suite stalled, not the target: ...")
            return CellRun(cell, CellObserver(target.op), budget_s, 0, "violation")

    mutants, _ = all_mutants()
    m = next(x for x in mutants if x.name == "softmax-no-max-shift")
    opts = campaign.CampaignOptions(device="cpu", seed=1, artifact_dir=str(tmp_path))
    r, limited = campaign.run_mutant(m, opts, 1.0, Stalled())
    assert r.status == "error" and not limited and r.violation.startswith("the suite stalled")
    killed = mutation.KillResult("x", "softmax", "c", "", "python", "killed", seconds_to_kill=1.0)
    s = mutation.summary([r, killed])
    assert s["errors"] == [m.name] and s["survivors"] == [] and s["mutants"] == 1 and s["mutation_score"] == 1.0
