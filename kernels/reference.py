"""Reference softmax and attention implementations, written in plain torch.

These functions are the yardsticks kernels under test are compared with.  They
are device-agnostic (every tensor they create lives on the input's device) and
compute in the input's dtype unless a ``compute_dtype`` argument says
otherwise: the attention references double as the *same-dtype naive
implementation* of FlashAttention's error-ratio rule ("the kernel's error
against a high-precision oracle may be at most c times the error of a naive
implementation run in the kernel's own dtype").

Special-value contract shared by every softmax in this module (per row, i.e.
along the last dimension):

* a ``-inf`` entry gets probability exactly 0;
* a row whose entries are all ``-inf`` (or an empty row) gives all zeros, not NaN;
* a row that contains a NaN or a ``+inf`` gives NaN in every entry of that row;
* rows never influence each other: special values do not leak to other rows.

Attention rows (query rows) with no visible key give exactly 0.

Notation in the error statements: ``u`` is the unit roundoff of the compute
dtype (``2**-53`` for float64, ``2**-24`` for float32), ``n`` the row length.

Online softmax follows Milakov & Gimelshein, "Online normalizer calculation
for softmax" (2018); the blocked attention follows Dao et al., "FlashAttention"
(2022).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

__all__ = [
    "SoftmaxStats",
    "online_softmax",
    "online_softmax_stats",
    "merge_softmax_stats",
    "two_pass_softmax",
    "logsumexp_reference",
    "torch_softmax",
    "naive_attention",
    "blocked_attention",
    "sdpa_math",
]

#: (m, l): the running row maximum and the row sum of exp(x - m).
SoftmaxStats = tuple[Tensor, Tensor]


# --------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------


def _is_narrow_float(dtype: torch.dtype) -> bool:
    """True for floating dtypes narrower than 32 bits (float16, bfloat16, float8 formats)."""
    return dtype.is_floating_point and torch.finfo(dtype).bits < 32


def _require_floating(name: str, dtype: torch.dtype) -> None:
    """Raise TypeError unless ``dtype`` is a real floating-point dtype."""
    if not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point dtype, got {dtype}")


def _widened_compute_dtype(input_dtype: torch.dtype, compute_dtype: torch.dtype | None) -> torch.dtype:
    """The compute dtype of the softmax and blocked references.

    An explicit ``compute_dtype`` wins; otherwise float32 for inputs narrower than
    32 bits (what FlashAttention-style kernels accumulate in) and the input dtype
    for float32 / float64.  Raises TypeError for non-floating dtypes.
    """
    _require_floating("input", input_dtype)
    if compute_dtype is not None:
        _require_floating("compute_dtype", compute_dtype)
        return compute_dtype
    return torch.float32 if _is_narrow_float(input_dtype) else input_dtype


def _require_rows(x: Tensor) -> None:
    """Raise ValueError for a 0-d tensor: the softmax references need a last dimension."""
    if x.dim() == 0:
        raise ValueError("expected a tensor with at least one dimension (softmax runs over the last one)")


def _require_block_size(name: str, block: int) -> None:
    """Raise ValueError unless ``block`` is an int >= 1."""
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"{name} must be an int >= 1, got {block!r}")


def _finite_shift(m: Tensor) -> Tensor:
    """The row shift to subtract before exp: ``m``, with -inf replaced by 0.

    Subtracting the shift from an all -inf row then gives exp(-inf - 0) = 0
    instead of exp(-inf - -inf) = exp(NaN) = NaN.  NaN and +inf maxima are
    kept, so they still poison their row.
    """
    return torch.where(m == -math.inf, torch.zeros_like(m), m)


def _row_max(x: Tensor) -> Tensor:
    """Maximum over the last dimension, NaN if the row holds a NaN, -inf for an empty row."""
    if x.shape[-1] == 0:
        return torch.full(x.shape[:-1], -math.inf, dtype=x.dtype, device=x.device)
    return torch.amax(x, dim=-1)


def _normalize(x: Tensor, m: Tensor, l: Tensor) -> Tensor:
    """exp(x - m) / l per row; rows with l == 0 (all -inf) give 0.

    ``m`` and ``l`` have the shape of ``x`` without its last dimension.  A NaN in
    ``m`` or ``l`` (rows with NaN or +inf) makes the whole row NaN, because every
    entry is divided by that NaN.  Error: one exp (faithful, ~1 ulp) and one
    correctly rounded division per entry, on top of ``l``'s relative error.
    """
    numer = torch.exp(x - _finite_shift(m).unsqueeze(-1))
    empty = (l == 0).unsqueeze(-1)
    return torch.where(empty, torch.zeros_like(numer), numer / l.unsqueeze(-1))


# --------------------------------------------------------------------------------------
# softmax
# --------------------------------------------------------------------------------------


def _fold_block(stats: SoftmaxStats, block: Tensor) -> SoftmaxStats:
    """One step of the online normalizer: absorb ``block`` (last dim) into (m, l).

    m_new = max(m, max(block));  l_new = l * exp(m - m_new) + sum(exp(block - m_new)).
    When m_new is -inf (everything seen so far is -inf) the shift is 0, so the
    rescale factor and the block's contribution are both exp(-inf) = 0 and l
    stays 0 instead of turning NaN.  A NaN or +inf in the block makes l NaN.
    """
    m, l = stats
    m_new = torch.maximum(m, _row_max(block))
    shift = _finite_shift(m_new)
    alpha = torch.exp(m - shift)
    contribution = torch.exp(block - shift.unsqueeze(-1)).sum(dim=-1)
    return m_new, l * alpha + contribution


def online_softmax_stats(
    x: Tensor, block_size: int = 128, compute_dtype: torch.dtype | None = None
) -> SoftmaxStats:
    """Streaming softmax statistics (m, l) of every row of ``x`` (last dim).

    Contract: m = max_j x_j and l = sum_j exp(x_j - m), obtained by walking the
    row in blocks of ``block_size`` (the last one may be shorter) and
    rescaling l by exp(m_old - m_new) whenever the running maximum grows.  In
    exact arithmetic this equals the full-row statistics for every block size.

    Special rows: all -inf or empty -> (-inf, 0), the identity of
    :func:`merge_softmax_stats`; a NaN -> (NaN, NaN); a +inf without NaN ->
    (+inf, NaN).  For finite maxima 1 <= l <= n holds in floating point too,
    because the maximal entry contributes exp(0) = 1 exactly and every other
    term is at most 1.

    Errors: computes in ``compute_dtype`` (default float32 for inputs narrower
    than 32 bits, else the input dtype).  Within a block the sum is torch's; the
    blocks are folded sequentially, each fold adding about 3u relative error
    (rounded rescale factor, product, sum), so l carries a relative error
    growing at worst like (n + 3B) * u with B = ceil(n / block_size).  The
    growth is systematic, not a random walk, when many small terms are added
    one block at a time to l ~ 1 (each loses up to half an ulp of l).  m is
    exact.  Returns tensors of shape ``x.shape[:-1]`` in the compute dtype.  Raises ValueError for a 0-d
    ``x`` or block_size < 1, TypeError for non-floating dtypes.
    """
    _require_rows(x)
    _require_block_size("block_size", block_size)
    dtype = _widened_compute_dtype(x.dtype, compute_dtype)
    xc = x.to(dtype)
    m = torch.full(x.shape[:-1], -math.inf, dtype=dtype, device=x.device)
    l = torch.zeros(x.shape[:-1], dtype=dtype, device=x.device)
    for start in range(0, x.shape[-1], block_size):
        m, l = _fold_block((m, l), xc[..., start : start + block_size])
    return m, l


def merge_softmax_stats(a: SoftmaxStats, b: SoftmaxStats) -> SoftmaxStats:
    """Combine the stats of two disjoint parts of the same rows (Milakov & Gimelshein 2018).

    Contract: for (m1, l1) of part A and (m2, l2) of part B returns
    m = max(m1, m2), l = l1 * exp(m1 - m) + l2 * exp(m2 - m): the stats of A ++ B.
    The operation is commutative (bitwise: max and a two-term sum commute) and
    associative in exact arithmetic; (-inf, 0) is its identity.  NaN in either
    input propagates; a +inf maximum yields (+inf, NaN) as for a +inf row.

    Errors: computes in the inputs' dtype (promoted with torch's rules); each
    merge adds about 3u relative error to l (two exp, two products, one sum),
    so a reassociated tree differs from another by O(depth * u) relative.
    Shapes must broadcast.
    """
    m1, l1 = a
    m2, l2 = b
    m = torch.maximum(m1, m2)
    shift = _finite_shift(m)
    return m, l1 * torch.exp(m1 - shift) + l2 * torch.exp(m2 - shift)


def online_softmax(
    x: Tensor, *, block_size: int = 128, compute_dtype: torch.dtype | None = None
) -> Tensor:
    """Streaming (online-normalizer) softmax over the last dimension of ``x``.

    Contract: softmax(x)_j = exp(x_j - m) / l with (m, l) from
    :func:`online_softmax_stats` (first sweep, blockwise with rescaling), then a
    second, elementwise normalization sweep.  Exactly equal to the full-row
    softmax in exact arithmetic for every block size >= 1, ragged tails
    included.  -inf entries give 0, all -inf rows give 0, rows with NaN or +inf
    give NaN everywhere (l is NaN there and every entry is divided by it); other
    rows are unaffected.

    Errors: computes in ``compute_dtype`` (default float32 for inputs narrower
    than 32 bits, else the input dtype) and rounds the result to the input
    dtype.  The numerators exp(x_j - m) are bitwise those of
    :func:`two_pass_softmax`, so the two differ only through l: relative
    difference per entry at most about (2n + 4B) * u with B = ceil(n /
    block_size) sequential folds, and bitwise zero when one block covers the
    row.  Measured in float64: 1.11e-16 on the article's 4 x 16 example with
    blocks of 4 (3.3e-16 with blocks of 1); with block_size 1 and one dominant
    entry, small terms added one at a time to l ~ 1 each lose up to half an ulp,
    so the gap grows to several 1e-15 for rows of a few hundred.
    """
    m, l = online_softmax_stats(x, block_size, compute_dtype)
    return _normalize(x.to(m.dtype), m, l).to(x.dtype)


def two_pass_softmax(x: Tensor, *, compute_dtype: torch.dtype | None = None) -> Tensor:
    """Safe (max-subtracted) softmax over the last dimension: max, exp-sum, divide.

    Contract: m = max_j x_j, e_j = exp(x_j - m), softmax_j = e_j / sum_k e_k.
    Special values as in the module contract: -inf entries give 0, all -inf or
    empty rows give 0, rows with NaN or +inf give NaN in every entry, rows are
    independent.

    Errors: computes in ``compute_dtype`` (default float32 for inputs narrower
    than 32 bits, else the input dtype), result rounded to the input dtype.
    The sum of n terms (torch's reduction order) carries a relative error
    growing at worst like n * u; each entry adds one exp and one division
    rounding, so the relative error per entry is bounded by about (n + 2) * u.
    """
    _require_rows(x)
    dtype = _widened_compute_dtype(x.dtype, compute_dtype)
    xc = x.to(dtype)
    m = _row_max(xc)
    l = torch.exp(xc - _finite_shift(m).unsqueeze(-1)).sum(dim=-1)
    return _normalize(xc, m, l).to(x.dtype)


def logsumexp_reference(x: Tensor, *, compute_dtype: torch.dtype | None = None) -> Tensor:
    """log(sum_j exp(x_j)) over the last dimension, computed as m + log(sum exp(x - m)).

    Contract: all -inf or empty rows give -inf; rows with a NaN give NaN; rows
    with a +inf (and no NaN) give +inf.  Output shape ``x.shape[:-1]``, dtype of
    ``x``.

    Errors: computes in ``compute_dtype`` (default float32 for inputs narrower
    than 32 bits, else the input dtype).  The sum's relative error (up to about
    n * u) becomes an absolute error of about n * u in the log term; the final
    addition adds u * |result|.  No overflow for any finite input, since every
    exponent is <= 0.
    """
    _require_rows(x)
    dtype = _widened_compute_dtype(x.dtype, compute_dtype)
    xc = x.to(dtype)
    m = _row_max(xc)
    shift = _finite_shift(m)
    lse = shift + torch.log(torch.exp(xc - shift.unsqueeze(-1)).sum(dim=-1))
    # +inf rows: exp(inf - inf) is NaN, but the true value is +inf.  A row with a
    # NaN has m = NaN (amax propagates NaN), so m == +inf implies "no NaN".
    lse = torch.where(m == math.inf, m, lse)
    return lse.to(x.dtype)


def torch_softmax(x: Tensor) -> Tensor:
    """torch.softmax(x, -1): torch's own fused softmax, as a third opinion.

    Contract and errors are torch's (a fused max / exp-sum / scale kernel in the
    input dtype for float32 / float64, relative error about n * u per entry);
    all -inf rows give NaN there, unlike the references above.
    """
    return torch.softmax(x, dim=-1)


# --------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------


def _check_attention_inputs(q: Tensor, k: Tensor, v: Tensor) -> int:
    """Validate q (B,Hq,Nq,D), k (B,Hkv,Nk,D), v (B,Hkv,Nk,Dv); return the GQA group Hq // Hkv.

    Raises ValueError for wrong ranks, mismatched batch / key length / head
    dim, or Hq not a multiple of Hkv; TypeError for non-floating or differing
    dtypes.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape (B, H, N, D), got {tuple(t.shape)}")
        _require_floating(name, t.dtype)
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    bq, hq, _, dq = q.shape
    bk, hkv, nk, dk = k.shape
    if bq != bk or k.shape[:3] != v.shape[:3]:
        raise ValueError(f"batch/heads/length mismatch: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if dq != dk:
        raise ValueError(f"q and k head dims differ: {dq} vs {dk}")
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"query heads ({hq}) must be a multiple of key/value heads ({hkv})")
    return hq // hkv


