"""Nightly fuzz plumbing: a wall-clock budget per property, per-property results, corpus capture.

The example database of the ``nightly`` profile (a directory, or ``redis://`` for a
shared ``RedisExampleDatabase``) is chosen by ``$FLASHVERIFY_DB`` in the root conftest.

* ``FLASHVERIFY_FUZZ_PROPERTY_BUDGET_S=S``: each property stops generating new examples
  once it has run S seconds of wall clock, and passes with what it tried (the ``nightly``
  profile's ``max_examples=20_000`` stays the cap).  A property that has found a failure
  is never stopped: it shrinks and fails as usual.  Without the variable nothing here
  touches Hypothesis.  ``python -m verify fuzz`` sets it from its ``--hours`` budget, so
  that every property reports within the run instead of all of them being cut at the end.
* ``FLASHVERIFY_FUZZ_RESULTS=FILE``: one JSON line per property run is appended to FILE
  (outcome, examples, seconds, why it stopped, worst error/tolerance ratio and its case,
  feature counts, the xdist worker and the GPU it was pinned to); ``verify.fuzz`` folds
  them into its report.
* ``FLASHVERIFY_FUZZ_GPUS=ID,ID,...``: xdist worker ``gwK`` runs on GPU ``K mod len`` of the
  list.  The pinning itself is done by the root ``conftest.py`` in its first lines: it
  calls ``torch.cuda.is_available()``, which fixes the GPUs a process sees, before this
  file is imported.
* ``FLASHVERIFY_CORPUS=DIR``: every failing property's final (shrunk) counterexample is
  written to DIR as a regression corpus file (see ``verify.fuzz``).

HypoFuzz (``hypothesis fuzz -- tests/fuzz``) calls the properties without pytest's run
hooks, so none of this applies to it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from verify.fuzz import GPUS_ENV, xdist_worker_gpu

PROPERTY_BUDGET_ENV = "FLASHVERIFY_FUZZ_PROPERTY_BUDGET_S"
RESULTS_ENV = "FLASHVERIFY_FUZZ_RESULTS"


class _Budget:
    """The running property's wall-clock deadline (time.monotonic()), None outside one."""

    deadline: float | None = None
    seconds: float | None = None
    fired: bool = False
    valid_examples: int = 0


BUDGET = _Budget()


def _install_budget_stop() -> bool:
    """Make Hypothesis's engine end a run cleanly once ``BUDGET.deadline`` has passed.

    Hypothesis has no wall-clock stop of its own (only max_examples), and an exception
    raised from the test body would be saved to the example database as a failure.  So
    the check runs after each test case inside the engine and leaves through the
    engine's own exit (RunIsComplete), as reaching max_examples does: statistics,
    events and targets are recorded, the database is left as it is.  Returns False
    (and the properties simply run to max_examples) when this Hypothesis version lacks
    the hook.
    """
    try:
        from hypothesis.internal.conjecture.engine import ConjectureRunner

        original = getattr(ConjectureRunner, "test_function", None)
        if original is None or getattr(original, "_flashverify_budget", False):
            return original is not None
        ConjectureRunner.test_function = budgeted_test_function(original)  # its imports may fail too
    except ImportError:
        return False
    return True


def budgeted_test_function(original):
    """``ConjectureRunner.test_function`` wrapped: after each test case, once ``BUDGET.deadline``
    has passed with at least one valid case and no failure found, leave the run as reaching
    max_examples does (statistics' ``stopped-because``, ``ExitReason.finished``, RunIsComplete).

    It reads nothing from the runner that Hypothesis renamed across versions: valid cases are
    counted here from ``data.status`` (the runner's counter is ``valid_examples`` in 6.155 and
    ``valid_test_cases`` in 6.168, which the GPU machine has), and failures found are read
    from ``interesting_test_cases`` or ``interesting_examples``, whichever exists.
    """
    from hypothesis.internal.conjecture.data import Status
    from hypothesis.internal.conjecture.engine import ExitReason, RunIsComplete

    def test_function(self, data):
        original(self, data)
        if BUDGET.deadline is None:
            return
        if data.status is Status.VALID:
            BUDGET.valid_examples += 1
        found = _first_attribute(self, ("interesting_test_cases", "interesting_examples"))
        if (time.monotonic() > BUDGET.deadline and BUDGET.valid_examples > 0 and not found
                and not getattr(self, "ignore_limits", False)):
            BUDGET.fired = True
            self.statistics["stopped-because"] = (
                f"flashverify wall-clock budget of {BUDGET.seconds:g} s per property ({PROPERTY_BUDGET_ENV})")
            if self.best_observed_targets:
                self.statistics["targets"] = dict(self.best_observed_targets)
            self.exit_reason = ExitReason.finished
            raise RunIsComplete

    test_function._flashverify_budget = True  # type: ignore[attr-defined]
    return test_function


