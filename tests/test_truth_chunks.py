"""The oracle and tolerance computed slice by slice (verify.truth_chunks) give what one whole
call gives: same classifications, same refined rows, the same values to float64 roundings."""

from __future__ import annotations

import math

import pytest
import torch

from kernels.registry import get_target
from verify import oracle, tolerance, truth_chunks
from verify.dtypes import get_format


def _case(seed: int, *, batch: int, heads_q: int, heads_kv: int, nq: int, nk: int, d: int, dtype: torch.dtype):
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randn(batch, heads_q, nq, d, generator=gen) * 3).to(dtype)
    k = (torch.randn(batch, heads_kv, nk, d, generator=gen) * 3).to(dtype)
    v = torch.randn(batch, heads_kv, nk, d, generator=gen).to(dtype)
    q[0, 0, 1, 0] = math.nan  # a NaN query row
    k[-1, -1, nk // 2, 1] = math.inf  # a key every later query of that kv head sees
    v[0, 0, nk - 1, 2] = math.nan  # a value only the last rows see under causal
    mask = torch.rand(batch, 1, nq, nk, generator=gen) > 0.2
    mask[0, 0, 2] = False  # a query that sees no key
    return q, k, v, mask


def _same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert a.shape == b.shape, what
    if a.dtype == torch.bool or not a.is_floating_point():
        assert torch.equal(a, b), what
    else:
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-300, equal_nan=True, msg=what)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("chunk", [1, 40, 200])  # a row a slice, a few rows, whole heads
def test_slices_give_the_whole_calls_truth_and_tolerance(causal: bool, chunk: int) -> None:
    q, k, v, mask = _case(7, batch=2, heads_q=4, heads_kv=2, nq=9, nk=13, d=8, dtype=torch.float16)
    fmt = get_format(torch.float16)
    model = tolerance.ToleranceModel.for_target(get_target("ref-naive-attention").caps, fmt.name)
    kw = dict(scale=0.7, causal=causal, mask=mask, fmt=fmt, model=model, max_fallback_work=2e4,
              lse_format=get_format(torch.float32))
    whole, whole_tol, whole_lse_tol = truth_chunks.attention_truth_and_tolerance(q, k, v, chunk_scores=None, **kw)
    parts, parts_tol, parts_lse_tol = truth_chunks.attention_truth_and_tolerance(q, k, v, chunk_scores=chunk, **kw)
    assert parts.probs is None and whole.probs is not None
    assert parts.input_has_nonfinite and parts.target == whole.target
    for name in ("row_status", "expected_nonfinite", "expected_nan", "lse_expected_nan", "may_be_nonfinite", "fallback_rows",
                 "uncertified_rows", "cond"):
        _same(getattr(parts, name), getattr(whole, name), name)
    for name in ("out", "lse"):
        for part in ("hi", "lo", "bound"):
            _same(getattr(getattr(parts, name), part), getattr(getattr(whole, name), part), f"{name}.{part}")
    _same(parts_tol, whole_tol, "tolerance")
    _same(parts_lse_tol, whole_lse_tol, "LSE tolerance")
    assert whole.lse_expected_nan.any() and torch.isfinite(whole_lse_tol[whole.row_status == oracle.ROW_FINITE]).all()
    assert (whole.row_status == oracle.ROW_MASKED).any() and (whole.row_status == oracle.ROW_NONFINITE).any()


@pytest.mark.parametrize("chunk", [13, 30, 117])  # a row a slice, two rows, one head of nine rows
def test_the_fallback_cap_is_shared_across_slices_in_row_order(chunk: int) -> None:
    # float32 scores in the tens of thousands leave rows undecided by the fast path: with a cap
    # of three rows' work, the same three rows are refined, sliced or not, and the rest of the
    # undecided rows are left uncertified.
    q, k, v, mask = _case(7, batch=2, heads_q=4, heads_kv=2, nq=9, nk=13, d=8, dtype=torch.float32)
    q, k = q * 100, k * 100
    fmt = get_format(torch.float32)
    model = tolerance.ToleranceModel.for_target(get_target("ref-naive-attention").caps, fmt.name)
    kw = dict(scale=0.7, causal=True, mask=mask, fmt=fmt, model=model, max_fallback_work=3 * truth_chunks._row_cost(13, 8))
    whole, _, _ = truth_chunks.attention_truth_and_tolerance(q, k, v, chunk_scores=None, **kw)
    parts, _, _ = truth_chunks.attention_truth_and_tolerance(q, k, v, chunk_scores=chunk, **kw)
    assert int(whole.fallback_rows.sum()) == 3 and int(whole.uncertified_rows.sum()) > 3
    _same(parts.fallback_rows, whole.fallback_rows, "fallback_rows")
    _same(parts.uncertified_rows, whole.uncertified_rows, "uncertified_rows")
    _same(parts.out.hi, whole.out.hi, "out")


def test_slices_keep_row_major_order_and_whole_groups() -> None:
    assert list(truth_chunks._slices(1, 2, 1, 5, 6, 12)) == [
        (0, 0, 1, 0, 2), (0, 0, 1, 2, 4), (0, 0, 1, 4, 5), (0, 1, 2, 0, 2), (0, 1, 2, 2, 4), (0, 1, 2, 4, 5)]
    assert list(truth_chunks._slices(2, 4, 2, 3, 5, 40)) == [(0, 0, 2, 0, 3), (0, 2, 4, 0, 3), (1, 0, 2, 0, 3),
                                                             (1, 2, 4, 0, 3)]
    # Room for one head but not a group of two: single heads, whole.
    assert list(truth_chunks._slices(1, 2, 2, 3, 5, 20)) == [(0, 0, 1, 0, 3), (0, 1, 2, 0, 3)]


@pytest.mark.parametrize("nq, nk", [(1, 8), (16, 16), (64, 64)])
def test_float64_rows_are_refined_and_measured(nq: int, nk: int) -> None:
    """Float64 rows are decided only by the exact fallback.  The fast truth has no output and a
    condition number of 0 on them, so a tolerance taken from it is infinite: choosing the rows
    to refine by that tolerance refined none, and every float64 row was judged by the hull alone
    (a float64 target computing in float32, ~1e8 ulps off, passed; sixth red team, 2026-12-05)."""
    gen = torch.Generator().manual_seed(nq)
    q, k, v = (torch.randn(1, 2, n, 16, generator=gen, dtype=torch.float64) for n in (nq, nk, nk))
    fmt = get_format("float64")
    model = tolerance.ToleranceModel.for_target(get_target("ref-naive-attention-fp64").caps, fmt.name)
    truth, tol, _ = truth_chunks.attention_truth_and_tolerance(q, k, v, scale=0.25, causal=False, mask=None, fmt=fmt,
                                                               model=model, max_fallback_work=2e7)
    assert torch.isfinite(tol).all() and not truth.uncertified_rows.any()
    single = torch.softmax((q.float() @ k.float().transpose(-1, -2)) * 0.25, -1) @ v.float()
    err = (single.double() - truth.out.hi).abs() / (fmt.unit_roundoff * truth.cond)
    assert bool((err > tol).any())  # float32 arithmetic is caught by the tolerance, not only the hull
