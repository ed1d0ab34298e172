"""High-precision attention rows for the oracle's fallback, fast enough for whole heads.

Same contract and bound as ``mp_reference.attention_row`` (which stays the
simple yardstick), computed in three exact-or-bounded stages:

1. Scores exactly: every binary float is an integer times a power of two, so
   with one common exponent per tensor, q.k_j is a Python integer dot product,
   with no rounding at all.  Differences to the row max are exact integers.
2. Weights in mpmath at ``prec`` bits: p_j = exp(d_j) / sum exp(d_i), relative
   error below ``mp_reference.relative_bound`` (|d_j| <= 1100 kept, smaller
   weights are exact zeros with absolute error < 2**-1580).
3. o = sum_j p_j v_j in double-double: p_j is split as hi + lo (error 2**-106
   relative), p_hi * v is an exact TwoProduct, accumulation uses a double-double
   add whose error is at most 2**-104 of the running sum of |terms| per step,
   so |o - exact| <= (rel_p + Nk 2**-103) * sum_j p_j |v_j| + Nk 2**-1070.  V whose
   largest entry is below 1 is first scaled up by a power of two 2**s (exact) and the
   sum scaled back: the last term becomes Nk 2**-1070 2**-s + 2**-1074 (the scaling back
   of hi and lo), so V near float64's underflow is resolved to a subnormal, not 16 Nk.
"""

from __future__ import annotations

import math

import mpmath
import torch
from mpmath import mp, mpf

from verify import mp_reference

_SPLIT = 134217729.0  # 2**27 + 1: Dekker's splitter for float64


def _to_ints(t: torch.Tensor) -> tuple[list, int]:
    """Rows of a float64 tensor as Python ints times 2**e0 (exact)."""
    mant, exp = torch.frexp(t)
    m53 = (mant * 2.0**53).to(torch.int64)
    e = exp.to(torch.int64) - 53
    nz = m53 != 0
    e0 = int(e[nz].min()) if bool(nz.any()) else 0
    shift = torch.where(nz, e - e0, torch.zeros_like(e)).tolist()
    ms = m53.tolist()
    rows = [[m << s if m >= 0 else -((-m) << s) for m, s in zip(mr, sr)] for mr, sr in zip(ms, shift)]
    return rows, e0


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _two_prod(a, b):
    p = a * b
    ca, cb = _SPLIT * a, _SPLIT * b
    ah, bh = ca - (ca - a), cb - (cb - b)
    al, bl = a - ah, b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def weighted_sum_dd(p_hi: torch.Tensor, p_lo: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """sum_j p_j v_j as a double-double (hi, lo) per column; p (R, Nk), v (Nk, D) float64."""
    R, Nk = p_hi.shape
    hi = torch.zeros(R, v.shape[1], dtype=torch.float64)
    lo = torch.zeros_like(hi)
    for j in range(Nk):
        ph, pl = p_hi[:, j : j + 1], p_lo[:, j : j + 1]
        th, tl = _two_prod(ph, v[j][None, :])
        tl = tl + pl * v[j][None, :]
        s, e = _two_sum(hi, th)
        e = e + (lo + tl)
        hi = s + e
        lo = e - (hi - s)
    return hi, lo


def attention_rows(
    q_rows: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float, prec: int = 128
) -> dict[str, torch.Tensor | float]:
    """Rows of one (batch, head): q_rows (R, D), k and v (Nk, D) float64 CPU, visible (R, Nk) bool.

    Returns out_hi / out_lo / cond (R, Dv), lse_hi / lse_lo (R,), and rel_bound such that
    |out - exact| <= rel_bound * cond + abs_floor (also returned).
    """
    R, Nk = visible.shape
    qi, eq = _to_ints(q_rows)
    ki, ek = _to_ints(k)
    vis = visible.tolist()
    p_hi = torch.zeros(R, Nk, dtype=torch.float64)
    p_lo = torch.zeros_like(p_hi)
    lse_hi = torch.zeros(R, dtype=torch.float64)
    lse_lo = torch.zeros_like(lse_hi)
    unit = mpmath.ldexp(mpf(1), eq + ek)
    with mp.workprec(prec):
        sc = mpf(scale) * unit  # exact: a power-of-two scaling of a float64
        for r in range(R):
            cols = [j for j in range(Nk) if vis[r][j]]
            dots = [sum(a * b for a, b in zip(qi[r], ki[j])) for j in cols]
            key = (lambda x: x) if scale >= 0 else (lambda x: -x)
            top = max(dots, key=key)
            exps = []
            for dj in dots:
                d = sc * (dj - top)  # one rounding of an exact difference
                exps.append(mpf(0) if d < mp_reference.UNDERFLOW_ARGUMENT else mpmath.exp(d))
            total = mpmath.fsum(exps)
            for j, e in zip(cols, exps):
                p = e / total
                h = float(p)
                p_hi[r, j] = h
                p_lo[r, j] = float(p - h)
            lse = sc * top + mpmath.log(total)
            lh = float(lse)
            lse_hi[r], lse_lo[r] = lh, float(lse - lh)
    v64 = v.to(torch.float64)
    # V below 1 is scaled up by a power of two (exact) so that the products p_j v_j stay clear
    # of float64's subnormals, whose absolute rounding would otherwise bound the result near 0
    # (Nk 2**-1070, 16 Nk subnormals: float64 V near underflow); scaling back rounds hi and lo
    # once each, at most half a subnormal apiece.
    top_v = float(v64.abs().max()) if v64.numel() else 0.0
    shift = 1 - math.frexp(top_v)[1] if 0 < top_v < 1 else 0
    vs = torch.ldexp(v64, torch.tensor(shift)) if shift else v64
    out_hi, out_lo = weighted_sum_dd(p_hi, p_lo, vs)
    cond = weighted_sum_dd(p_hi, p_lo, vs.abs())[0] * (1 - 2.0**-50)
    floor = Nk * 2.0**-1070 * (1 + math.ldexp(top_v, shift))
    if shift:
        back = torch.tensor(-shift)
        out_hi, out_lo = torch.ldexp(out_hi, back), torch.ldexp(out_lo, back)
        # cond stays a lower bound: less the half subnormal its own scaling back may round up
        cond = torch.clamp(torch.ldexp(cond, back) - 2.0**-1074, min=0.0)
        floor = math.ldexp(floor, -shift) + 2.0**-1074
    rel = mp_reference.relative_bound(Nk, prec) + 2.0**-104 + Nk * 2.0**-103
    return {"out_hi": out_hi, "out_lo": out_lo, "cond": cond, "lse_hi": lse_hi,
            "lse_lo": lse_lo, "rel_bound": rel, "abs_floor": floor}

