"""Certified high-precision oracle for softmax, log-sum-exp and attention.

Contract
--------
Inputs are tensors of any supported dtype; their values are taken as the exact
binary numbers they hold.  Every value the oracle returns is a pair
``hi + lo`` of float64 numbers with an absolute ``bound`` such that
``|exact - (hi + lo)| <= bound``, and the oracle *guarantees*

* softmax / LSE:  ``bound <= resolution * ulp_T(exact)``,
* attention:      ``bound <= resolution * max(u_T * sum_j p_j |v_j|, tiny_T)``,

for the target format T (``resolution`` defaults to 1e-3), so errors measured
against it are exact to that resolution.

How
---
1. Fast path, vectorized in float64 torch on the inputs' device.  Each step is
   followed by a first-order rounding-error bound, derived in the comments
   below from the standard model fl(a op b) = (a op b)(1 + d), |d| <= u = 2**-53,
   the documented accuracy of float64 ``exp`` / ``log`` (at most 1 ulp in glibc,
   SLEEF's u10 variants that torch vectorizes with, and CUDA; we assume
   ``EXP_ULPS = 2`` for margin, and ``tests/test_oracle.py`` measures it), and
   gamma_n = n u / (1 - n u) for sums and dot products of n terms.
2. Each element's bound is compared with what the guarantee needs.  A row with
   any undecided element (heavy cancellation in an LSE, huge scores, float64
   targets whose resolution float64 cannot reach) is recomputed entirely by
   ``verify.mp_reference`` at ``prec`` bits.  Precision is never lowered to gain
   speed.  Rounding to T is reported with a flag saying where it is certain
   (``Certified.rounded``): within 1e-3 ULP of a midpoint either neighbour can be
   the correctly rounded value, and no metric depends on which.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from verify import exact_rows, mp_reference
from verify.dtypes import FloatFormat, get_format
from verify.rounding import distance_to_midpoint, round_to_format, ulp

U64 = 2.0**-53
TINY64 = 2.0**-1074
EXP_ULPS = 2.0
#: relative error of float64 exp / log: EXP_ULPS ulps, an ulp being at most 2u relative.
EXP_REL = EXP_ULPS * 2 * U64
#: absolute error of a float64 exp result in the subnormal range, or flushed to zero.
EXP_ABS = (EXP_ULPS + 1) * TINY64
#: Multiplier absorbing second-order terms: every first-order term we sum is < 1e-6.
SECOND_ORDER = 1.0 + 1e-5

ROW_FINITE = 0
ROW_MASKED = 1  # every entry -inf / no visible key: the contract allows all-0 or all-NaN
ROW_NONFINITE = 2  # NaN or +inf reaches the row: the contract requires NaN


def gamma(n: int | torch.Tensor) -> float | torch.Tensor:
    """gamma_n = n u / (1 - n u): relative error bound of an n-term sum or dot product."""
    return n * U64 / (1 - n * U64)


@dataclass(frozen=True)
class Certified:
    """Values ``hi + lo`` (float64) with an absolute error bound on each element."""

    hi: torch.Tensor
    lo: torch.Tensor
    bound: torch.Tensor

    def rounded(self, fmt: str | FloatFormat) -> tuple[torch.Tensor, torch.Tensor]:
        """The exact value rounded to ``fmt`` (as float64), and where that rounding is certain.

        Rounding is certain where the error bound does not reach a rounding
        midpoint of ``fmt``; elsewhere the exact value is within ``bound`` of a
        midpoint and either neighbour may be the correctly rounded one.
        """
        decided = distance_to_midpoint(self.hi + self.lo, fmt) > self.bound
        return round_to_format(self.hi, fmt, self.lo), decided | ~torch.isfinite(self.hi)


@dataclass(frozen=True)
class SoftmaxTruth:
    """Oracle softmax of a (..., n) tensor: probabilities, LSE and row classification."""

    probs: Certified  # shape (..., n)
    lse: Certified  # shape (...)
    row_status: torch.Tensor  # int8, shape (...): ROW_FINITE / ROW_MASKED / ROW_NONFINITE
    fallback_rows: torch.Tensor  # bool, shape (...): rows recomputed in mpmath
    target: str


@dataclass(frozen=True)
class AttentionTruth:
    """Oracle attention: outputs, their condition scale sum_j p_j |v_j|, LSE and classifications."""

    out: Certified  # (B, Hq, Nq, D)
    cond: torch.Tensor  # (B, Hq, Nq, D): sum_j p_j |v_jd| (lower bound: the certified one)
    lse: Certified  # (B, Hq, Nq): log-sum-exp of the scaled, masked scores
    row_status: torch.Tensor  # (B, Hq, Nq) int8
    expected_nonfinite: torch.Tensor  # (B, Hq, Nq, D) bool: NaN/inf inputs reach this element
    expected_nan: torch.Tensor  # (B, Hq, Nq, D) bool: a NaN input reaches it (the output must be NaN)
    # (B, Hq, Nq) bool: a NaN reaches the row's scores (query or a visible key) and no infinity
    # does: its log-sum-exp must be NaN (V does not enter the LSE)
    lse_expected_nan: torch.Tensor
    # (B, Hq, Nq, D) bool: a NaN/inf sits in V only under zero weights (masked keys); IEEE gives
    # 0 * NaN = NaN, so a P V product may turn it non-finite: such an element may be NaN, or exact
    # (in a row with no visible key, exact is 0: torch's math backend gives [nan, 0, ...] there).
    # Also an element past the contract's domain for V (see ``accumulator_may_overflow``): it
    # may be +-inf or NaN, or exact.
    may_be_nonfinite: torch.Tensor
    input_has_nonfinite: bool  # any NaN / inf anywhere in q, k or v
    visible: torch.Tensor | None  # (B, Hq, Nq, Nk) bool: the effective causal & mask pattern
    fallback_rows: torch.Tensor  # (B, Hq, Nq) bool
    uncertified_rows: torch.Tensor  # (B, Hq, Nq) bool: undecided rows past max_fallback_work (not measured)
    target: str
    # float64 intermediates of the fast path, accurate to ~1e-13 relative; the
    # tolerance policy evaluates its first-order bounds with them.  None (with ``visible``) in
    # a truth assembled from slices of a case (verify.truth_chunks), which drops them.
    probs: torch.Tensor | None  # (B, Hq, Nq, Nk) softmax weights (0 where not visible)
    shifted: torch.Tensor | None  # (B, Hq, Nq, Nk) scaled score minus the row max (-inf where not visible)
    abs_scores: torch.Tensor | None  # (B, Hq, Nq, Nk) |scale| * sum_d |q_d k_jd|
    # (B, Hq, Nq, Dv) float64: where the output of an ill-conditioned row must lie
    # (tolerance.attention_value_hull, for one target's model); None: the hull of all the values
    value_lo: torch.Tensor | None = None
    value_hi: torch.Tensor | None = None


# --------------------------------------------------------------------------------------
# shared building blocks
# --------------------------------------------------------------------------------------


def tree_sum(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Sum over the last dim by pairwise halving; returns (sum, levels).

    For nonnegative terms the relative error is at most gamma(levels),
    levels = ceil(log2 n), whatever the device: the order is fixed here rather
    than left to a library reduction whose order we could not bound as tightly.
    """
    n = x.shape[-1]
    levels = max(0, math.ceil(math.log2(n))) if n > 0 else 0
    width = 1 << levels
    if width != n:
        x = torch.nn.functional.pad(x, (0, width - n))
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0], levels


