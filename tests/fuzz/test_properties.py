"""Nightly Hypothesis properties: one per (target x dtype), for every non-mutant target available here.

Each property is a plain ``@given(case=...)`` test with no fixtures, so HypoFuzz
(``hypothesis fuzz -- tests/fuzz``) can drive it as well as pytest.  The module is
marked ``nightly``: plain ``pytest`` deselects it (see pyproject's addopts); run it
with ``pytest tests/fuzz -m nightly --hypothesis-profile nightly`` or via
``python -m verify fuzz``.

Environment: ``FLASHVERIFY_FUZZ_TARGETS`` (comma-separated names; mutants allowed when
named) restricts the targets, ``FLASHVERIFY_FUZZ_DTYPES`` (comma-separated) the dtypes,
``FLASHVERIFY_FUZZ_DEVICE`` (default: cuda if visible, else cpu) picks the device and
its size profile.  ``tests/fuzz/conftest.py`` adds a per-property wall-clock budget and
per-property results (``STATS``) for ``python -m verify fuzz``.

On a violation the test raises AssertionError carrying the violation, the readable
case and a ``FLASHVERIFY-CORPUS {json}`` line that ``tests/fuzz/conftest.py`` turns
into a regression corpus file when ``FLASHVERIFY_CORPUS`` is set.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections import Counter

import pytest
from hypothesis import event, given
from hypothesis import target as hyp_target

from kernels.registry import all_targets, get_target
from verify.dtypes import get_format
from verify.search import PROFILES, CheckOptions, _strategy, run_case

pytestmark = pytest.mark.nightly

CORPUS_MARK = "FLASHVERIFY-CORPUS "
NODE_PREFIX = "tests/fuzz/test_properties.py"  # pytest node ids are relative to the repo root (pyproject.toml)


def _device() -> str:
    dev = os.environ.get("FLASHVERIFY_FUZZ_DEVICE")
    if dev:
        return dev
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


DEVICE = _device()
OPTS = CheckOptions(device=DEVICE, profile=PROFILES["gpu" if DEVICE.startswith("cuda") else "cpu"],
                    compare_naive=False, timeout=120.0)


def _targets():
    names = [n.strip() for n in os.environ.get("FLASHVERIFY_FUZZ_TARGETS", "").split(",") if n.strip()]
    if names:
        chosen = [get_target(n) for n in names]
    else:
        chosen = [t for t in all_targets() if t.kind != "mutant"]
    return [t for t in chosen if t.unavailable_reason(DEVICE) is None]


def _dtypes(target) -> list[str]:
    wanted = {get_format(d.strip()).name for d in os.environ.get("FLASHVERIFY_FUZZ_DTYPES", "").split(",")
              if d.strip()}
    names = [get_format(d).name for d in target.caps.dtypes]
    return [d for d in names if not wanted or d in wanted]


class PropertyStats:
    """What the property currently running has seen.

    Recorded only while ``tests/fuzz/conftest.py`` runs a property under pytest
    (``active``).  Under HypoFuzz it stays off: its stateful branches (a new worst case)
    would make every input's coverage differ between a run and its replay, and HypoFuzz
    drops inputs whose coverage is unstable.
    """

    def __init__(self) -> None:
        self.active = False
        self.reset()

    def reset(self) -> None:
        self.examples = 0
        self.max_ratio = 0.0
        self.worst_case: str | None = None
        self.features: Counter = Counter()
        self.target_seconds = 0.0

    def record(self, case, out) -> None:
        self.examples += 1
        self.target_seconds += out.seconds
        self.features.update(case.features)
        ratio = out.evaluation.max_ratio
        if ratio > self.max_ratio or self.worst_case is None:
            self.max_ratio, self.worst_case = max(ratio, self.max_ratio), case.describe()

    def as_dict(self) -> dict:
        return {"examples": self.examples, "max_ratio": self.max_ratio, "worst_case": self.worst_case,
                "features": dict(sorted(self.features.items())), "target_seconds": round(self.target_seconds, 3)}


STATS = PropertyStats()


def check(target_name: str, dtype: str, case) -> None:
    """The property body: the target must not violate its contract on ``case``."""
    target = get_target(target_name)
    for f in case.features:
        event(f)
    with warnings.catch_warnings():  # the Triton interpreter's numpy warnings on inf/NaN inputs are expected
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.")
        out = run_case(target, case, OPTS)
    if STATS.active:
        STATS.record(case, out)
    hyp_target(min(out.evaluation.max_ratio, 1e12), label="error/tolerance")
    if out.evaluation.violations:
        v = out.evaluation.violations[0]
        entry = {"target": target_name, "dtype": dtype, "spec": case.spec.to_dict(), "violation": v.one_line(),
                 "description": case.describe(), "expect": "violation" if target.kind == "mutant" else "pass"}
        raise AssertionError(f"{target_name} ({dtype}) violated its contract: {v.one_line()}\n"
                             f"case: {case.describe()}\n{CORPUS_MARK}{json.dumps(entry, sort_keys=True)}")


def _make(target, dtype: str):
    @given(case=_strategy(target, dtype, OPTS))
    def test(case) -> None:
        check(target.name, dtype, case)

    slug = re.sub(r"\W+", "_", f"{target.name}__{dtype}")
    test.__name__ = test.__qualname__ = f"test_{slug}"
    # Every property shares this one source, so Hypothesis would give them all one
    # example-database key: a failure saved by one property would be replayed (and, when
    # it passes there, dropped) by all the others.  Mix the pytest node id into the key,
    # exactly as Hypothesis's pytest plugin does for parametrized tests and HypoFuzz does
    # for every test it collects, so pytest, `verify fuzz` and HypoFuzz share one key.
    test.hypothesis.inner_test._hypothesis_internal_add_digest = f"{NODE_PREFIX}::{test.__name__}".encode()
    test.__doc__ = f"{target.name} ({target.op}, {dtype}) meets its contract on every drawn case."
    return test


#: (target name, dtype) -> property test, for the fuzz command's bookkeeping and tests
PROPERTIES = {}
for _t in _targets():
    for _d in _dtypes(_t):
        _fn = _make(_t, _d)
        PROPERTIES[(_t.name, _d)] = _fn
        globals()[_fn.__name__] = _fn
for _n in ("_t", "_d", "_fn"):
    globals().pop(_n, None)
