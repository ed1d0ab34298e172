"""Spacing (ULP) and correct rounding of float64 values in any format of ``verify.dtypes``.

Convention (glibc libm-test, Zimmermann et al.): for a normal x,
``ulp(x) = 2**(exponent(x) - p + 1)`` where ``exponent(x) = floor(log2 |x|)``;
for zero and every subnormal x it is the smallest subnormal ``2**(emin - p + 1)``.
All operations here are exact: they only scale by powers of two and round to
integers, which float64 does without error for every format narrower than it.
"""

from __future__ import annotations

import torch

from verify.dtypes import FloatFormat, get_format


def exponent(x: torch.Tensor) -> torch.Tensor:
    """floor(log2|x|) for finite nonzero float64 x (exact, via frexp); 0 is mapped to -1075."""
    _, e = torch.frexp(x)
    e = e.to(torch.int64) - 1
    return torch.where(x == 0, torch.full_like(e, -1075), e)


def ulp(x: torch.Tensor, fmt: str | FloatFormat) -> torch.Tensor:
    """ULP of each float64 value of ``x`` in format ``fmt`` (libm-test convention), as float64.

    Infinities and NaN give NaN: they are not measured in ULPs.
    """
    f = get_format(fmt)
    x = x.to(torch.float64)
    e = torch.clamp(exponent(x), min=f.emin)
    out = torch.ldexp(torch.ones_like(x), (e - f.precision + 1).to(x.dtype))
    return torch.where(torch.isfinite(x), out, torch.full_like(x, float("nan")))


def ulp_of_exact(hi: torch.Tensor, lo: torch.Tensor, fmt: str | FloatFormat) -> torch.Tensor:
    """ULP of the exact value ``hi + lo`` (|lo| <= ulp64(hi)/2), exact at binade edges.

    When ``hi`` is a power of two and ``lo`` points towards zero, the exact value
    lies in the binade below and its ULP is half that of ``hi``.
    """
    f = get_format(fmt)
    u = ulp(hi, f)
    mant, _ = torch.frexp(hi)
    at_power_of_two = (mant.abs() == 0.5) & (torch.sign(lo) == -torch.sign(hi)) & (lo != 0)
    above_emin = exponent(hi) > f.emin
    return torch.where(at_power_of_two & above_emin, u / 2, u)


def round_to_format(hi: torch.Tensor, fmt: str | FloatFormat, lo: torch.Tensor | None = None) -> torch.Tensor:
    """Round ``hi + lo`` to the nearest value of ``fmt`` (ties to even), returned as float64.

    Correct whenever ``hi`` is the float64 nearest to ``hi + lo``: a tie in ``fmt``
    can only be broken the wrong way when ``hi`` sits exactly on a midpoint, and
    then the sign of ``lo`` decides.  Overflow follows IEEE round-to-nearest:
    values at or beyond ``max + ulp(max)/2`` become inf (or NaN for formats
    without inf, as float8_e4m3fn saturating casts do not apply here).
    torch's own float64 -> float16/bfloat16 casts go through float32 and can
    round twice; this function never does.
    """
    f = get_format(fmt)
    hi = hi.to(torch.float64)
    if f.name == "float64":
        return hi.clone()
    u = ulp(hi, f)
    q = hi / u  # exact: division by a power of two inside float64's range
    r = torch.round(q)  # ties to even
    if lo is not None:
        tie = (q - torch.floor(q)) == 0.5
        away = torch.where(torch.sign(lo) == torch.sign(hi), torch.ceil(q.abs()), torch.floor(q.abs())) * torch.sign(q)
        r = torch.where(tie & (lo != 0), away, r)
    out = r * u
    limit = f.max_finite + ulp(torch.tensor(f.max_finite, dtype=torch.float64), f) / 2
    overflow = out.abs() >= limit
    big = torch.full_like(out, float("inf") if f.has_inf else float("nan"))
    out = torch.where(overflow, torch.copysign(big, hi), out)
    return torch.where(torch.isfinite(hi), out, hi)


def distance_to_midpoint(hi: torch.Tensor, fmt: str | FloatFormat) -> torch.Tensor:
    """Distance from ``hi`` to the nearest rounding midpoint of ``fmt`` (float64, exact).

    If an error bound on ``hi`` is smaller than this distance, rounding ``hi``
    and rounding the exact value give the same result.
    """
    f = get_format(fmt)
    u = ulp(hi, f)
    frac = hi / u - torch.floor(hi / u)
    d = (frac - 0.5).abs() * u
    # near a binade edge the spacing below is half: the midpoint below 2^k is 2^k - u/4
    mant, _ = torch.frexp(hi)
    d_edge = (hi.abs() - torch.ldexp(torch.ones_like(hi), exponent(hi).to(hi.dtype)) + u / 4).abs()
    return torch.where(mant.abs() < 0.5 + 2.0**-40, torch.minimum(d, d_edge), d)
