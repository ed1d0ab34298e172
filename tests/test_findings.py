"""Deviations the suite found in third-party implementations, pinned so we notice when they change."""

from __future__ import annotations

import math

import torch

from kernels import reference
from verify import oracle
from verify.contracts import evaluate_attention
from verify.tolerance import ToleranceModel, attention_tolerance_units
from verify.capabilities import Capabilities


def test_sdpa_math_leaks_nan_from_a_causally_masked_key() -> None:
    """torch SDPA (math backend, CPU) masks by adding -inf, so NaN in an invisible key reaches row 0.

    Shrunk counterexample found by `python -m verify check --op attention --target sdpa-math`
    (bug class of pytorch #101967).  If torch fixes it, this test fails: then drop the
    special_values=False declaration of the sdpa-math target in kernels/builtin_targets.py.
    """
    q = torch.tensor([[[[0.5], [1.0]]]])
    k = torch.tensor([[[[1.0], [math.nan]]]])
    v = torch.tensor([[[[2.0], [3.0]]]])
    out = reference.sdpa_math(q, k, v, scale=1.0, causal=True)
    truth = oracle.attention_truth(q, k, v, scale=1.0, causal=True)
    assert truth.row_status[0, 0, 0] == oracle.ROW_FINITE  # query 0 cannot see key 1
    tol = attention_tolerance_units(q, v, truth, "float32", ToleranceModel.for_target(Capabilities(), "float32"))
    kinds = {v.kind for v in evaluate_attention(out, truth, tol).violations}
    assert "leak" in kinds
    # our own references keep the masked NaN out
    ok = reference.blocked_attention(q, k, v, scale=1.0, causal=True)
    assert not evaluate_attention(ok, truth, tol).violations
