"""Registers the GPU peers: torch SDPA backends pinned one at a time, and FlexAttention.

Each wrapper adapts the suite's contract (top-left causal, boolean mask, GQA) to
the backend without changing what the backend computes: a causal triangle is
folded into the boolean mask when both are given (SDPA refuses the pair), and
backends without native GQA see K/V heads expanded with ``repeat_interleave``.
Declared capabilities follow what was measured on the H200 (``../shared/anchors.md``):
the flash backend rejects boolean masks, cuDNN rejected Nq = Nk = 1.  The flash and
efficient backends load 16 bytes at a time and need 16-byte aligned data pointers and
strides (``layout_alignment=16``).  Measured on the H200 with torch 2.11 (2026-11-29):
given a V whose data pointer is 2 bytes off, both fault with "misaligned address" and
the CUDA context is lost; efficient refuses a misaligned Q or K ("p.query_ptr is not
correctly aligned") and an odd row stride ("cutlassF: no kernel found to launch!").
Efficient also refuses a boolean mask whose last stride is not 1 ("No available kernel";
a transposed mask, found by the search on the H200), hence ``mask_unit_stride``.
cuDNN raises nothing for a misaligned V and returns a result other than an aligned copy's,
and it reads the gaps of a Q, K or V whose row stride is not a multiple of 8 elements
(NaN from the suite's poisoned gaps; every such stride tried, 2026-12-02): silent wrong
answers the search keeps visible, so cuDNN is searched with those layouts.  It refuses
head dims that are not multiples of 8 (hence ``head_dim_multiple=8``) and takes stride-0
batch and head broadcasts (bitwise equal to contiguous copies in 192 configurations,
2026-12-02).  A boolean mask of shape (B, 1, Nq, 1), which SDPA broadcasts over the keys,
makes it fault with "misaligned address" and lose the context (float16, 2026-12-04, every
variant of the found input tried), hence ``mask_key_broadcast=False``.  Q, K or V stored
dim-major (head-dim stride N) makes flash, efficient and cuDNN refuse ("No available kernel",
2026-12-01), hence ``unit_last_stride`` for cuDNN (the other
two are already kept to unit strides); FlexAttention and our Triton kernel took it.
Past a CUDA grid axis's 65535 blocks (the grid-heads probe, 2026-12-01, torch 2.11): flash
raises "CUDA error: invalid argument" for a batch or a head count of 65536 (pytorch #146704,
closed, still there), efficient for 65536 heads (pytorch #142228, open; a batch of 65536 it
takes), compiled FlexAttention for 65536 (batch, head) pairs in any split ("CUDA driver error:
invalid argument"); cuDNN, the math backend and our Triton kernel took all of them.  Hence
``max_batch`` / ``max_heads`` / ``max_pairs``.
tests/test_findings.py keeps these on record.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels.registry import Target, get_target, register
from verify.capabilities import Capabilities

LOW = ("float16", "bfloat16")


def _cuda_probe(device: str) -> str | None:
    if not torch.cuda.is_available():
        return "CUDA is not available on this machine"
    return None


def _causal_mask(nq: int, nk: int, device) -> torch.Tensor:
    return torch.ones(nq, nk, dtype=torch.bool, device=device).tril()


def sdpa_backend(q, k, v, *, scale: float, causal: bool = False, mask=None, backend: SDPBackend,
                 native_gqa: bool = True):
    """SDPA pinned to one backend, with the suite's mask/causal/GQA conventions."""
    group = q.shape[1] // k.shape[1]
    if group > 1 and not native_gqa:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    attn_mask, is_causal = mask, causal
    if causal and mask is not None:
        attn_mask = mask & _causal_mask(q.shape[2], k.shape[2], q.device)
        is_causal = False
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                              enable_gqa=group > 1 and native_gqa)


#: torch._dynamo's recompile limits, raised for FlexAttention (see _compiled_flex).
FLEX_RECOMPILE_LIMIT = 1 << 16


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    import torch._dynamo
    from torch.nn.attention.flex_attention import flex_attention

    # Every new shape compiles anew (dynamic=False).  Past dynamo's recompile limit (8 shapes)
    # flex_attention ran unfused and eager, with a warning, and the suite checked that instead
    # of the compiled kernel (seen on the H200, 2026-12-01, in a run of 27 shapes).
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), FLEX_RECOMPILE_LIMIT))
    return torch.compile(flex_attention, dynamic=False)