def _expand_kv_heads(t: Tensor, group: int) -> Tensor:
    """Repeat each key/value head ``group`` times so query head h reads kv head h // group."""
    return t if group == 1 else t.repeat_interleave(group, dim=1)


def _causal_visibility(nq: int, nk: int, device: torch.device) -> Tensor:
    """Top-left causal mask (Nq, Nk): key j is visible to query i iff j <= i (torch SDPA's is_causal)."""
    return torch.ones(nq, nk, dtype=torch.bool, device=device).tril()


def _require_broadcasts_to(mask: Tensor, shape: tuple[int, ...]) -> None:
    """Raise ValueError unless ``mask`` broadcasts to exactly ``shape`` (without growing it)."""
    try:
        ok = torch.broadcast_shapes(mask.shape, shape) == torch.Size(shape)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to {shape}")


def key_visibility(
    q: Tensor, k: Tensor, causal: bool, mask: Tensor | None
) -> Tensor | None:
    """Boolean visibility (True = attend) broadcastable to (B, Hq, Nq, Nk), or None if all visible.

    Combines the optional boolean ``mask`` with the top-left causal mask.
    Raises TypeError for a non-boolean mask and ValueError if it does not
    broadcast to (B, Hq, Nq, Nk).
    """
    b, hq, nq, _ = q.shape
    nk = k.shape[2]
    visible = None
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be boolean (True = attend), got {mask.dtype}")
        _require_broadcasts_to(mask, (b, hq, nq, nk))
        visible = mask.to(q.device)
    if causal:
        tri = _causal_visibility(nq, nk, q.device)
        visible = tri if visible is None else visible & tri
    return visible


