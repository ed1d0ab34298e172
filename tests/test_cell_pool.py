"""The campaign's pool: work shared out to runners side by side, within one deadline."""

from __future__ import annotations

import threading
import time

import pytest

from reports import campaign, report_json
from reports.cell_pool import CellPool, Job, auto_jobs, share_for, torch_threads_per_job


class _Runner:
    """A stand-in runner: the pool only hands it to the jobs."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_one_job_shares_as_the_sequential_campaign_did() -> None:
    # (deadline - now) over the jobs left, at least the floor, 0 for a cell nothing runs in.
    assert share_for(1, 1, 10.0, 70.0, 0.0, 6, 0.5) == pytest.approx(10.0)
    assert share_for(1, 1, 69.9, 70.0, 0.0, 6, 0.5) == pytest.approx(0.5)
    assert share_for(0, 1, 10.0, 70.0, 0.0, 6, 0.5) == 0.0
    assert share_for(1, 1, 80.0, 70.0, 0.0, 1, 0.0) == 0.0  # past the deadline, no floor: nothing


def test_several_jobs_share_what_the_runners_can_still_give() -> None:
    # Two runners, 60 s left, one job in flight promised 20 s more, four jobs to go: (120 - 20) / 4.
    assert share_for(1, 2, 0.0, 60.0, 20.0, 4, 0.0) == pytest.approx(25.0)
    # The last job with every runner free gets what the clock has left, not twice that.
    assert share_for(1, 4, 0.0, 60.0, 0.0, 1, 0.0) == pytest.approx(60.0)
    # With more runners each job gets more: the budget stays wall time.
    assert share_for(1, 4, 0.0, 60.0, 0.0, 8, 0.0) == pytest.approx(4 * share_for(1, 1, 0.0, 60.0, 0.0, 8, 0.0))


class _Clock:
    """A clock the jobs advance: shares come out exact, whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("first_takes, second_share", [
    # Job 0 is promised 1 s and takes 2: the deadline moves back by the 1 s overrun, so job 1
    # gets (3 + 1 - 2) / 2 = 1 s, as planned (without the rule: (3 - 2) / 2 = 0.5 s).
    (2.0, 1.0),
    # Job 0 takes 4 s: the move is capped at half the phase's 3 s, so job 1 at t = 4 gets
    # (3 + 1.5 - 4) / 2 = 0.25 s.
    (4.0, 0.25),
])
def test_an_overrun_moves_the_deadline_back_instead_of_starving_the_jobs_after_it(first_takes: float,
                                                                                  second_share: float) -> None:
    clock = _Clock()
    shares: list[float] = []

    def job(i: int) -> Job:
        def run(runner: _Runner, share: float) -> int:
            shares.append(share)
            clock.now += first_takes if i == 0 else share
            return i
        return Job(run)

    pool = CellPool(1, isolated=False, runners=[_Runner("a")])
    assert pool.run([job(i) for i in range(3)], 3.0, 0.0, clock=clock) == [0, 1, 2]
    assert shares[0] == pytest.approx(1.0)
    assert shares[1] == pytest.approx(second_share)
    assert shares[2] == pytest.approx(second_share)  # the last job: what is left of the moved deadline
    assert clock.now == pytest.approx(first_takes + 2 * second_share)


def test_jobs_run_side_by_side_and_come_back_in_order() -> None:
    both_in_flight = threading.Barrier(2, timeout=30)  # passes only if two jobs run at once
    seen: list[tuple[str, float]] = []
    done_order: list[int] = []

    def job(i: int) -> Job:
        def run(runner: _Runner, share: float):
            if i < 2:
                both_in_flight.wait()
            seen.append((runner.name, share))
            return i * 10
        return Job(run, weight=0 if i == 3 else 1)

    pool = CellPool(2, isolated=False, runners=[_Runner("a"), _Runner("b")])
    out = pool.run([job(i) for i in range(5)], time.perf_counter() + 40.0, 0.0,
                   done=lambda i, r: done_order.append(i))
    assert out == [0, 10, 20, 30, 40]
    assert sorted(done_order) == [0, 1, 2, 3, 4]
    assert {name for name, _ in seen} == {"a", "b"}
    shares = [share for _, share in seen]
    assert 0.0 in shares  # the weightless job
    assert max(shares) <= 40.0 and sorted(shares)[1] > 15.0  # 2 x 40 s over 4 weighted jobs, less the promised
    pool.close()
    assert all(r.closed for r in pool.runners)


def test_a_job_that_raises_stops_the_pool_and_is_raised() -> None:
    started: list[int] = []

    def job(i: int) -> Job:
        def run(runner, share):
            started.append(i)
            if i == 1:
                raise RuntimeError("boom")
            return i
        return Job(run)

    pool = CellPool(1, isolated=False)
    with pytest.raises(RuntimeError, match="boom"):
        pool.run([job(i) for i in range(4)], time.perf_counter() + 10.0)
    assert started == [0, 1]


def test_auto_jobs_follow_the_host_on_cuda_and_stay_one_on_the_cpu() -> None:
    assert auto_jobs("cpu", cpus=64) == 1
    assert auto_jobs("cuda", cpus=16) == 4 and auto_jobs("cuda:1", cpus=2) == 1 and auto_jobs("cuda", cpus=128) == 4
    assert torch_threads_per_job(4, cpus=16) == 4 and torch_threads_per_job(3, cpus=2) == 1
    with pytest.raises(ValueError, match="isolated"):
        CellPool(2, isolated=False)
    with pytest.raises(campaign.CampaignError, match="at least 1"):
        campaign.resolve_jobs(0, "cpu")
    with pytest.raises(campaign.CampaignError, match="at least 1"):
        campaign.resolve_jobs("two", "cpu")
    with pytest.raises(campaign.CampaignError, match="drop one of the two"):
        campaign.resolve_jobs("2", "cuda", "none")
    # --isolation none keeps cells in this process, so auto gives one job there, on CUDA too.
    assert campaign.resolve_jobs("auto", "cuda", "none") == 1 and campaign.resolve_jobs("3", "cpu") == 3


def test_a_campaign_of_two_jobs_searches_every_cell_in_worker_processes(tmp_path) -> None:
    opts = campaign.CampaignOptions(device="cpu", budget_s=8, targets=["torch.softmax", "ref-two-pass-softmax"],
                                    dtypes=("float32", "float16"), seed=3, mutants=False, fa3=False,
                                    progress="none", jobs=2, artifact_dir=str(tmp_path / "cex"))
    result = campaign.run_campaign(opts)
    # In the plan's order (target by target, dtype by dtype), whichever finished first.
    pairs = [(r.cell.target, r.cell.dtype) for r in result.runs]
    names = list(dict.fromkeys(name for name, _ in pairs))
    assert sorted(names) == ["ref-two-pass-softmax", "torch.softmax"]
    assert pairs == [(name, d) for name in names for d in result.dtypes]
    assert all(r.cell.status == "passed" and r.cell.examples > 0 for r in result.runs)
    # Four cells on two runners: the first two started together, each given about half of the
    # 8 s (one runner would have given the first a quarter).
    assert max(r.budget_s for r in result.runs) > 8 / 4 * 1.5
    doc = report_json.build_document(result)
    assert doc["environment"]["jobs"] == 2
    report_json.validate(doc)