def flex(q, k, v, *, scale: float, causal: bool = False, mask=None, return_lse: bool = False):
    """FlexAttention (compiled) with a block mask built from causal and the boolean mask;
    ``return_lse``: (output, its log-sum-exp), the public ``return_lse`` of flex_attention
    (natural log, pytorch PR #133159)."""
    from torch.nn.attention.flex_attention import create_block_mask

    B, Hq, Nq, _ = q.shape
    Nk = k.shape[2]
    full = None
    if mask is not None:
        full = mask.expand(B, Hq, Nq, Nk)

    def mask_mod(b, h, i, j):
        keep = (j <= i) if causal else (j >= 0)
        if full is not None:
            keep = keep & full[b, h, i, j]
        return keep

    block_mask = None
    if causal or mask is not None:
        block_mask = create_block_mask(mask_mod, B, Hq, Nq, Nk, device=q.device)
    return _compiled_flex()(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1],
                            return_lse=return_lse)


CUDA = ("cuda",)
register(Target(
    "sdpa-flash", "attention", functools.partial(sdpa_backend, backend=SDPBackend.FLASH_ATTENTION),
    Capabilities(dtypes=LOW, devices=CUDA, bool_mask=False, causal_with_mask=False, causal_square_only=True,
                 head_dim_max=256, special_values=False, layout_alignment=16, max_batch=65535, max_heads=65535,
                 notes=("rejects boolean masks (measured on the H200)",
                        "a batch or a head count past 65535: 'CUDA error: invalid argument' (torch 2.11, measured "
                        "on the H200, 2026-12-01)",
                        "rejects causal with Nq != Nk: 'No available kernel' (torch 2.11, measured on the H200)",
                        "a misaligned data pointer faults and loses the CUDA context (measured on the H200)")),
    "torch SDPA pinned to FLASH_ATTENTION", _cuda_probe, kind="torch",
))
register(Target(
    "sdpa-efficient", "attention",
    functools.partial(sdpa_backend, backend=SDPBackend.EFFICIENT_ATTENTION, native_gqa=False),
    Capabilities(dtypes=("float16", "bfloat16", "float32"), devices=CUDA, special_values=False,
                 layout_alignment=16, mask_unit_stride=True, mask_key_broadcast=False, max_heads=65535,
                 head_dim_multiple=4,
                 notes=("GQA by expanding K/V heads",
                        "refuses a head dim that is not a multiple of 4: 'No available kernel' (float32, B = 1 and 2, "
                        "D = 1..32, 127, 129, 255, 257; torch 2.11, measured on an H100, 2026-12-07; torch warns "
                        "'Mem efficient attention requires last dimension of inputs to be divisible by 4')",
                        "more than 65535 heads: 'CUDA error: invalid argument' (torch 2.11, measured on the H200, "
                        "2026-12-01)",
                        "refuses a mask broadcast over the keys: '(*bias): last dimension must be contiguous' "
                        "(measured on the H200, 2026-12-01)",
                        "refuses a misaligned Q or K, faults on a misaligned V (measured on the H200)",
                        "refuses a mask whose last stride is not 1: 'No available kernel' (measured on the H200)")),
    "torch SDPA pinned to EFFICIENT_ATTENTION (memory-efficient)", _cuda_probe, kind="torch",
))
register(Target(
    "sdpa-cudnn", "attention",
    functools.partial(sdpa_backend, backend=SDPBackend.CUDNN_ATTENTION, native_gqa=False),
    Capabilities(dtypes=LOW, devices=CUDA, min_length=2, head_dim_max=128, head_dim_multiple=8,
                 special_values=False, unit_last_stride=True, mask_key_broadcast=False, empty_inputs=False,
                 notes=("rejected Nq = Nk = 1 (measured on the H200)", "GQA by expanding K/V heads",
                        "returns None, not an empty output, for an empty batch (B = 0; torch 2.11, measured on an "
                        "H100, 2026-12-06)",
                        "faults ('misaligned address', the CUDA context lost) on a boolean mask of shape "
                        "(B, 1, Nq, 1) broadcast over the keys (float16, measured on the H200, 2026-12-04); the "
                        "(Nq, 1) and (B, Hq, Nq, 1) shapes are left out with it, unmeasured",
                        "refuses every head dim that is not a multiple of 8: 'No available kernel' (D = 1..128, "
                        "measured on the H200, 2026-12-02)",
                        "refuses a head-dim stride other than 1: 'No available kernel' (measured on the H200)")),
    "torch SDPA pinned to CUDNN_ATTENTION", _cuda_probe, kind="torch",
))
register(Target(
    "flex-attention", "attention", functools.partial(flex, return_lse=True),
    Capabilities(dtypes=("float16", "bfloat16", "float32"), devices=CUDA, head_dim_min=16, head_dim_max=256,
                 special_values=False, max_pairs=65535, returns_lse=True, empty_inputs=False,
                 notes=("torch.compile'd flex_attention; recompiles per shape",
                        "return_lse=True gives no LSE (None) for an empty batch (B = 0; torch 2.11, measured on an "
                        "H100, 2026-12-06)",
                        "more than 65535 (batch, head) pairs: 'CUDA driver error: invalid argument' (torch 2.11, "
                        "measured on the H200, 2026-12-01)",
                        "takes dim-major Q, K and V (measured on the H200, 2026-12-01)")),
    "torch FlexAttention, compiled, causal and masks as block masks; its LSE (return_lse) checked too", _cuda_probe,
    kind="torch",
))


