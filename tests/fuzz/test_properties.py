"""Nightly Hypothesis properties: one per (target x dtype), for every non-mutant target available here.

Each property is a plain ``@given(case=...)`` test with no fixtures, so HypoFuzz
(``hypothesis fuzz -- tests/fuzz``) can drive it as well as pytest.  The module is
marked ``nightly``: plain ``pytest`` deselects it (see pyproject's addopts); run it
with ``pytest tests/fuzz -m nightly --hypothesis-profile nightly`` or via
``python -m verify fuzz``.

Environment: ``FLASHVERIFY_FUZZ_TARGETS`` (comma-separated names; mutants allowed when
named) restricts the targets, ``FLASHVERIFY_FUZZ_DEVICE`` (default: cuda if visible,
else cpu) picks the device and its size profile.

On a violation the test raises AssertionError carrying the violation, the readable
case and a ``FLASHVERIFY-CORPUS {json}`` line that ``tests/fuzz/conftest.py`` turns
into a regression corpus file when ``FLASHVERIFY_CORPUS`` is set.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import event, given
from hypothesis import target as hyp_target

from kernels.registry import all_targets, get_target
from verify.dtypes import get_format
from verify.search import PROFILES, CheckOptions, _strategy, run_case

pytestmark = pytest.mark.nightly

CORPUS_MARK = "FLASHVERIFY-CORPUS "


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


def check(target_name: str, dtype: str, case) -> None:
    """The property body: the target must not violate its contract on ``case``."""
    target = get_target(target_name)
    for f in case.features:
        event(f)
    out = run_case(target, case, OPTS)
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
    test.__doc__ = f"{target.name} ({target.op}, {dtype}) meets its contract on every drawn case."
    return test


#: (target name, dtype) -> property test, for the fuzz command's bookkeeping and tests
PROPERTIES = {}
for _t in _targets():
    for _d in _t.caps.dtypes:
        _fn = _make(_t, get_format(_d).name)
        PROPERTIES[(_t.name, get_format(_d).name)] = _fn
        globals()[_fn.__name__] = _fn
del _t, _d, _fn
