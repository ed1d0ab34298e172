"""Mutation testing: every CPU-runnable mutant is killed; its control (same code, no bug) is not.

Each mutant gets at most 300 examples per dtype (about a minute of search on the
2-core CI machine at the slowest); the kill table with times is printed by
``python -m verify mutants``.  Seeds are fixed so CI is reproducible.
"""

from __future__ import annotations

import math

import pytest

from kernels.mutants import MUTANTS, all_mutants
from kernels.registry import get_target
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


def test_a_budget_too_short_for_mutation_testing_is_said_before_the_work(monkeypatch, tmp_path, capsys) -> None:
    """Mutation testing takes at least 1 s a mutant and a control dtype whatever its slice: a
    budget whose slice is shorter gets a note at the start with the least it takes, and the
    report keeps that floor beside the slice."""
    from reports import campaign

    mutants, controls = all_mutants()
    live = [m for m in mutants + controls if get_target(m.name).unavailable_reason("cpu") is None]
    want = sum(1 if m.bug_class != "control" else len(m.caps.dtypes) for m in live)
    assert campaign.mutation_floor_s("cpu", 1) == pytest.approx(want * campaign.MIN_MUTANT_DTYPE_S)
    assert campaign.mutation_floor_s("cpu", 4) == pytest.approx(want * campaign.MIN_MUTANT_DTYPE_S / 4)
    assert want > 20
    # The mutants themselves are not run here: the note comes before them.
    monkeypatch.setattr(campaign, "run_mutation",
                        lambda opts, slice_s, progress, pool=None: {"enabled": True, "budget_s": slice_s})
    opts = campaign.CampaignOptions(device="cpu", budget_s=3, targets=["torch.softmax"], dtypes=("float32",),
                                    seed=3, fa3=False, progress="plain", isolation="none", jobs=1,
                                    artifact_dir=str(tmp_path / "cex"))
    result = campaign.run_campaign(opts)
    out = capsys.readouterr().out
    floor = campaign.mutation_floor_s("cpu", 1)
    assert f"note: mutation testing takes at least {floor:.0f}s here" in out, out
    assert f"a --budget of {math.ceil(floor / campaign.MUTATION_SHARE)}s or more keeps to it" in out
    assert result.mutation["budget_s"] < floor
    roomy = campaign.CampaignOptions(**{**opts.__dict__, "budget_s": math.ceil(floor / campaign.MUTATION_SHARE) + 1,
                                        "max_examples": 5})
    campaign.run_campaign(roomy)
    assert "note: mutation testing" not in capsys.readouterr().out
