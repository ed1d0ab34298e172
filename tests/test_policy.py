"""The tolerance policy accepts correct implementations and the contract holds for them.

CI runs a few dozen derandomized examples per target x dtype; ``pytest -m nightly``
runs 10,000 per cell (the acceptance bar of the policy).
"""

from __future__ import annotations

import os

import pytest

from kernels.registry import get_target
from verify import search

CORRECT = [
    "torch.softmax", "ref-online-softmax", "ref-two-pass-softmax", "control-streaming-softmax",
    "sdpa-math", "ref-blocked-attention", "ref-naive-attention", "ref-naive-attention-fp64",
    "control-streaming-attention",
]
CI_EXAMPLES = int(os.environ.get("FLASHVERIFY_CI_EXAMPLES", "20"))


def _run(name: str, examples: int, seed: int | None) -> list[search.CellResult]:
    opts = search.CheckOptions(max_examples=examples, seed=seed, compare_naive=False, shrink=False,
                               artifact_dir=".flashverify/test-artifacts")
    return search.check_target(get_target(name), opts)


def _assert_all_passed(cells: list[search.CellResult]) -> None:
    for c in cells:
        assert c.status == "passed", (
            f"{c.target} {c.dtype}: {c.violation.one_line() if c.violation else c.reason}\n"
            f"counterexample: {c.counterexample}")
        assert c.examples > 0 and c.max_ratio <= 1.0


@pytest.mark.parametrize("name", CORRECT)
def test_correct_implementation_has_no_violation(name: str) -> None:
    _assert_all_passed(_run(name, CI_EXAMPLES, seed=20261129))


@pytest.mark.nightly
@pytest.mark.parametrize("name", CORRECT)
def test_correct_implementation_has_no_violation_on_10000_examples(name: str) -> None:
    _assert_all_passed(_run(name, 10_000, seed=None))