def _scores(q: Tensor, k: Tensor, scale: float) -> Tensor:
    """scale * q @ k^T in the dtype of q and k (one matmul rounding, then one scaling rounding)."""
    return scale * (q @ k.transpose(-2, -1))


def _mask_scores(scores: Tensor, visible: Tensor | None) -> Tensor:
    """Set invisible scores to -inf (so a NaN score that is masked out has no effect)."""
    if visible is None:
        return scores
    return scores.masked_fill(~visible, -math.inf)


def naive_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float,
    causal: bool = False,
    mask: Tensor | None = None,
    compute_dtype: torch.dtype | None = None,
) -> Tensor:
    """Materialized attention: softmax(scale * q k^T, masked) @ v, all in one dtype.

    Contract: q (B,Hq,Nq,D), k (B,Hkv,Nk,D), v (B,Hkv,Nk,Dv), Hq a multiple of
    Hkv; query head h uses kv head h // (Hq // Hkv) (GQA / MQA).  Key j is
    visible to query i iff mask[..., i, j] is True (boolean, broadcastable to
    (B,Hq,Nq,Nk)) and, if ``causal``, j <= i (top-left alignment, as torch
    SDPA's is_causal, also when Nq != Nk).  Invisible scores become -inf, rows
    are normalized with :func:`two_pass_softmax`'s rule, then multiplied by v.
    Query rows with no visible key give exactly 0.  Non-finite q/k only matter
    through visible scores (a NaN or +inf visible score makes its row NaN);
    non-finite values in v propagate as in any matmul (0 * inf = NaN), except
    into rows with no visible key, which are forced to 0.

    Errors: every step (q k^T, scaling, softmax, P v) runs in ``compute_dtype``,
    default the input dtype: this is the "same-dtype naive" implementation of
    the error-ratio rule.  A score carries an absolute error of about
    D * u * scale * sum_d |q_d k_d|, which becomes a relative error of P of
    twice that, plus (Nk + 4) * u from the softmax and Nk * u * max|v| from P v
    (u of the compute dtype).  Output dtype is q.dtype, shape
    (B,Hq,Nq,Dv).  Raises ValueError/TypeError for malformed inputs (see
    module helpers).
    """
    group = _check_attention_inputs(q, k, v)
    dtype = q.dtype if compute_dtype is None else compute_dtype
    _require_floating("compute_dtype", dtype)
    visible = key_visibility(q, k, causal, mask)
    kc = _expand_kv_heads(k.to(dtype), group)
    vc = _expand_kv_heads(v.to(dtype), group)
    scores = _mask_scores(_scores(q.to(dtype), kc, scale), visible)
    probs = two_pass_softmax(scores, compute_dtype=dtype)
    out = probs @ vc
    if visible is not None:
        has_key = visible.any(dim=-1, keepdim=True)
        out = torch.where(has_key, out, torch.zeros_like(out))
    return out.to(q.dtype)


