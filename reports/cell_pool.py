"""Campaign work (cells, mutants) run side by side on several worker processes within one deadline.

A check's time on a GPU is mostly its host side: the launches, the oracle's setup and its
mpmath fallback for undecided elements, the contract's bookkeeping.  On the H200 a small
attention check took about 0.3 s of which the kernel was microseconds (2026-12-04), so one
worker leaves the GPU idle most of the time and the 16-core host nearly so.  ``CellPool``
runs ``jobs`` runners (``reports.cell_worker``: each its own worker process when isolated),
one thread each, so that many checks are in flight at once.

Shares.  Every piece of work (a cell, a mutant) is a job with a weight (0 for a cell nothing
runs in, 1 otherwise).  When a runner frees, the next job in order gets

    share = weight * clip((jobs * (deadline - now) - sum of in-flight jobs' remaining shares)
                          / weights not yet started, floor_s, deadline - now)

of the runner's time: what the runners can still give before the deadline, less what the
jobs in flight were promised, split evenly over the jobs left, and never past the deadline
itself (no runner can give a job more time than the clock has left).  A job that ends early
(a mutant killed in its first examples) leaves its time to the jobs after it.  With one job
this is exactly the sequential split the campaign always made: (deadline - now) over the
jobs left.  With ``floor_s`` the total may overrun the deadline, as the sequential split did.

Overruns.  A job can run past its share: a violation's shrink (not bounded by the budget), a
first example that compiles and autotunes, the worker's grace before a hang verdict.  Charged
to the jobs after it, one such job starved them: on the H200 four cuDNN cells that shrank took
124 s of runner time against about 36 planned, and the 18 cells after them got 0.5-6.3 s, our
own attention kernel's 0.5-1.6 s and one example each (2026-12-04, ``verify run --device cuda
--budget 200``).  So the deadline moves back by each overrun over the runners (the runner time
it cost), up to MAX_LATE_SHARE of the phase's time: the budget bounds the search, and
overruns come on top of it, within that limit.

Results come back in the jobs' order whatever order they finish in; ``done`` is called as
each finishes, one call at a time.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from reports.cell_worker import InProcessCells, IsolatedCells

#: Most runners ``auto`` starts on a CUDA device; each is a process with its own CUDA context.
MAX_AUTO_JOBS = 4
#: Host cores a runner is given on a CUDA device (``auto``): the oracle's fallback and the
#: contract run there, a torch thread each.
CORES_PER_JOB = 4
#: The most a phase's deadline moves back for jobs' overruns, as a share of its time.
MAX_LATE_SHARE = 0.5


@dataclass(frozen=True)
class Job:
    """One piece of work: ``run(runner, share_s)`` returns its result."""

    run: Callable[[Any, float], Any]
    weight: int = 1


def auto_jobs(device: str, cpus: int | None = None) -> int:
    """Runners ``--jobs auto`` starts: on CUDA one per CORES_PER_JOB host cores, at most
    MAX_AUTO_JOBS (the H200's 16 cores: 4); on the CPU 1, the checks themselves being the
    load (torch's threads already take the cores)."""
    if not device.startswith("cuda"):
        return 1
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(1, min(MAX_AUTO_JOBS, cpus // CORES_PER_JOB))


def torch_threads_per_job(jobs: int, cpus: int | None = None) -> int:
    """The host cores' share of one runner (at least 1), for its torch threads."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(1, cpus // max(jobs, 1))


def share_for(weight: int, jobs: int, now: float, deadline: float, promised_s: float, weights_left: int,
              floor_s: float) -> float:
    """The seconds a job of ``weight`` gets (the module docstring's rule): ``promised_s`` is what
    the jobs in flight may still use, ``weights_left`` the weights of the jobs not started,
    this one's included."""
    if weight <= 0:
        return 0.0
    left = max(deadline - now, 0.0)
    even = (jobs * left - promised_s) / max(weights_left, 1)
    return weight * max(min(even, left), floor_s)


class CellPool:
    """``jobs`` runners and a thread for each; ``isolated`` runners are worker processes
    (``IsolatedCells``), needed for more than one job."""

    def __init__(self, jobs: int, isolated: bool, threads_per_job: int | None = None,
                 runners: Sequence[Any] | None = None) -> None:
        """``runners``: use these (one a job) instead of making them."""
        if jobs < 1:
            raise ValueError(f"a pool needs at least one job, got {jobs}")
        if jobs > 1 and not isolated and runners is None:
            raise ValueError("more than one job needs isolated runners (worker processes)")
        if runners is not None and len(runners) != jobs:
            raise ValueError(f"{jobs} jobs need {jobs} runners, got {len(runners)}")
        self.jobs = jobs
        self.runners = list(runners) if runners is not None else [
            IsolatedCells(torch_threads=threads_per_job) if isolated else InProcessCells() for _ in range(jobs)]
        self._report = threading.Lock()

    def run(self, work: Sequence[Job], deadline: float, floor_s: float = 0.0,
            done: Callable[[int, Any], None] | None = None,
            clock: Callable[[], float] = time.perf_counter) -> list[Any]:
        """Every job of ``work``, shared out until ``deadline`` (on ``clock``; moved back for
        overruns, see the module docstring); their results in ``work``'s order.  An exception
        in a job is raised here once every job in flight has ended (the rest are not started)."""
        results: list[Any] = [None] * len(work)
        # "late": how far the deadline has moved back for overruns (the module docstring)
        state = {"next": 0, "left": sum(j.weight for j in work), "error": None, "late": 0.0}
        max_late = MAX_LATE_SHARE * max(deadline - clock(), 0.0)
        promised: dict[int, tuple[float, float]] = {}  # job index -> (start, share)
        lock = threading.Lock()

        def take() -> tuple[int, float] | None:
            with lock:
                i = state["next"]
                if i >= len(work) or state["error"] is not None:
                    return None
                state["next"] += 1
                now = clock()
                owed = sum(max(share - (now - began), 0.0) for began, share in promised.values())
                share = share_for(work[i].weight, self.jobs, now, deadline + state["late"], owed, state["left"],
                                  floor_s)
                state["left"] -= work[i].weight
                promised[i] = (now, share)
                return i, share

        def serve(runner) -> None:
            while (item := take()) is not None:
                i, share = item
                try:
                    results[i] = work[i].run(runner, share)
                except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                    with lock:
                        state["error"] = state["error"] or e
                    return
                finally:
                    with lock:
                        now = clock()
                        began, promised_s = promised.pop(i, (now, 0.0))
                        overrun = max(now - began - promised_s, 0.0)
                        state["late"] = min(state["late"] + overrun / self.jobs, max_late)
                if done is not None:
                    with self._report:
                        done(i, results[i])

        if self.jobs == 1:
            serve(self.runners[0])
        else:
            threads = [threading.Thread(target=serve, args=(r,), name=f"flashverify-job-{k}", daemon=True)
                       for k, r in enumerate(self.runners)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if state["error"] is not None:
            raise state["error"]
        return results

    def close(self) -> None:
        for r in self.runners:
            r.close()


__all__ = ["CellPool", "Job", "auto_jobs", "share_for", "torch_threads_per_job", "MAX_AUTO_JOBS", "MAX_LATE_SHARE"]
