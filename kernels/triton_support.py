"""Helpers shared by the Triton softmax and attention kernels.

Device helpers (``@triton.jit``) live here so both kernels compute special values
the same way; host helpers decide when the interpreter is in use and check inputs.

The one piece of real numerics is :func:`exp_diff`, an ``exp(x - m)`` that is
accurate to about one ulp in float32 even though ``x - m`` itself is rounded.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# ln 2 split so that k * LN2_HI is exact for |k| < 2**8: LN2_HI keeps 16 significant
# bits, and the remainder LN2_LO carries the rest of ln 2 to float32 precision.
LN2_HI: tl.constexpr = tl.constexpr(0.693145751953125)
LN2_LO: tl.constexpr = tl.constexpr(1.4286068203094172e-06)
LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
LN2: tl.constexpr = tl.constexpr(0.6931471805599453)
# exp(-110) is far below float32's smallest subnormal (2**-149 ~ exp(-103.3)), so
# clamping there changes no result and keeps the range reduction finite.
EXP_CLAMP: tl.constexpr = tl.constexpr(-110.0)
ROUND_SHIFTER: tl.constexpr = tl.constexpr(12582912.0)  # 1.5 * 2**23
# exp(r) ~ 1 + r + r**2 (C2 + C3 r + C4 r**2 + C5 r**3 + C6 r**4) on |r| <= ln2 / 2, the
# coefficients fitted for least maximum relative error (Lawson's iteration on Chebyshev
# nodes, then rounded to float32): 2**-27.8 relative, against 2**-27.1 for the degree-7
# Taylor polynomial it replaces, with one multiply-add fewer.
EXP_C2: tl.constexpr = tl.constexpr(0.4999999403953552)
EXP_C3: tl.constexpr = tl.constexpr(0.1666651964187622)
EXP_C4: tl.constexpr = tl.constexpr(0.04166839271783829)
EXP_C5: tl.constexpr = tl.constexpr(0.008368780836462975)
EXP_C6: tl.constexpr = tl.constexpr(0.0013814467238262296)
SCALE_BITS: tl.constexpr = tl.constexpr((127 + 64) << 23)  # float32 bits of 2**64
TWO_M64: tl.constexpr = tl.constexpr(2.0**-64)

#: Element types the kernels accept, in and out.
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def interpreting() -> bool:
    """True when Triton runs kernels on the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_device(*tensors: torch.Tensor) -> None:
    """Raise ValueError unless the tensors share one device the kernels can run on.

    CUDA tensors always qualify; CPU tensors only under the interpreter.
    """
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")
    (device,) = devices
    if device.type == "cpu" and not interpreting():
        raise ValueError("CPU tensors need TRITON_INTERPRET=1 (set before triton is imported); "
                         "use CUDA tensors otherwise")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device {device}")


def check_dtype(name: str, t: torch.Tensor) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float16, bfloat16 or float32, got {t.dtype}")


def num_sms(device: torch.device) -> int:
    """Multiprocessor count of a CUDA device; a nominal 4 for the interpreter."""
    if device.type != "cuda":
        return 4
    return device_properties(device).multi_processor_count


_PROPERTIES: dict = {}