# ---- the SDPA backends' own log-sum-exp ------------------------------------------------
# SDPA's public call returns the output alone, but each fused backend computes the LSE its
# backward pass consumes, and context-parallel (ring) attention merges partial outputs with
# it.  The private ops below are what SDPA calls once it has picked a backend; they return
# the LSE beside the output, so the suite can hold it to the oracle as it does ours.


def _bias_from_mask(mask: torch.Tensor, causal: bool, q: torch.Tensor, nk: int) -> torch.Tensor:
    """The boolean mask (with the causal triangle folded in) as the additive bias the private
    ops take: 0 where visible, -inf elsewhere, in Q's dtype, its broadcast shape kept and its
    rows padded to 16 elements as SDPA pads them (the efficient kernel reads the bias 16
    elements at a time), then expanded to (B, Hq, Nq, Nk)."""
    if causal:
        mask = mask & _causal_mask(q.shape[2], nk, q.device)
    shape = (1,) * (4 - mask.dim()) + tuple(mask.shape)
    padded = torch.zeros(*shape[:-1], -(-shape[-1] // 16) * 16, dtype=q.dtype, device=q.device)[..., :shape[-1]]
    bias = padded.masked_fill_(~mask.reshape(shape), -torch.inf)
    return bias.expand(q.shape[0], q.shape[1], q.shape[2], nk)


def _pad_head_dim(t: torch.Tensor, multiple: int) -> torch.Tensor:
    """``t`` with zero columns appended up to a multiple of ``multiple`` (zeros change no score
    and no output column that is kept): SDPA's flash path pads the same way."""
    extra = -t.shape[-1] % multiple
    return t if extra == 0 else F.pad(t, (0, extra))


def sdpa_op_with_lse(q, k, v, *, scale: float, causal: bool = False, mask=None, backend: str):
    """(output, LSE) from SDPA's private per-backend op (``backend``: flash, efficient or cudnn),
    with the suite's mask / causal / GQA conventions: K and V heads expanded for GQA; flash
    takes no mask; flash and efficient get the head dim padded to a multiple of 8 (with the
    scale given, zero columns change nothing); efficient and cuDNN take the mask as an
    additive bias.  The LSE comes back as (B, Hq, Nq) float32 (efficient pads Nq to a
    multiple of 32, cuDNN may add a trailing dim of 1: both cut away)."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    nq, nk, d = q.shape[2], k.shape[2], q.shape[3]
    if backend not in ("flash", "efficient", "cudnn"):
        raise ValueError(f"backend must be flash, efficient or cudnn, not {backend!r}")
    if backend == "flash" and mask is not None:
        raise ValueError("the flash backend takes no mask")
    if backend != "cudnn":
        # The efficient op also refuses rows that are not 16-byte aligned ("query is not correctly
        # aligned (strideM)" for D = 13, H200, 2026-12-03), which public SDPA takes.
        q, k, v = (_pad_head_dim(t, 8) for t in (q, k, v))
    bias = None if mask is None else _bias_from_mask(mask, causal, q, nk)
    is_causal = causal and mask is None
    ops = torch.ops.aten
    if backend == "flash":
        out, lse = ops._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)[:2]
    elif backend == "efficient":
        out, lse = ops._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, is_causal, scale=scale)[:2]
    else:
        out, lse = ops._scaled_dot_product_cudnn_attention(q, k, v, bias, True, 0.0, is_causal, False,
                                                           scale=scale)[:2]
    out = out[..., :d]
    if lse.dim() == 4 and lse.shape[-1] == 1:
        lse = lse[..., 0]
    return out, lse[..., :nq]


for _public, _backend in (("sdpa-flash", "flash"), ("sdpa-efficient", "efficient"), ("sdpa-cudnn", "cudnn")):
    _caps = get_target(_public).caps
    if _backend in ("flash", "efficient"):  # sdpa_op_with_lse pads their head dim to a multiple of 8
        _caps = _caps.with_(head_dim_multiple=1)
    register(Target(
        f"{_public}-lse", "attention", functools.partial(sdpa_op_with_lse, backend=_backend),
        _caps.with_(returns_lse=True, notes=(f"SDPA's private {_backend} op, which returns the LSE",) + _caps.notes),
        f"torch SDPA's {_backend} backend through its private op, output and LSE", _cuda_probe, kind="torch",
    ))
