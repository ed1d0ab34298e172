"""Floating-point formats the suite knows, described by their parameters.

A binary floating-point format is fixed by its precision p (significand bits,
counting the implicit leading bit), its smallest normal exponent emin and its
largest finite value.  Everything else the suite needs follows:

* unit roundoff            u = 2**-p           (round-to-nearest relative error bound)
* machine epsilon          eps = 2**(1 - p)    (spacing of floats in [1, 2))
* smallest normal          2**emin
* smallest subnormal       2**(emin - p + 1)   (the ULP of zero and of every subnormal)

The values below are exact properties of the IEEE / OCP formats and are
cross-checked against ``torch.finfo`` by the test-suite.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FloatFormat:
    """A floating-point format, named as on the command line."""

    name: str
    torch_dtype: torch.dtype
    precision: int  # p: significand bits including the implicit bit
    emin: int  # exponent of the smallest normal number
    max_finite: float
    has_inf: bool = True
    chopped: bool = False  # conversions into it may truncate instead of rounding to nearest

    @property
    def unit_roundoff(self) -> float:
        """u = 2**-p (2**(1-p) if chopped): |fl(x) - x| <= u |x| for x in the normal range."""
        return 2.0 ** (-self.precision + (1 if self.chopped else 0))

    @property
    def eps(self) -> float:
        return 2.0 ** (1 - self.precision)

    @property
    def smallest_normal(self) -> float:
        return 2.0**self.emin

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.precision + 1)


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("float16", torch.float16, 11, -14, 65504.0),
        FloatFormat("bfloat16", torch.bfloat16, 8, -126, float(torch.finfo(torch.bfloat16).max)),
        FloatFormat("float32", torch.float32, 24, -126, float(torch.finfo(torch.float32).max)),
        FloatFormat("float64", torch.float64, 53, -1022, float(torch.finfo(torch.float64).max)),
        FloatFormat("float8_e4m3fn", torch.float8_e4m3fn, 4, -6, 448.0, has_inf=False),
        FloatFormat("float8_e5m2", torch.float8_e5m2, 3, -14, 57344.0),
    )
}

#: TensorFloat-32: the format NVIDIA tensor cores take float32 matmul inputs in.
#: Not a storage dtype, but a compute precision a target may claim.  Chopped: Triton hands
#: the float32 bits to the tensor core, which drops the low 13 (truncation, triton #4574),
#: where cuBLAS rounds to nearest; the bound must hold for both.
TF32 = FloatFormat("tfloat32", torch.float32, 11, -126, float(torch.finfo(torch.float32).max), chopped=True)

#: Aliases accepted wherever a dtype name is.
ALIASES = {
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "float": "float32",
    "fp64": "float64",
    "double": "float64",
    "e4m3": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
    "fp8_e5m2": "float8_e5m2",
}

#: The dtypes a kernel under test is typically asked to handle.
STANDARD_DTYPES = ("float16", "bfloat16", "float32", "float64")


def get_format(dtype: str | torch.dtype | FloatFormat) -> FloatFormat:
    """Look a format up by name, alias, torch dtype or format; ValueError says what exists."""
    if isinstance(dtype, FloatFormat):
        return dtype
    if isinstance(dtype, torch.dtype):
        for f in FORMATS.values():
            if f.torch_dtype == dtype:
                return f
        raise ValueError(f"unsupported torch dtype {dtype}; supported: {', '.join(FORMATS)}")
    key = ALIASES.get(str(dtype).lower(), str(dtype).lower())
    if key == TF32.name:
        return TF32
    if key not in FORMATS:
        raise ValueError(
            f"unknown dtype {dtype!r}; use one of {', '.join(FORMATS)} "
            f"(aliases: {', '.join(sorted(ALIASES))})"
        )
    return FORMATS[key]