def _needs_fallback_ulp(
    value: torch.Tensor, bound: torch.Tensor, fmt: FloatFormat, resolution: float
) -> torch.Tensor:
    """Elements whose bound may exceed ``resolution`` ULPs of the exact value in ``fmt``.

    Sufficient test, three operations: every x has ulp(x) > |x| 2**-p (normal and
    subnormal alike), and |exact| >= |value| - bound; NaN bounds fail the test.
    """
    ok = bound <= resolution * 2.0 ** (-fmt.precision) * (value.abs() - bound)
    ok |= bound <= resolution * fmt.smallest_subnormal
    return ~ok


def _mp_to_pair(x) -> tuple[float, float]:
    """An mpf as float64 hi + lo with |x - hi - lo| <= 2**-105 |x| (exact when representable)."""
    hi = float(x)
    if not math.isfinite(hi) or hi == 0.0 and x == 0:
        return hi, 0.0
    return hi, float(x - hi)


# --------------------------------------------------------------------------------------
# softmax and LSE
# --------------------------------------------------------------------------------------


def softmax_truth(
    x: torch.Tensor,
    target: str | torch.dtype | FloatFormat | None = None,
    *,
    resolution: float = 1e-3,
    prec: int = 128,
) -> SoftmaxTruth:
    """Certified softmax over the last dim of ``x`` and its log-sum-exp.

    ``target`` is the format the measured outputs are in (default: x's dtype);
    the bounds are certified to ``resolution`` ULPs of it.  Work happens in
    float64 on x's device; undecided rows move to mpmath on the CPU.
    """
    if x.dim() == 0:
        raise ValueError("softmax needs at least one dimension")
    fmt = get_format(x.dtype if target is None else target)
    lead = x.shape[:-1]
    n = x.shape[-1]
    x64 = x.detach().to(torch.float64).reshape(-1, n)
    rows = x64.shape[0]

    has_nan = torch.isnan(x64).any(-1) | (x64 == math.inf).any(-1)
    all_masked = (x64 == -math.inf).all(-1) & ~has_nan
    status = torch.full((rows,), ROW_FINITE, dtype=torch.int8, device=x64.device)
    status[all_masked] = ROW_MASKED
    status[has_nan] = ROW_NONFINITE
    good = status == ROW_FINITE
    xs = torch.where(good[:, None], x64, torch.zeros_like(x64))

    # (1) m is an exact max; d = fl(x - m) has relative error u.
    m = xs.max(-1).values
    d = xs - m[:, None]
    e = torch.exp(d)  # -inf entries give an exact 0
    absd = torch.where(torch.isfinite(d), d.abs(), torch.zeros_like(d))
    # (2) rel. error of e: the argument error u|d| becomes relative error u|d| in exp,
    # plus exp's own error; below the normal range exp has the absolute error EXP_ABS.
    eta = (U64 * absd + EXP_REL) * SECOND_ORDER
    # (3) S = sum e with pairwise halving: S >= 1 because the max contributes exp(0) = 1.
    S, levels = tree_sum(e)
    g = gamma(levels)
    eps_S = ((g + eta.max(-1).values) * (1 + g) + n * EXP_ABS) * SECOND_ORDER
    # (4) p = fl(e / S): one more rounding; underflow to subnormal costs TINY64 absolute.
    p = e / S[:, None]
    rel_p = (eta + eps_S[:, None] + U64) * SECOND_ORDER
    bound_p = rel_p * p + (EXP_ABS + TINY64)
    # (5) LSE = fl(m + fl(log S)); |log S - log S*| <= eps_S / (1 - eps_S).
    logS = torch.log(S)
    lse = m + logS
    bound_lse = (eps_S * SECOND_ORDER + EXP_REL * logS.abs() + U64 * lse.abs()) * SECOND_ORDER

    undecided = _needs_fallback_ulp(p, bound_p, fmt, resolution).any(-1)
    undecided |= _needs_fallback_ulp(lse, bound_lse, fmt, resolution)
    undecided &= good

    p_lo = torch.zeros_like(p)
    lse_lo = torch.zeros_like(lse)
    if undecided.any():
        p, p_lo, bound_p, lse, lse_lo, bound_lse = _softmax_fallback(
            x64, undecided, p, p_lo, bound_p, lse, lse_lo, bound_lse, prec
        )

    # Rows outside the finite case carry no numeric truth: mark them NaN with zero bound.
    nan = torch.full_like(p, math.nan)
    p = torch.where(good[:, None], p, nan)
    bound_p = torch.where(good[:, None], bound_p, torch.zeros_like(bound_p))
    lse = torch.where(good, lse, torch.where(all_masked, torch.full_like(lse, -math.inf), torch.full_like(lse, math.nan)))
    bound_lse = torch.where(good, bound_lse, torch.zeros_like(bound_lse))
    return SoftmaxTruth(
        probs=Certified(p.reshape(*lead, n), p_lo.reshape(*lead, n), bound_p.reshape(*lead, n)),
        lse=Certified(lse.reshape(lead), lse_lo.reshape(lead), bound_lse.reshape(lead)),
        row_status=status.reshape(lead),
        fallback_rows=undecided.reshape(lead),
        target=fmt.name,
    )