def device_properties(device: torch.device) -> torch._C._CudaDeviceProperties:
    """``torch.cuda.get_device_properties`` of a CUDA device, read once per device: a launch
    asks for them on every call, and torch's lookup costs microseconds each time."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = _PROPERTIES.get(index)
    if props is None:
        props = _PROPERTIES[index] = torch.cuda.get_device_properties(index)
    return props


@triton.jit
def safe_max(m):
    """The shift used for exponentials: m itself, or 0 where m = -inf.

    A row whose every entry is -inf has maximum -inf; shifting by 0 instead makes
    every exponential exp(-inf) = 0 rather than exp(-inf - (-inf)) = NaN.
    """
    return tl.where(m == float("-inf"), 0.0, m)


@triton.jit
def exp_diff(x, m):
    """exp(x - m) in float32 for x <= m (or NaN), within about 1 ulp of the exact value.

    Plain exp(x - m) inherits the rounding of the subtraction, up to |x - m| * 2**-24
    relative, i.e. several ulp once |x - m| > 4.  Here the subtraction's error e is
    recovered exactly (Knuth's two-sum) and fed into the reduced argument:
    x - m = k ln2 + r with |r| <= ln2 / 2, exp(r) by a degree-6 polynomial (relative
    error 2**-27.8), and 2**k built from exponent bits.  Only adds, fmas, multiplies and
    two integer ops: no conversion instructions, which run at a fraction of the rate.
    Measured under the interpreter over 2M random (x, m) with x - m in [-100, 0]: at most
    0.96 ulp, mean 0.26 ulp.  NaN inputs give NaN; x = -inf gives exactly 0.
    """
    s = x - m
    # Two-sum: s + e == x - m exactly (valid while s is finite).
    bv = s - x
    e = (x - (s - bv)) + (-m - bv)
    # Below EXP_CLAMP the result is 0 anyway.  maximum() drops a NaN s, so k stays a
    # small integer; the NaN still reaches the result through e.
    e = tl.where(s < EXP_CLAMP, 0.0, e)
    t = tl.maximum(s, EXP_CLAMP)
    # Adding 1.5 * 2**23 rounds t * log2(e) to an integer k held in the low mantissa bits.
    kf = tl.fma(t, LOG2E, ROUND_SHIFTER)
    k = kf - ROUND_SHIFTER
    # Explicit fma: one rounding per step whether or not the compiler would contract.
    r = tl.fma(-k, LN2_HI, t)  # exact (Cody-Waite)
    r = tl.fma(-k, LN2_LO, r) + e
    p = tl.fma(r, EXP_C6, EXP_C5)
    p = tl.fma(p, r, EXP_C4)
    p = tl.fma(p, r, EXP_C3)
    p = tl.fma(p, r, EXP_C2)
    p = tl.fma(p, r, 1.0)
    p = tl.fma(p, r, 1.0)
    # p * 2**k as (p * 2**(k + 64)) * 2**-64: the first factor is a normal power of two for
    # every k >= -159 here, so the first product is exact (p is in (0.7, 1.42)) and the
    # second rounds once, only where the result is subnormal.  2**(k + 64) comes from kf's
    # low bits shifted into the exponent field (kf's own exponent bits shift out).  NaN
    # propagates through the products.
    s1 = ((kf.to(tl.int32, bitcast=True) << 23) + SCALE_BITS).to(tl.float32, bitcast=True)
    return (p * s1) * TWO_M64


@triton.jit
def divide_rn(p, l):
    """p / l for float32, correctly rounded but for rare ties (|error| <= 0.5 ulp + 2**-46 rel).

    One reciprocal per l, then per element a product and one Newton correction from the
    exact residual fma(-q, l, p): three operations instead of a full IEEE division.
    """
    inv = 1.0 / l
    q = p * inv
    return tl.fma(tl.fma(-q, l, p), inv, q)


@triton.jit
def exp_diff_fast(x, m):
    """exp(x - m) through the hardware exp2; a few ulp in float32, ample for 16-bit outputs."""
    return tl.exp2((x - m) * LOG2E)


@triton.jit
def _two_sum_combine(a_hi, a_lo, b_hi, b_lo):
    s = a_hi + b_hi
    bv = s - a_hi
    err = (a_hi - (s - bv)) + (b_hi - bv)
    return s, a_lo + b_lo + err


@triton.jit
def sum_compensated(x, axis: tl.constexpr):
    """Sum along ``axis`` with the rounding error of every addition carried along.

    The result is within about one rounding of the exact sum of the float32 inputs,
    whatever the reduction order (plain ``tl.sum`` can lose log2(n) roundings on a
    GPU tree and n roundings on the sequential interpreter).  Returns (hi, lo) with
    hi + lo the sum; finite inputs only (NaN propagates, inf gives NaN).
    """
    return tl.reduce((x, tl.zeros_like(x)), axis, _two_sum_combine)
