"""Rebuilding a case from its stored spec (``case.spec.to_dict()``, e.g. read back from JSON)."""

from __future__ import annotations

from typing import Any

from strategies._validation import spec_error
from strategies.attention import AttentionCase, AttentionSpec
from strategies.softmax import SoftmaxCase, SoftmaxSpec


def case_from_dict(d: dict[str, Any]) -> SoftmaxCase | AttentionCase:
    """The case whose ``spec.to_dict()`` is ``d``; the ``"op"`` key picks softmax or attention."""
    if not isinstance(d, dict):
        raise spec_error("spec", "expected a dict produced by case.spec.to_dict()", d)
    op = d.get("op")
    if op == "softmax":
        return SoftmaxCase(SoftmaxSpec.from_dict(d))
    if op == "attention":
        return AttentionCase(AttentionSpec.from_dict(d))
    raise spec_error("spec", "the 'op' key must be 'softmax' or 'attention'", op)
