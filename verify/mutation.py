"""Mutation testing: run the suite against every known-broken kernel and tabulate the kills.

A mutant is killed when the search finds any violation in any dtype it supports.
The time and number of examples to the first failure measure how fast the
strategies reach each bug class; the shrunk counterexample shows what it took.
Controls (the same code without the bug) must show no violation at all.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from kernels.mutants import Mutant, all_mutants
from kernels.registry import get_target
from verify import search


@dataclass
class KillResult:
    name: str
    op: str
    bug_class: str
    reference: str
    form: str
    status: str  # killed | survived | control-passed | control-failed | unavailable | error (the suite failed)
    dtype: str | None = None
    examples: int | None = None
    seconds_to_kill: float | None = None
    seconds: float = 0.0
    counterexample: str | None = None
    violation: str | None = None
    context_lost: bool = False  # its search left the CUDA context unusable in this process

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def run_one(m: Mutant, opts: search.CheckOptions) -> KillResult:
    target = get_target(m.name)
    is_control = m.bug_class == "control"
    why = target.unavailable_reason(opts.device)
    if why:
        return KillResult(m.name, m.op, m.bug_class, m.reference, m.form, "unavailable", violation=why)
    t0 = time.perf_counter()
    cells = search.check_target(target, opts, stop_at_first_violation=not is_control)
    bad = next((c for c in cells if c.status == "violated"), None)
    spent = time.perf_counter() - t0
    if is_control:
        status = "control-failed" if bad else "control-passed"
    else:
        status = "killed" if bad else "survived"
    r = KillResult(m.name, m.op, m.bug_class, m.reference, m.form, status, seconds=spent,
                   context_lost=any(c.context_lost for c in cells))
    if bad:
        before = sum(c.seconds for c in cells[:-1])
        r.dtype = bad.dtype
        r.examples = sum(c.examples for c in cells[:-1]) + (bad.examples_to_first_failure or bad.examples)
        r.seconds_to_kill = before + (bad.seconds_to_first_failure or bad.seconds)
        r.counterexample = bad.counterexample
        r.violation = bad.violation.one_line() if bad.violation else None
    return r


def run_all(opts: search.CheckOptions, *, include_controls: bool = True, names: list[str] | None = None,
            progress=None) -> list[KillResult]:
    mutants, controls = all_mutants()
    chosen = [m for m in mutants + (controls if include_controls else []) if names is None or m.name in names]
    results: list[KillResult] = []
    lost_by = None
    for m in chosen:
        if lost_by is not None:  # every CUDA call in this process fails from here on
            results.append(KillResult(
                m.name, m.op, m.bug_class, m.reference, m.form, "unavailable",
                violation=f"not run: {lost_by} left the CUDA context unusable in this process; "
                          f"run it on its own with --only {m.name}"))
        else:
            results.append(run_one(m, opts))
            if results[-1].context_lost:
                lost_by = m.name
        if progress:
            progress(results[-1])
    return results


def summary(results: list[KillResult]) -> dict:
    mutants = [r for r in results if r.status in ("killed", "survived")]
    kills = [r for r in mutants if r.status == "killed"]
    times = [r.seconds_to_kill for r in kills if r.seconds_to_kill is not None]
    return {
        "mutants": len(mutants), "killed": len(kills),
        "mutation_score": len(kills) / len(mutants) if mutants else None,
        "median_seconds_to_kill": statistics.median(times) if times else None,
        "max_seconds_to_kill": max(times) if times else None,
        "controls_failed": [r.name for r in results if r.status == "control-failed"],
        "survivors": [r.name for r in mutants if r.status == "survived"],
        "errors": [r.name for r in results if r.status == "error"],
    }


def table_line(r: KillResult) -> str:
    if r.status in ("unavailable", "error"):
        return f"{r.name:<32} {r.status:<14} {r.violation}"
    kill = (f"{r.examples:>4} ex {r.seconds_to_kill:6.1f}s  {r.dtype:<9}" if r.seconds_to_kill is not None
            else f"{'':>7} {'':>7}  {'':<9}")
    return (f"{r.name:<32} {r.status.upper():<14} {kill} {r.bug_class:<28} {r.reference}\n"
            f"{'':<32} {r.counterexample or ''}")