def blocked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float,
    causal: bool = False,
    mask: Tensor | None = None,
    block_n: int = 64,
    compute_dtype: torch.dtype | None = None,
    probs_dtype: torch.dtype | None = None,
) -> Tensor:
    """FlashAttention-style forward: stream over key blocks with running m, l, acc per query row.

    Contract: same shapes, GQA, mask and top-left causal rules as
    :func:`naive_attention`, and the same exact-arithmetic result.  For each
    block of ``block_n`` keys (the last may be shorter): s = scale * q k_blk^T,
    invisible entries -inf, m_new = max(m, rowmax s), alpha = exp(m - m_new),
    p = exp(s - m_new), l = alpha l + rowsum p, acc = alpha acc + round(p) v_blk,
    where round() casts p to ``probs_dtype`` (then back to the compute dtype,
    so only P is rounded and the product accumulates in the compute dtype).
    Output acc / l.  While m_new is -inf the shift is 0, so alpha and p are 0
    instead of NaN; rows with l == 0 (no visible key) give exactly 0.  A NaN or
    +inf visible score makes its row NaN.

    Errors: m, l, acc in ``compute_dtype`` (default float32 for inputs narrower
    than 32 bits, else the input dtype); ``probs_dtype`` defaults to the input
    dtype for inputs narrower than 32 bits (as FlashAttention rounds P to
    fp16/bf16 before the P V matmul) and to the compute dtype otherwise.  With
    compute = probs = float64 the result matches :func:`naive_attention` in
    float64 to O((D + Nk) * u).  Output dtype q.dtype.  Raises ValueError for
    block_n < 1, else as :func:`naive_attention`.
    """
    group = _check_attention_inputs(q, k, v)
    _require_block_size("block_n", block_n)
    dtype = _widened_compute_dtype(q.dtype, compute_dtype)
    if probs_dtype is None:
        probs_dtype = q.dtype if _is_narrow_float(q.dtype) else dtype
    _require_floating("probs_dtype", probs_dtype)
    visible = key_visibility(q, k, causal, mask)
    b, hq, nq, _ = q.shape
    nk = k.shape[2]
    qc = q.to(dtype)
    kc = _expand_kv_heads(k.to(dtype), group)
    vc = _expand_kv_heads(v.to(dtype), group)
    if visible is not None:
        visible = visible.expand(b, hq, nq, nk)

    m = torch.full((b, hq, nq), -math.inf, dtype=dtype, device=q.device)
    l = torch.zeros((b, hq, nq), dtype=dtype, device=q.device)
    acc = torch.zeros((b, hq, nq, v.shape[-1]), dtype=dtype, device=q.device)
    for start in range(0, nk, block_n):
        stop = min(start + block_n, nk)
        s = _scores(qc, kc[:, :, start:stop], scale)
        s = _mask_scores(s, None if visible is None else visible[..., start:stop])
        m_new = torch.maximum(m, torch.amax(s, dim=-1))
        shift = _finite_shift(m_new)
        alpha = torch.exp(m - shift)
        p = torch.exp(s - shift.unsqueeze(-1))
        l = l * alpha + p.sum(dim=-1)
        p_rounded = p.to(probs_dtype).to(dtype)
        acc = acc * alpha.unsqueeze(-1) + p_rounded @ vc[:, :, start:stop]
        m = m_new

    empty = (l == 0).unsqueeze(-1)
    out = torch.where(empty, torch.zeros_like(acc), acc / l.unsqueeze(-1))
    return out.to(q.dtype)


