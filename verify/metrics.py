"""Error metrics of a target's output against the certified oracle.

* ``ulp_error``: |got - exact| / ulp_T(exact), libm-test convention (``verify.rounding``).
  Only finite pairs are measured; inf, NaN and signed zeros are checked by
  ``verify.contracts``.  Outputs a flush-to-zero unit produced (got == 0 where the
  exact value is subnormal in T) are counted by ``flushed_to_zero``; the tolerance decides
  whether the flush is allowed (in the compute format it is, in a float16 output it is not).
* ``condition_error`` (attention): |o - exact| / max(u_T * sum_j p_j |v_j|, tiny_T),
  the error in units of the unit roundoff of T scaled by the output's condition;
  componentwise relative error is meaningless for outputs that cancel to ~0.
* relative, absolute and normwise errors for reports.

The oracle's own error is at most 1e-3 of each metric's unit, so these numbers
are exact to that resolution.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from verify.dtypes import FloatFormat, get_format
from verify.oracle import Certified
from verify.rounding import ulp_of_exact


def abs_error(got: torch.Tensor, truth: Certified) -> torch.Tensor:
    """|got - (hi + lo)| in float64; got - hi is exact when both are close (Sterbenz)."""
    g = got.detach().to(torch.float64).to(truth.hi.device)
    return ((g - truth.hi) - truth.lo).abs()


def flushed_to_zero(got: torch.Tensor, truth: Certified, fmt: str | FloatFormat) -> torch.Tensor:
    """got is zero where the exact value rounds to a nonzero subnormal of T: a flush, not an ULP error.

    An exact value of at most half the smallest subnormal rounds to zero (ties to even):
    a zero there is correctly rounded, measured as an ULP error like any other output.
    """
    f = get_format(fmt)
    g = got.detach().to(torch.float64).to(truth.hi.device)
    exact = truth.hi + truth.lo
    rounds_to_subnormal = (exact.abs() > f.smallest_subnormal / 2) & (exact.abs() < f.smallest_normal)
    return (g == 0) & rounds_to_subnormal


def ulp_error(got: torch.Tensor, truth: Certified, fmt: str | FloatFormat) -> torch.Tensor:
    """Error in ULPs of T of the exact value; NaN where either side is not finite."""
    f = get_format(fmt)
    err = abs_error(got, truth) / ulp_of_exact(truth.hi, truth.lo, f)
    g = got.detach().to(torch.float64).to(truth.hi.device)
    finite = torch.isfinite(g) & torch.isfinite(truth.hi)
    return torch.where(finite, err, torch.full_like(err, float("nan")))


def condition_denominator(cond: torch.Tensor, fmt: str | FloatFormat) -> torch.Tensor:
    f = get_format(fmt)
    return torch.clamp(f.unit_roundoff * cond, min=f.smallest_subnormal)


def condition_error(got: torch.Tensor, truth: Certified, cond: torch.Tensor, fmt: str | FloatFormat) -> torch.Tensor:
    """|o - exact| / max(u_T * sum_j p_j |v_j|, tiny_T); NaN where either side is not finite."""
    err = abs_error(got, truth) / condition_denominator(cond, fmt)
    g = got.detach().to(torch.float64).to(truth.hi.device)
    finite = torch.isfinite(g) & torch.isfinite(truth.hi)
    return torch.where(finite, err, torch.full_like(err, float("nan")))


def lse_scale(exact_hi: torch.Tensor, fmt: str | FloatFormat) -> torch.Tensor:
    """The LSE's error unit: u_T * max(1, |LSE|).  An LSE near 0 has no useful relative (or ULP)
    error: its error is absolute, from the scores' and the sum's, and grows with |LSE| only
    once the final additions round at that magnitude."""
    return get_format(fmt).unit_roundoff * torch.clamp(exact_hi.abs(), min=1.0)


def lse_error(got: torch.Tensor, truth: Certified, fmt: str | FloatFormat) -> torch.Tensor:
    """|lse - exact| / (u_T * max(1, |exact|)); NaN where either side is not finite."""
    err = abs_error(got, truth) / lse_scale(truth.hi, fmt)
    g = got.detach().to(torch.float64).to(truth.hi.device)
    finite = torch.isfinite(g) & torch.isfinite(truth.hi)
    return torch.where(finite, err, torch.full_like(err, float("nan")))


def relative_error(got: torch.Tensor, truth: Certified) -> torch.Tensor:
    """|got - exact| / |exact| (inf where exact is 0 and got is not, 0 where both are)."""
    err = abs_error(got, truth)
    denom = (truth.hi + truth.lo).abs()
    rel = err / denom
    return torch.where((denom == 0) & (err == 0), torch.zeros_like(rel), rel)


def normwise_error(got: torch.Tensor, truth: Certified) -> float:
    """||got - exact||_2 / ||exact||_2 over the elements where both are finite."""
    g = got.detach().to(torch.float64).to(truth.hi.device)
    finite = torch.isfinite(g) & torch.isfinite(truth.hi)
    if not finite.any():
        return 0.0
    num = torch.linalg.vector_norm(((g - truth.hi) - truth.lo)[finite])
    den = torch.linalg.vector_norm(truth.hi[finite])
    if den == 0:
        return 0.0 if num == 0 else float("inf")
    return float(num / den)


def rmse(got: torch.Tensor, truth: Certified) -> float:
    """Root-mean-square absolute error over finite elements (FlashAttention-3's Table 3 metric)."""
    err = abs_error(got, truth)
    err = err[torch.isfinite(err)]
    return float(err.square().mean().sqrt()) if err.numel() else 0.0


@dataclass(frozen=True)
class Summary:
    """Distribution of one metric over the measured elements."""

    count: int
    max: float
    p99: float
    median: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def summarize(values: torch.Tensor) -> Summary:
    """max / p99 / median over the finite entries (zeros if there are none)."""
    v = values.detach().flatten().to(torch.float64)
    v = v[torch.isfinite(v)]
    if v.numel() == 0:
        return Summary(0, 0.0, 0.0, 0.0)
    v = v.cpu()
    if v.numel() > 4_000_000:  # quantile() refuses huge inputs; sorting is exact anyway
        s = torch.sort(v).values
        q = lambda a: float(s[min(len(s) - 1, int(a * (len(s) - 1)))])  # noqa: E731
        return Summary(int(v.numel()), float(s[-1]), q(0.99), q(0.5))
    return Summary(int(v.numel()), float(v.max()), float(torch.quantile(v, 0.99)), float(torch.quantile(v, 0.5)))
