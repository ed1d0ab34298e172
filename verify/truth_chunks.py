"""The oracle and the tolerance of one attention case, computed a slice of its scores at a time.

``oracle.attention_truth`` and ``tolerance.attention_tolerance_units`` work on whole
``(B, Hq, Nq, Nk)`` score tensors in float64.  On a CPU a case of 640 x 640 over 32
(batch, head) pairs holds 13 M scores, about 100 MB a tensor, and each of the ~60
elementwise steps then streams memory: measured on the 2-core CI machine (2026-12-01), one
call took 2.3-2.6 s whole and 0.53 s pair by pair.  At 4096 x 4096 over 8 pairs the whole
case needed 17 GB.

Every query row's truth depends only on its own query, its keys and values, and which of
them it sees, so the case is cut into slices of at most ``CHUNK_SCORES`` scores: one batch
entry, whole groups of query heads (with their key/value heads), a run of query rows.  A
slice's causal pattern is passed as its boolean mask (the query offset moves the diagonal),
which gives the same visibility, hence the same numbers, as the whole case.  The exact
fallback's work cap is shared in order, so the same rows are refined as in one call
(undecided rows in row-major order until the cap).

Only what the contract and the naive comparison read is kept from each slice (with the value
hull of its ill-conditioned rows, ``tolerance.attention_value_hull``); the per-score
intermediates (``probs``, ``shifted``, ``abs_scores``, ``visible``) are dropped, so the
merged truth has ``None`` there.
"""

from __future__ import annotations

import dataclasses

import torch

from verify import oracle, tolerance
from verify.dtypes import FloatFormat

#: Scores in one slice on a CPU: 2**20 float64 values, 8 MB a tensor, near the caches.
#: Other devices take the case whole (the GPU's float64 kernels want big tensors).
CHUNK_SCORES = 1 << 20


def _row_cost(nk: int, d: int) -> int:
    """The fallback cap's unit for one row (oracle.attention_truth's max_fallback_work)."""
    return max(1, nk * (d + 100))