def _first_attribute(obj, names: tuple[str, ...]):
    """The first of ``names`` that ``obj`` has, None when it has none of them."""
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    return None


_budget_s = float(os.environ.get(PROPERTY_BUDGET_ENV) or 0)
BUDGET_STOP_INSTALLED = _install_budget_stop() if _budget_s > 0 else False


def _is_property(item) -> bool:
    return getattr(getattr(item, "module", None), "PROPERTIES", None) is not None and item.name.startswith("test_")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not _is_property(item):
        yield
        return
    stats = getattr(item.module, "STATS", None)
    if stats is not None:
        stats.reset()
        stats.active = True
    BUDGET.fired, BUDGET.valid_examples = False, 0
    BUDGET.seconds = _budget_s if BUDGET_STOP_INSTALLED else None
    BUDGET.deadline = time.monotonic() + _budget_s if BUDGET_STOP_INSTALLED else None
    item._fv_started = time.monotonic()
    outcome = yield
    BUDGET.deadline = None
    if stats is not None:
        stats.active = False
    item._fv_seconds = time.monotonic() - item._fv_started
    item._fv_budget_fired = BUDGET.fired
    item._fv_valid_examples = BUDGET.valid_examples
    results = os.environ.get(RESULTS_ENV)
    if results and outcome.excinfo is not None and issubclass(outcome.excinfo[0], KeyboardInterrupt):
        # `verify fuzz` stops the session at its deadline with SIGINT: pytest makes no report for
        # the property in flight, so record what it did up to then here.
        _write_result(item, None, Path(results))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call":
        return
    results = os.environ.get(RESULTS_ENV)
    if results and _is_property(item):
        _write_result(item, report, Path(results))
    corpus = os.environ.get("FLASHVERIFY_CORPUS")
    if corpus and report.failed:
        d = _corpus_mark(report)
        if d is not None:
            from verify.fuzz import corpus_entry, write_corpus_entry

            write_corpus_entry(corpus_entry(d["target"], d["spec"], d["violation"], d.get("description", ""),
                                            dtype=d.get("dtype"), expect=d.get("expect")), Path(corpus))


def _corpus_mark(report) -> dict | None:
    text = str(report.longrepr)
    marks = [line.split("FLASHVERIFY-CORPUS ", 1)[1] for line in text.splitlines() if "FLASHVERIFY-CORPUS " in line]
    if not marks:
        return None
    try:
        return json.loads(marks[-1].strip().rstrip("'\""))
    except ValueError:
        return None


def _write_result(item, report, path: Path) -> None:
    stats = getattr(item.module, "STATS", None)
    key = next((k for k, fn in item.module.PROPERTIES.items() if fn.__name__ == item.name), (None, None))
    if report is None:
        stopped_by = "interrupted"
    elif report.failed:
        stopped_by = "failure"
    elif report.skipped:
        stopped_by = "skipped"
    elif getattr(item, "_fv_budget_fired", False):
        stopped_by = "budget"
    else:
        stopped_by = "max_examples"
    line = {
        "nodeid": item.nodeid, "target": key[0], "dtype": key[1],
        "outcome": "interrupted" if report is None else report.outcome,
        "stopped_by": stopped_by, "seconds": round(getattr(item, "_fv_seconds", 0.0), 3),
        "budget_s": _budget_s if BUDGET_STOP_INSTALLED else None,
        "valid_examples": getattr(item, "_fv_valid_examples", 0) if BUDGET_STOP_INSTALLED else None,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "pid": os.getpid(),
        "gpu": xdist_worker_gpu(os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get(GPUS_ENV)),
        "session": os.environ.get("FLASHVERIFY_FUZZ_SESSION"),
    }
    if stats is not None:
        line.update(stats.as_dict())
    if report is not None and report.failed:
        d = _corpus_mark(report)
        line["violation"] = d.get("violation") if d else str(report.longrepr).splitlines()[-1][:500]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:  # one short line per write: appends from several workers do not interleave
        f.write(json.dumps(line, sort_keys=True, default=str) + "\n")
