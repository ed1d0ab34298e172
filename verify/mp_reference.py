"""Pure-mpmath ground truth for softmax, log-sum-exp and attention, one row at a time.

These functions are slow and simple on purpose: they are the fallback of the
certified oracle (``verify.oracle``) for the rows its float64 fast path cannot
certify, and the yardstick the fast path is tested against.

Error bound.  Inputs are exact binary floats.  Scores are exact dot products
rounded once (``mpmath.fdot`` multiplies exactly and sums exactly before one
rounding), every later step is one correctly-rounded-or-faithful mpmath
operation at ``prec`` bits.  With n terms and |x_j - max| <= 1100 the relative
error of each probability is below ``(n + 1110 + 20) * 2**(2 - prec)``;
arguments below -1100 are replaced by exact zeros, an absolute error under
``2**-1580``, far below float64's smallest subnormal.  ``row_bound`` returns
that bound so callers can certify what they report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import mpmath
from mpmath import mp, mpf

#: exp(d) for d below this is treated as exactly 0: its value is < 2**-1586.
UNDERFLOW_ARGUMENT = -1100
UNDERFLOW_ABS = 2.0**-1580
#: float64 products reach 2**2048 * D; this many extra bits keep scores absolutely accurate.
SCORE_EXTRA_BITS = 2200


def relative_bound(n_terms: int, prec: int) -> float:
    """Relative error bound of a probability or LSE computed by this module."""
    return (n_terms + 1130) * 2.0 ** (2 - prec)


@dataclass(frozen=True)
class MpRow:
    """High-precision probabilities (or outputs) of one row and its log-sum-exp."""

    values: list  # mpf per output element; exact zeros for -inf inputs
    lse: mpf | None
    rel_bound: float
    cond: list | None = None  # attention only: sum_j p_j |v_jd| per output element d


def _shifted_exps(scores: Sequence[mpf | None]) -> tuple[mpf, list]:
    """Max and exp(s - max) for a row whose entries are mpf or None (= -inf)."""
    finite = [s for s in scores if s is not None]
    m = max(finite)
    exps = []
    for s in scores:
        if s is None:
            exps.append(mpf(0))
            continue
        d = s - m
        exps.append(mpf(0) if d < UNDERFLOW_ARGUMENT else mpmath.exp(d))
    return m, exps


def softmax_row(row: Sequence[float], prec: int = 128) -> MpRow:
    """softmax and log-sum-exp of one row of finite floats and -inf entries (at least one finite)."""
    with mp.workprec(prec):
        scores = [None if x == -math.inf else mpf(x) for x in row]
        m, exps = _shifted_exps(scores)
        total = mpmath.fsum(exps)
        probs = [e / total for e in exps]
        lse = m + mpmath.log(total)
    return MpRow(probs, lse, relative_bound(len(row), prec))


def attention_row(
    q: Sequence[float],
    keys: Sequence[Sequence[float]],
    values: Sequence[Sequence[float]],
    visible: Sequence[bool],
    scale: float,
    prec: int = 128,
) -> MpRow:
    """o = sum_j p_j v_j with p = softmax(scale * q.k_j over visible j); at least one visible key.

    Also returns the log-sum-exp of the scaled scores.  ``rel_bound`` bounds
    |o_d - exact| / sum_j p_j |v_jd| for every output element d.
    """
    # Scores carry enough extra bits that their absolute error is below 2**-prec
    # even when |score| reaches float64's range squared: products are exact and
    # fdot rounds its exact sum once.
    with mp.workprec(prec + SCORE_EXTRA_BITS):
        s = mpf(scale)
        scores = [s * mpmath.fdot(q, k) if vis else None for k, vis in zip(keys, visible)]
    with mp.workprec(prec):
        m, exps = _shifted_exps(scores)
        total = mpmath.fsum(exps)
        probs = [e / total for e in exps]
        lse = m + mpmath.log(total)
        used = [(p, v) for p, v in zip(probs, values) if p != 0]
        ps = [p for p, _ in used]
        dims = range(len(values[0]))
        out = [mpmath.fdot(ps, [v[d] for _, v in used]) for d in dims]
        cond = [mpmath.fdot(ps, [abs(v[d]) for _, v in used]) for d in dims]
    return MpRow(out, lse, relative_bound(len(keys), prec) * 2, cond)