def _softmax_fallback(x64, undecided, p, p_lo, bound_p, lse, lse_lo, bound_lse, prec):
    """Recompute the undecided rows in mpmath and splice them in."""
    idx = torch.nonzero(undecided).flatten().tolist()
    rows_cpu = x64[undecided].cpu().tolist()
    p, p_lo, bound_p = p.clone(), p_lo.clone(), bound_p.clone()
    lse, lse_lo, bound_lse = lse.clone(), lse_lo.clone(), bound_lse.clone()
    new_p, new_plo, new_bp, new_l, new_llo, new_bl = [], [], [], [], [], []
    for row in rows_cpu:
        r = mp_reference.softmax_row(row, prec)
        pairs = [_mp_to_pair(v) for v in r.values]
        new_p.append([a for a, _ in pairs])
        new_plo.append([b for _, b in pairs])
        new_bp.append([abs(a) * (r.rel_bound + 2.0**-104) + mp_reference.UNDERFLOW_ABS for a, _ in pairs])
        lh, ll = _mp_to_pair(r.lse)
        new_l.append(lh)
        new_llo.append(ll)
        new_bl.append(abs(lh) * (r.rel_bound + 2.0**-104) + 2.0 ** (-prec + 8))
    dev = p.device
    t = lambda v: torch.tensor(v, dtype=torch.float64, device=dev)  # noqa: E731
    p[idx], p_lo[idx], bound_p[idx] = t(new_p), t(new_plo), t(new_bp)
    lse[idx], lse_lo[idx], bound_lse[idx] = t(new_l), t(new_llo), t(new_bl)
    return p, p_lo, bound_p, lse, lse_lo, bound_lse


