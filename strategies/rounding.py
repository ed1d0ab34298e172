"""Rounding float64 numbers to a storage format, identically on every machine.

Narrow formats are reached through float32: numpy rounds float64 to float32
(IEEE round to nearest even), then torch rounds float32 to the target (again
to nearest even; float32 -> float16 / bfloat16 / float8 is a single correctly
rounded step in every implementation, vectorized or not).  Going through
float32 explicitly avoids depending on how a given torch build converts float64
straight to a narrow type (one rounding or two), which could differ between
builds in rare halfway cases.

Callers clip to the format's finite range first; NaN, +-inf and -0.0 pass through.
"""

from __future__ import annotations

import numpy as np
import torch

from verify.dtypes import FloatFormat


def to_format(x: np.ndarray, fmt: FloatFormat) -> torch.Tensor:
    """``x`` (float64) rounded to ``fmt``, as a CPU tensor of ``fmt.torch_dtype``."""
    if fmt.torch_dtype == torch.float64:
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))
    single = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return single.to(fmt.torch_dtype)