def sdpa_math(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float,
    causal: bool = False,
    mask: Tensor | None = None,
) -> Tensor:
    """torch.nn.functional.scaled_dot_product_attention pinned to the MATH backend.

    Contract: torch's.  ``mask`` follows SDPA semantics: boolean True = attend,
    a floating mask is added to the scores.  ``causal`` is SDPA's is_causal,
    top-left aligned (key j visible to query i iff j <= i, also for Nq != Nk).
    SDPA refuses attn_mask together with is_causal, so when both are given the
    causal triangle is folded into the mask here (AND for boolean masks, -inf
    for floating ones).  GQA (Hq != Hkv) uses enable_gqa=True (torch >= 2.5).
    The math backend gives 0 for fully masked rows (torch >= 2.5).

    Errors: torch's math backend materializes the scores like
    :func:`naive_attention` (in the input dtype for float32 / float64) but
    scales q and k by sqrt(scale) each instead of scaling q k^T, so in float64
    the two differ by rounding only (O((D + Nk) * u)).  Raises whatever SDPA
    raises for malformed inputs.
    """
    is_causal = causal
    attn_mask = mask
    if causal and mask is not None:
        tri = _causal_visibility(q.shape[2], k.shape[2], q.device)
        if mask.dtype == torch.bool:
            attn_mask = mask & tri
        else:
            attn_mask = mask + torch.zeros(tri.shape, dtype=mask.dtype, device=q.device).masked_fill(~tri, -math.inf)
        is_causal = False
    gqa = q.shape[1] != k.shape[1]
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=gqa
        )