def _slices(batch: int, heads_q: int, group: int, nq: int, nk: int, limit: int):
    """(b, h0, h1, r0, r1) slices in row-major order of the (b, head, query) rows, each at most
    ``limit`` scores where one query row allows.  A slice of several heads holds whole groups
    (the key/value heads they share); a slice of part of a head's rows holds that head alone."""
    rows = max(1, limit // nk)
    if rows >= nq:
        heads = (limit // (nq * nk)) // group * group or 1
        for b in range(batch):
            for h0 in range(0, heads_q, heads):
                yield b, h0, min(heads_q, h0 + heads), 0, nq
        return
    for b in range(batch):
        for h in range(heads_q):
            for r0 in range(0, nq, rows):
                yield b, h, h + 1, r0, min(nq, r0 + rows)


def _cat(parts: list, dim: int):
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(parts, dim)
    if isinstance(first, oracle.Certified):
        return oracle.Certified(*(torch.cat([getattr(p, f) for p in parts], dim) for f in ("hi", "lo", "bound")))
    raise TypeError(type(first))


_KEPT = ("out", "cond", "lse", "row_status", "expected_nonfinite", "expected_nan", "lse_expected_nan", "may_be_nonfinite",
         "fallback_rows", "uncertified_rows")


def merge(parts: list[oracle.AttentionTruth], dim: int) -> oracle.AttentionTruth:
    """The truths of slices of one case, put together along ``dim`` (1: the heads)."""
    fields = {name: _cat([getattr(p, name) for p in parts], dim) for name in _KEPT}
    for name in ("value_lo", "value_hi"):
        if all(getattr(p, name) is not None for p in parts):
            fields[name] = _cat([getattr(p, name) for p in parts], dim)
    return oracle.AttentionTruth(**fields, input_has_nonfinite=any(p.input_has_nonfinite for p in parts),
                                 target=parts[0].target, visible=None, probs=None, shifted=None,
                                 abs_scores=None)


def attention_truth_and_tolerance(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float, causal: bool, mask: torch.Tensor | None,
    fmt: FloatFormat, model: tolerance.ToleranceModel, max_fallback_work: float | None,
    chunk_scores: int | None = None, lse_format: FloatFormat | None = None,
) -> tuple[oracle.AttentionTruth, torch.Tensor, torch.Tensor | None]:
    """``oracle.attention_truth``, ``tolerance.attention_tolerance_units`` and, with
    ``lse_format`` (the format a target returns its LSE in), ``tolerance.attention_lse_tolerance_units``
    of one case (else None).

    The exact (slow) fallback refines only undecided rows the tolerance will measure: a row
    that is ill-conditioned for the target's precision (infinite tolerance) is not measured,
    so it stays uncertified.  ``chunk_scores`` (default
    ``CHUNK_SCORES`` on a CPU, no slicing elsewhere) bounds a slice.  Same numbers as one
    whole call (the oracle's bounds are per row); a truth assembled from slices has ``None``
    for its per-score fields.
    """
    if chunk_scores is None:
        chunk_scores = CHUNK_SCORES if q.device.type == "cpu" else None
    batch, heads_q, nq, d = q.shape
    nk = k.shape[2]
    group = heads_q // k.shape[1]
    whole = chunk_scores is None or batch * heads_q * nq * nk <= chunk_scores

    def one(qs, ks, vs, causal_s, mask_s, cap):
        def pick(fast: oracle.AttentionTruth) -> torch.Tensor:
            if not fast.uncertified_rows.any():  # nothing undecided: no tolerance pass needed
                return fast.uncertified_rows
            # Not from the tolerance of the fast truth: its undecided rows have no output and a
            # condition number of 0, so their tolerance came out infinite and none was refined
            # (every float64 row, which only the exact fallback decides: a float64 target computing
            # in float32 passed; sixth red team, 2026-12-05).
            return fast.uncertified_rows & ~tolerance.ill_conditioned_rows(qs.dtype, qs.shape[-1], fast, model)

        truth = oracle.attention_truth(qs, ks, vs, scale=scale, causal=causal_s, mask=mask_s, target=fmt,
                                       max_fallback_work=cap, fallback_only=pick)
        lse_tol = (None if lse_format is None
                   else tolerance.attention_lse_tolerance_units(qs.dtype, truth, lse_format, model))
        tol = tolerance.attention_tolerance_units(qs, vs, truth, fmt, model)
        lo, hi = tolerance.attention_value_hull(qs, vs, truth, model, tol)
        return dataclasses.replace(truth, value_lo=lo, value_hi=hi), tol, lse_tol

    if whole:
        return one(q, k, v, causal, mask, max_fallback_work)

    vis = oracle.visibility(batch, heads_q, nq, nk, causal=causal, mask=mask, device=q.device) \
        if causal or mask is not None else None
    cap = max_fallback_work
    by_batch: list = []
    for b, h0, h1, r0, r1 in _slices(batch, heads_q, group, nq, nk, chunk_scores):
        qs = q[b:b + 1, h0:h1, r0:r1]
        ks, vs = (t[b:b + 1, h0 // group:(h1 - 1) // group + 1] for t in (k, v))
        mask_s = None if vis is None else vis[b:b + 1, h0:h1, r0:r1]
        truth, tol, lse_tol = one(qs, ks, vs, False, mask_s, cap)
        if cap is not None:
            cap = max(0.0, cap - int(truth.fallback_rows.sum()) * _row_cost(nk, d))
        if h0 == 0 and r0 == 0:
            by_batch.append([])
        heads = by_batch[-1]
        if r0 == 0:
            heads.append([])
        heads[-1].append((truth, tol, lse_tol))

    def along(items: list, dim: int):
        return (merge([t for t, _, _ in items], dim), torch.cat([x for _, x, _ in items], dim),
                None if lse_format is None else torch.cat([x for _, _, x in items], dim))

    per_batch = [along([along(rows, 2) for rows in heads], 1) for heads in by_batch]
    return along(per_batch, 0)
