"""What a target declares it supports, and what precision it claims to compute in.

The suite only generates inputs inside a target's declared capabilities, so a
feature a target does not support is reported as *unsupported*, never as passed.
The precision claims parameterize the tolerance policy (``verify.tolerance``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from verify.dtypes import STANDARD_DTYPES, get_format


@dataclass(frozen=True)
class Capabilities:
    """Declared support of one target.  Defaults describe a fully general target."""

    dtypes: tuple[str, ...] = STANDARD_DTYPES
    devices: tuple[str, ...] = ("cpu", "cuda")
    # ---- softmax and attention: sizes -------------------------------------------------
    min_length: int = 1  # softmax row length / attention Nq and Nk lower limit
    max_length: int | None = None  # None: no limit beyond the profile's
    # ---- special values ---------------------------------------------------------------
    neg_inf: bool = True  # accepts -inf logits (masking by -inf)
    special_values: bool = True  # accepts NaN / +inf inputs and must propagate them
    noncontiguous: bool = True
    # Takes inputs stored once and expanded with a zero stride: softmax over the batch
    # (layout lead-broadcast), attention's Q, K, V over the batch or the heads.  Only with
    # ``noncontiguous``.
    zero_strides: bool = True
    # Softmax: takes a 1-D input, one row of shape (length,) (``x.stride(-2)`` does not exist).
    vector_input: bool = True
    # Takes inputs that hold no rows, and returns empty outputs (and LSE) of the right shapes:
    # attention with batch B = 0, softmax of shape (0, N), (B, 0, N) or (B, H, 0, N).  A batch
    # gathered at run time can be empty; a launch that divides by the rows, sizes a grid of 0
    # programs or reads x[0] fails there (the empty-batch and no-rows probes).
    empty_inputs: bool = True
    # Bytes the data pointer and every stride but the last (which must be 1) must be multiples
    # of, for a non-contiguous or offset layout to be generated; 1: any layout.  Contiguous
    # inputs are always generated (a kernel must accept those, whatever its vector width).
    layout_alignment: int = 1
    # Returns ``(output, lse)``: ``lse`` the natural-log log-sum-exp of each row's (scaled,
    # masked) scores, shape ``output.shape[:-1]``, float32 or wider, on the output's device;
    # -inf for a row with nothing visible.  The contract then checks it too (``verify.contracts``).
    returns_lse: bool = False
    # The LSE of a row with nothing visible: "-inf", the log of an empty sum, or "+inf", the
    # flash-attention convention (its backward then computes exp(s - lse) = 0 for the row).
    empty_row_lse: str = "-inf"
    # What a row with nothing visible (all -inf, or every key masked) gives: "zero", "nan", or
    # "either" (consistently within the row).  A target that documents one is held to it where
    # the check's own masked_rows is "either" (``--masked-rows`` overrides it).
    masked_rows: str = "either"
    # ---- attention only ---------------------------------------------------------------
    causal: bool = True
    bool_mask: bool = True
    causal_with_mask: bool = True  # causal=True together with a boolean mask
    causal_square_only: bool = False  # causal=True only with Nq == Nk
    mask_unit_stride: bool = False  # the boolean mask's last dimension must have stride 1
    mask_key_broadcast: bool = True  # takes masks broadcast over the keys ((Nq, 1), (B, 1, Nq, 1), ...)
    # Q, K and V's head dim must have stride 1 (no dim-major layout; implied by layout_alignment > 1).
    unit_last_stride: bool = False
    gqa: bool = True  # Hq a multiple of Hkv, Hq != Hkv
    # The most batch entries, query heads and (batch, query head) pairs taken (None: any); only
    # the grid-heads probe goes past 65535, a CUDA grid axis's limit.
    max_batch: int | None = None
    max_heads: int | None = None
    max_pairs: int | None = None
    head_dim_min: int = 1
    head_dim_max: int = 512
    head_dim_multiple: int = 1
    # ---- precision claims (parameterize the tolerance policy) -------------------------
    compute_precision: str | None = None  # None: float32 for <=32-bit inputs, float64 for float64
    dot_precision: str | None = None  # precision of Q K^T and P V products; None: compute_precision
    probs_rounded_to_input: bool = True  # P rounded to the input dtype before P V (FlashAttention does)
    # Attention: results below the compute format's smallest normal (products p_j v_jd, the
    # accumulator's rescales, subnormal V entries read) may be flushed to zero (an FTZ/DAZ
    # build, MI200's MFMA), not rounded to its subnormals; implied by a TF32 dot, whose tensor
    # cores read subnormal V as 0.  Float16's subnormals are normal in float32: flushing them
    # stays a violation.  Off: IEEE gradual underflow (verify.tolerance.underflow_bound).
    flushes_subnormals: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for name in self.dtypes:
            get_format(name)
        if self.min_length < 1:
            raise ValueError("min_length must be >= 1")
        if self.max_length is not None and self.max_length < self.min_length:
            raise ValueError("max_length must be >= min_length")
        if self.layout_alignment < 1 or self.layout_alignment & (self.layout_alignment - 1):
            raise ValueError("layout_alignment must be a power of two (bytes)")
        if not 1 <= self.head_dim_min <= self.head_dim_max:
            raise ValueError("need 1 <= head_dim_min <= head_dim_max")
        if self.empty_row_lse not in ("-inf", "+inf"):
            raise ValueError(f"empty_row_lse must be '-inf' or '+inf', not {self.empty_row_lse!r}")
        if self.masked_rows not in ("zero", "nan", "either"):
            raise ValueError(f"masked_rows must be 'zero', 'nan' or 'either', not {self.masked_rows!r}")
        for name in ("max_batch", "max_heads", "max_pairs"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be None or >= 1")

    def supports_dtype(self, dtype: str) -> bool:
        return get_format(dtype).name in {get_format(d).name for d in self.dtypes}

    def supports_device(self, device: str) -> bool:
        return device.split(":")[0] in self.devices

    def compute_format(self, dtype: str) -> str:
        """The precision intermediate results are claimed to be held in."""
        if self.compute_precision is not None:
            return self.compute_precision
        return "float64" if get_format(dtype).name == "float64" else "float32"

    def dot_format(self, dtype: str) -> str:
        return self.dot_precision or self.compute_format(dtype)

    def with_(self, **changes: Any) -> "Capabilities":
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