# --------------------------------------------------------------------------------------
# attention
# --------------------------------------------------------------------------------------


def visibility(
    batch: int, heads: int, nq: int, nk: int, *, causal: bool, mask: torch.Tensor | None, device
) -> torch.Tensor:
    """(B, Hq, Nq, Nk) bool: key j is visible to query i (top-left causal AND the boolean mask)."""
    vis = torch.ones((batch, heads, nq, nk), dtype=torch.bool, device=device)
    if causal:
        i = torch.arange(nq, device=device)[:, None]
        j = torch.arange(nk, device=device)[None, :]
        vis = vis & (j <= i)
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(f"attention mask must be boolean (True = attend), got {mask.dtype}")
        vis = vis & mask.to(device).expand(batch, heads, nq, nk)
    return vis


def accumulator_may_overflow(visible: torch.Tensor, v: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """(B, Hq, Nq, Dv) bool (or a broadcastable False): the output elements whose visible values
    sum past half the compute format's largest value, sum_j |v_jd| over the keys row i sees.

    The contract's domain for V.  A kernel that accumulates sum_j p_j v_j with p_j = exp(s_j - m)
    <= 1 and divides by l = sum_j p_j at the end (FlashAttention's schedule) holds up to that
    sum, and overflows past the compute format's range where the exact output, a weighted mean
    of V, is finite (bfloat16 V of 2e38 over 4 keys, float32 accumulation).  Such elements may be
    non-finite.  Below half the range no unnormalised partial sum can overflow, rounding
    included, and the strategies keep every case there (``strategies.attention.v_limit``: Nk
    |V| <= half the compute format's largest value).  The compute format is float32 for inputs
    of 32 bits or fewer and float64 for float64, as Capabilities' default."""
    compute_max = get_format("float64" if fmt.name == "float64" else "float32").max_finite
    v_abs = torch.nan_to_num(v.abs(), nan=0.0, posinf=0.0)  # non-finite V is judged apart
    # Cheap first: no case the strategies draw comes near it.
    if v.numel() == 0 or float(v_abs.max()) * v.shape[-2] <= compute_max / 2:
        return torch.zeros((), dtype=torch.bool, device=v.device)
    return (visible.to(torch.float64) @ v_abs) > compute_max / 2


def attention_truth(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    causal: bool = False,
    mask: torch.Tensor | None = None,
    target: str | torch.dtype | FloatFormat | None = None,
    resolution: float = 1e-3,
    prec: int = 128,
    max_fallback_work: float | None = None,
    fallback_only: torch.Tensor | Callable[[AttentionTruth], torch.Tensor] | None = None,
) -> AttentionTruth:
    """Certified ``softmax(scale * Q K^T + mask) V`` with GQA, causal (top-left) and boolean masks.

    ``max_fallback_work`` caps the exact CPU fallback (rows x Nk x (D + 100): integer multiply-adds
    plus ~100 for each mpmath exponential, in the same unit); rows past
    the cap are returned *uncertified* (NaN value, infinite bound) rather than approximated,
    so they are excluded from every measurement and counted by ``uncertified_rows``.
    ``fallback_only`` (B, Hq, Nq) bool limits the fallback to those rows the same way (the
    engine uses it to skip rows that are ill-conditioned for the target anyway).  It may
    also be a function of the fast-path result (every undecided row uncertified, as with
    ``max_fallback_work=0``) returning that mask: the rows worth refining are then chosen
    from the fast path without evaluating it twice.

    q is (B, Hq, Nq, D); k and v are (B, Hkv, Nk, D) with Hq a multiple of Hkv.
    Output bounds are certified to ``resolution * max(u_T * sum_j p_j|v_j|, tiny_T)``.
    """
    fmt = get_format(q.dtype if target is None else target)
    B, Hq, Nq, D = q.shape
    Bk, Hkv, Nk, Dk = k.shape
    if v.shape[:3] != k.shape[:3] or Bk != B or Dk != D or Hq % Hkv:
        raise ValueError(f"incompatible shapes q={tuple(q.shape)} k={tuple(k.shape)} v={tuple(v.shape)}")
    group = Hq // Hkv
    dev = q.device
    q64 = q.detach().to(torch.float64)
    k64 = k.detach().to(torch.float64).repeat_interleave(group, dim=1)
    v64 = v.detach().to(torch.float64).repeat_interleave(group, dim=1)
    vis = visibility(B, Hq, Nq, Nk, causal=causal, mask=mask, device=dev)

    # Non-finite inputs: which rows / elements they reach.
    q_bad = ~torch.isfinite(q64).all(-1)  # (B,Hq,Nq)
    k_bad = ~torch.isfinite(k64).all(-1)  # (B,Hq,Nk)
    row_bad = q_bad | (vis & k_bad[:, :, None, :]).any(-1)
    v_bad = ~torch.isfinite(v64)  # (B,Hq,Nk,Dv)
    elem_bad = (vis.to(torch.float64) @ v_bad.to(torch.float64)) > 0
    no_key = ~vis.any(-1)
    status = torch.full((B, Hq, Nq), ROW_FINITE, dtype=torch.int8, device=dev)
    status[no_key] = ROW_MASKED
    status[row_bad & ~no_key] = ROW_NONFINITE
    expected_nonfinite = (row_bad & ~no_key)[..., None] | (elem_bad & ~no_key[..., None])
    # NaN must propagate; an infinity may legitimately end up as +-inf scores that a kernel
    # treats as masked (inf - inf, inf * 0 differ by evaluation order), so only NaN is required.
    row_nan = torch.isnan(q64).any(-1) | (vis & torch.isnan(k64).any(-1)[:, :, None, :]).any(-1)
    elem_nan = (vis.to(torch.float64) @ torch.isnan(v64).to(torch.float64)) > 0
    expected_nan = ((row_nan & ~no_key)[..., None] | (elem_nan & ~no_key[..., None])) & expected_nonfinite
    # ... unless an infinity reaches the row's scores too: a -inf score then hides its key
    # legitimately, so what the NaN in that key's value does is undefined as well.
    row_inf = torch.isinf(q64).any(-1) | (vis & torch.isinf(k64).any(-1)[:, :, None, :]).any(-1)
    expected_nan &= ~row_inf[..., None]
    lse_expected_nan = row_nan & ~row_inf & ~no_key
    v_col_bad = v_bad.any(-2)[:, :, None, :]  # (B,Hq,1,Dv)
    may_be_nonfinite = (v_col_bad | accumulator_may_overflow(vis, v64, fmt)) & ~expected_nonfinite

    qz = torch.nan_to_num(q64, nan=0.0, posinf=0.0, neginf=0.0)
    kz = torch.nan_to_num(k64, nan=0.0, posinf=0.0, neginf=0.0)
    vz = torch.nan_to_num(v64, nan=0.0, posinf=0.0, neginf=0.0)

    # (1) raw scores: |fl(q.k) - q.k| <= gamma_D (|q|.|k|) for any summation order or FMA use.
    S = qz @ kz.transpose(-1, -2)
    A = qz.abs() @ kz.abs().transpose(-1, -2)
    gD = gamma(D)
    s = S * scale
    # |A - A_computed| <= gamma_D A, so A <= A_computed / (1 - gamma_D); products may underflow.
    ds = (abs(scale) * (gD * A / (1 - gD) + D * TINY64) + U64 * s.abs()) * SECOND_ORDER
    s = torch.where(vis, s, torch.full_like(s, -math.inf))
    ok_row = ~no_key & ~row_bad & torch.isfinite(S).all(-1) & torch.isfinite(A).all(-1)
    s = torch.where(ok_row[..., None], s, torch.where(vis, torch.zeros_like(s), s))
    s = torch.where(no_key[..., None], torch.zeros_like(s), s)

    # (2) shifted exponentials: argument error ds + u|d|, then exp's own error.
    m = s.max(-1).values
    d = s - m[..., None]
    e = torch.exp(d)
    absd = torch.where(torch.isfinite(d), d.abs(), torch.zeros_like(d))
    arg_err = torch.where(vis, ds + U64 * absd, torch.zeros_like(ds))
    eta = ((arg_err + EXP_REL) * SECOND_ORDER).where(arg_err < 1e-6, torch.full_like(arg_err, math.inf))
    # (3) row sums (>= 1) and probabilities, as for softmax.
    l, levels = tree_sum(e)
    g = gamma(levels)
    eta_max = torch.where(vis, eta, torch.zeros_like(eta)).max(-1).values
    eps_S = ((g + eta_max) * (1 + g) + Nk * EXP_ABS) * SECOND_ORDER
    p = e / l[..., None]
    rel_p_max = (eta_max + eps_S + U64) * SECOND_ORDER
    # (4) o = P V in float64: |fl(P V) - P V| <= gamma_Nk (P |V|); plus sum_j |dp_j| |v_j|.
    o = p @ vz
    c = p @ vz.abs()
    gN = gamma(Nk)
    abs_floor = (EXP_ABS + TINY64) * vz.abs().sum(-2)  # (B,Hq,Dv): subnormal weights
    bound_o = ((gN + rel_p_max[..., None]) * c * SECOND_ORDER) + abs_floor[:, :, None, :]
    # the exact condition scale is at least c (1 - rel_p_max) (1 - gamma_Nk)
    c_low = c * (1 - rel_p_max[..., None]) * (1 - gN)
    lse = m + torch.log(l)
    bound_lse = (eps_S * SECOND_ORDER + EXP_REL * torch.log(l).abs() + U64 * lse.abs()) * SECOND_ORDER

    need = resolution * torch.maximum(fmt.unit_roundoff * c_low, torch.full_like(c_low, fmt.smallest_subnormal))
    undecided = (bound_o > need).any(-1) | ~torch.isfinite(bound_o).any(-1)
    undecided |= _needs_fallback_ulp(lse, bound_lse, fmt, resolution)
    undecided = (undecided | (~ok_row & ~no_key & ~row_bad)) & ~no_key & ~row_bad

    o_lo = torch.zeros_like(o)
    lse_lo = torch.zeros_like(lse)
    # What the fallback does not change, built once for both the fast-path view and the result.
    fixed = dict(
        row_status=status,
        expected_nonfinite=expected_nonfinite,
        expected_nan=expected_nan,
        lse_expected_nan=lse_expected_nan,
        may_be_nonfinite=may_be_nonfinite.expand_as(expected_nonfinite),
        input_has_nonfinite=bool(q_bad.any() or k_bad.any() or v_bad.any()),
        visible=vis,
        target=fmt.name,
        probs=torch.where(vis, p, torch.zeros_like(p)),
        shifted=torch.where(vis, d, torch.full_like(d, -math.inf)),
        abs_scores=abs(scale) * A,
    )

    def assemble(o, o_lo, bound_o, c_low, lse, lse_lo, bound_lse, refined, uncertified) -> AttentionTruth:
        zero = torch.zeros_like(o)
        o = torch.where(uncertified[..., None], zero + math.nan, o)
        o = torch.where((status == ROW_FINITE)[..., None], o, torch.where(no_key[..., None], zero, zero + math.nan))
        o = torch.where(expected_nonfinite, torch.full_like(o, math.nan), o)
        bound_o = torch.where(torch.isnan(o), zero, bound_o)
        lse = torch.where(no_key, torch.full_like(lse, -math.inf), lse)
        lse = torch.where(status == ROW_NONFINITE, torch.full_like(lse, math.nan), lse)
        bound_lse = torch.where(status == ROW_FINITE, bound_lse, torch.zeros_like(bound_lse))
        c_low = torch.where(torch.isnan(o), zero, c_low)
        return AttentionTruth(out=Certified(o, o_lo, bound_o), cond=c_low, lse=Certified(lse, lse_lo, bound_lse),
                              fallback_rows=refined, uncertified_rows=uncertified, **fixed)

    if callable(fallback_only):
        fast = assemble(o, o_lo, bound_o, c_low, lse, lse_lo, bound_lse, torch.zeros_like(undecided), undecided)
        fallback_only = fallback_only(fast)
    uncertified = torch.zeros_like(undecided)
    if fallback_only is not None:
        uncertified = undecided & ~fallback_only.to(undecided.device)
        undecided = undecided & ~uncertified
    if max_fallback_work is not None and undecided.any():
        rows_allowed = int(max_fallback_work // max(1, Nk * (D + 100)))
        flat = torch.nonzero(undecided.flatten()).flatten()
        if flat.numel() > rows_allowed:
            drop = flat[rows_allowed:]
            uncertified = uncertified.clone()
            uncertified.view(-1)[drop] = True
            undecided = undecided & ~uncertified
    if undecided.any():
        o, o_lo, bound_o, c_low, lse, lse_lo, bound_lse = _attention_fallback(
            qz, kz, vz, vis, scale, undecided, o, o_lo, bound_o, c_low, lse, lse_lo, bound_lse, prec
        )
    return assemble(o, o_lo, bound_o, c_low, lse, lse_lo, bound_lse, undecided, uncertified)


def _attention_fallback(q64, k64, v64, vis, scale, undecided, o, o_lo, bound_o, c_low, lse, lse_lo, bound_lse, prec):
    """Recompute undecided query rows exactly (``verify.exact_rows``) on the CPU and splice them in."""
    o, o_lo, bound_o, c_low = o.clone(), o_lo.clone(), bound_o.clone(), c_low.clone()
    lse, lse_lo, bound_lse = lse.clone(), lse_lo.clone(), bound_lse.clone()
    und = undecided.cpu()
    qc, kc, vc, visc = q64.cpu(), k64.cpu(), v64.cpu(), vis.cpu()
    for b, h in torch.nonzero(und.any(-1)).tolist():
        rows = torch.nonzero(und[b, h]).flatten()
        r = exact_rows.attention_rows(qc[b, h, rows], kc[b, h], vc[b, h], visc[b, h, rows], scale, prec)
        dev = o.device
        o[b, h, rows.to(dev)] = r["out_hi"].to(dev)
        o_lo[b, h, rows.to(dev)] = r["out_lo"].to(dev)
        c_low[b, h, rows.to(dev)] = r["cond"].to(dev)
        bound_o[b, h, rows.to(dev)] = (r["cond"] * (r["rel_bound"] + 2.0**-100) + r["abs_floor"]).to(dev)
        lse[b, h, rows.to(dev)] = r["lse_hi"].to(dev)
        lse_lo[b, h, rows.to(dev)] = r["lse_lo"].to(dev)
        bound_lse[b, h, rows.to(dev)] = (r["lse_hi"].abs() * (r["rel_bound"] + 2.0**-104) + 2.0 ** (-prec + 8)).to(dev)
    return o, o_lo, bound_o, c_low, lse, lse_lo, bound_lse
