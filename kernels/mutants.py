"""Deliberately broken kernels: each reproduces a bug class reported in a public tracker.

A verification suite is only as good as the bugs it catches.  Every mutant
here is one correct algorithm (``_streaming_softmax`` or ``_streaming_attention``
below, written the way real kernels are: key blocks, running statistics,
padding of ragged tails) with exactly one switch flipped.  ``python -m verify
mutants`` and ``tests/test_mutants.py`` assert the suite kills all of them,
while the same code with no switch flipped (the controls) passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from kernels.registry import Target, register
from verify.capabilities import Capabilities

BLOCK = 16  # key block: small, so ragged tails and multi-block rows appear at CPU sizes


@dataclass(frozen=True)
class Bug:
    """Switches of the two streaming algorithms; the defaults are the correct algorithm."""

    rescale_l: bool = True  # multiply l by exp(m_old - m_new) when the max grows
    rescale_acc: bool = True
    rescale_from: float = 0.0  # attention: l and acc rescaled only where the max grows by this much or more
    guard_inf: bool = True  # use shift 0 while the running max is still -inf
    pad_value: float = -math.inf  # value of padding lanes past a ragged tail
    sentinel: float | None = None  # replace -inf masking by this finite value
    stats_dtype: torch.dtype | None = None  # dtype l (and acc) are stored in between blocks
    truncate_bf16: bool = False  # float32 -> bfloat16 by dropping bits instead of rounding
    shift_by_max: bool = True  # subtract the running max before exp
    propagate_nan: bool = True  # rows holding NaN / +inf come out NaN
    assume_contiguous: bool = False  # read the input's storage as if it were contiguous
    causal_offset: int = 0  # visible iff j <= i + offset (bottom-right alignment uses Nk - Nq)
    causal_bottom_right: bool = False
    gqa_modulo: bool = False  # kv head = h % Hkv instead of h // (Hq / Hkv)
    mask_group_head: bool = False  # GQA: every query head reads its group's first head's mask (one load a packed tile)
    scale_twice: bool = False
    mask_by_multiply: bool = False  # apply the mask by zeroing probabilities (0 * NaN leaks)
    probs_dtype_narrow: bool = True  # P rounded to the input dtype before P V (FlashAttention)
    drop_tail_block: bool = False  # forget the last partial key block
    flush_subnormal_v: bool = False  # attention: V entries below the input format's smallest normal read as 0 (DAZ)
    fused_scale_shift: bool = False  # exp(fma(s, scale, -m)) with m = round(max(s) * scale)
    index_bits: int | None = None  # softmax column / attention key offsets held in a signed integer this wide
    store_dead_rows: bool = True  # write rows with nothing visible (False: left as torch.empty gave them)
    sum_toward_zero: bool = False  # softmax: every addition (and rescale) of l rounded toward zero
    cheap_exp_from: int | None = None  # softmax: rows of at least this many entries take a ~100-ulp exp
    # ---- the log-sum-exp, for the forms that return one --------------------------------------
    lse_base_two: bool = False  # LSE in log2 units (the kernel's exp2 domain) instead of ln
    lse_adds_max: bool = True  # LSE = m + log l (False: log l alone, the max never added back)
    lse_dead_rows: float | None = None  # LSE of rows with nothing visible (None: -inf, the log of 0)
    lse_scaled_max: bool = True  # attention: the max in scaled units (False: raw scores, scale folded into exp)
    lse_in_input_dtype: bool = False  # attention: the LSE stored in Q's dtype instead of float32


def _wrapped(n: int, bits: int | None, device) -> Tensor | None:
    """Offsets 0..n-1 as a signed ``bits``-bit integer holds them (None: no wrap within n).

    Past 2**(bits-1) - 1 they turn negative; indexing with them reads from the end of the
    row, as an address computed from a wrapped offset reads memory before the row."""
    if bits is None or n <= 2 ** (bits - 1):
        return None
    j = torch.arange(n, device=device)
    return (j + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)


def _truncate_to_bf16(x: Tensor) -> Tensor:
    bits = x.to(torch.float32).view(torch.int32) & ~0xFFFF
    return bits.view(torch.float32).to(torch.bfloat16)


def _to_output(x: Tensor, dtype: torch.dtype, bug: Bug) -> Tensor:
    if bug.truncate_bf16 and dtype == torch.bfloat16:
        return _truncate_to_bf16(x)
    return x.to(dtype)


def _live_rows_only(result: Tensor, dead: Tensor, bug: Bug) -> Tensor:
    """``result``, or (``store_dead_rows`` off) a fresh ``torch.empty`` holding only its rows
    that are not ``dead``: the rest keep whatever the allocator's memory held."""
    if bug.store_dead_rows:
        return result
    out = torch.empty_like(result)
    out[~dead] = result[~dead]
    return out


def _lse(m: Tensor, l: Tensor, bug: Bug, raw_max_per_unit: float = 1.0) -> Tensor:
    """log sum exp from the running statistics (m the row max, l the sum of exp(x - m)) in float32,
    with the LSE switches of ``bug``; ``raw_max_per_unit`` turns m into raw score units."""
    m_used = m if bug.lse_scaled_max else m * raw_max_per_unit
    lse = (m_used if bug.lse_adds_max else torch.zeros_like(m)) + torch.log(l)
    lse = torch.where(l == 0, torch.full_like(lse, -math.inf), lse)
    if bug.lse_dead_rows is not None:
        lse = torch.where(l == 0, torch.full_like(lse, bug.lse_dead_rows), lse)
    return lse / math.log(2) if bug.lse_base_two else lse


def _toward_zero(exact: np.ndarray) -> np.ndarray:
    """float64 ``exact`` rounded to float32 toward zero."""
    r = exact.astype(np.float32)
    return np.where(np.abs(r.astype(np.float64)) > np.abs(exact), np.nextafter(r, np.float32(0)), r)


def _block_sum(l: Tensor, alpha: Tensor, p: Tensor, bug: Bug) -> Tensor:
    """l * alpha + sum of the block's p (last dim), in l's dtype; ``sum_toward_zero``: each of
    those operations rounded toward zero, one entry after another (float32 only; in numpy,
    whose per-call cost is a fraction of torch's on these small arrays)."""
    if not bug.sum_toward_zero or l.dtype != torch.float32:
        return l * alpha + p.sum(-1)
    p64 = p.detach().cpu().double().numpy()
    s = _toward_zero(l.detach().cpu().double().numpy() * alpha.detach().cpu().double().numpy())  # exact product
    for j in range(p64.shape[-1]):
        s = _toward_zero(s.astype(np.float64) + p64[..., j])
    return torch.from_numpy(s).to(l.device)


def _exp_for(bug: Bug, n: int) -> Callable[[Tensor], Tensor]:
    """torch.exp, or (``cheap_exp_from`` <= n) one off by up to ~100 float32 ulps, depending on
    the argument: a faster, coarser exponential a kernel switches to on long rows."""
    if bug.cheap_exp_from is None or n < bug.cheap_exp_from:
        return torch.exp
    def cheap(t: Tensor) -> Tensor:
        wobble = torch.sin(torch.where(torch.isfinite(t), t, torch.zeros_like(t)) * 12345.678)
        return torch.exp(t) * (1 + 100 * 2.0 ** -24 * wobble)
    return cheap


def _store(x: Tensor, bug: Bug) -> Tensor:
    """Round a running statistic to the dtype it is (wrongly) stored in between blocks."""
    return x if bug.stats_dtype is None else x.to(bug.stats_dtype).to(x.dtype)


def _streaming_softmax(x: Tensor, bug: Bug, block: int = BLOCK, return_lse: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Online softmax over blocks (running m, l), then a normalize pass; float32 statistics.
    ``return_lse``: also the log-sum-exp of each row (float32; NaN for a row holding NaN or +inf)."""
    n = x.shape[-1]
    xs = x
    if bug.assume_contiguous and not x.is_contiguous():
        xs = torch.as_strided(x, x.shape, torch.empty(x.shape, device="meta").stride(), x.storage_offset())
    work = xs.to(torch.float32 if x.dtype != torch.float64 else torch.float64)
    cols = _wrapped(n, bug.index_bits, x.device)
    if cols is not None:
        work = work[..., cols]
    bad_row = torch.isnan(work).any(-1, keepdim=True) | (work == math.inf).any(-1, keepdim=True)
    if bug.sentinel is not None:
        work = work.masked_fill(work == -math.inf, bug.sentinel)
    pad = (-n) % block
    padded = torch.nn.functional.pad(work, (0, pad), value=bug.pad_value)
    m = torch.full(work.shape[:-1], -math.inf, dtype=work.dtype, device=x.device)
    l = torch.zeros_like(m)
    exp = _exp_for(bug, n)
    for start in range(0, n + pad, block):
        blk = padded[..., start:start + block]
        m_new = torch.maximum(m, blk.amax(-1))
        shift = m_new
        if bug.guard_inf:
            shift = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
        if not bug.shift_by_max:
            shift = torch.zeros_like(m_new)
        alpha = torch.exp(m - shift) if bug.rescale_l else torch.ones_like(m)
        l = _store(_block_sum(l, alpha, exp(blk - shift[..., None]), bug), bug)
        m = m_new
    shift = torch.where(m == -math.inf, torch.zeros_like(m), m) if bug.guard_inf else m
    if not bug.shift_by_max:
        shift = torch.zeros_like(m)
    p = exp(work - shift[..., None]) / l[..., None]
    if bug.guard_inf:
        p = torch.where((l == 0)[..., None], torch.zeros_like(p), p)
    if bug.propagate_nan:
        p = torch.where(bad_row, torch.full_like(p, math.nan), p)
    else:
        p = torch.nan_to_num(p, nan=0.0)
    out = _live_rows_only(_to_output(p, x.dtype, bug), l == 0, bug)
    if not return_lse:
        return out
    lse = torch.where(bad_row[..., 0], torch.full_like(m, math.nan), _lse(m, l, bug))
    return out, lse.to(torch.float32)


def _visible(nq: int, nk: int, causal: bool, mask: Tensor | None, bug: Bug, device) -> Tensor | None:
    vis = None
    if causal:
        offset = bug.causal_offset + (nk - nq if bug.causal_bottom_right else 0)
        i = torch.arange(nq, device=device)[:, None]
        j = torch.arange(nk, device=device)[None, :]
        vis = j <= i + offset
    if mask is not None:
        vis = mask if vis is None else (vis & mask)
    return vis


def _streaming_attention(q: Tensor, k: Tensor, v: Tensor, *, scale: float, causal: bool = False,
                         mask: Tensor | None = None, bug: Bug = Bug(), block: int = BLOCK,
                         return_lse: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """FlashAttention forward in torch: key blocks, running m / l / acc in float32.
    ``return_lse``: also the log-sum-exp of each query row's scaled scores, (B, Hq, Nq) float32."""
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    group = Hq // Hkv
    heads = torch.arange(Hq, device=q.device)
    heads = heads % Hkv if bug.gqa_modulo else heads // group
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    kw, vw = k.to(work), v.to(work)
    if bug.flush_subnormal_v:
        vw = torch.where(vw.abs() < torch.finfo(v.dtype).tiny, torch.zeros_like(vw), vw)
    keys = _wrapped(Nk, bug.index_bits, q.device)
    if keys is not None:
        # A wrapped key offset addresses memory before the head's rows: the previous
        # (batch, head)'s rows, or for the first one the end of the buffer.
        slabs = B * Hkv
        rows = (torch.arange(slabs, device=q.device)[:, None] * Nk + keys) % (slabs * Nk)
        kw, vw = (t.reshape(slabs * Nk, t.shape[-1])[rows].reshape(t.shape) for t in (kw, vw))
    qc, kc, vc = q.to(work), kw[:, heads], vw[:, heads]
    s_scale = scale * scale if bug.scale_twice else scale
    vis = _visible(Nq, Nk, causal, mask, bug, q.device)
    if vis is not None:
        vis = vis.expand(B, Hq, Nq, Nk)
        if bug.mask_group_head:
            # A packed-GQA tile holds a group's query heads and loads the mask once, at its
            # first head: right for masks shared by the heads, wrong for per-head ones.
            vis = vis[:, torch.arange(Hq, device=q.device) // group * group]
    m = torch.full((B, Hq, Nq), -math.inf, dtype=work, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros((B, Hq, Nq, v.shape[-1]), dtype=work, device=q.device)
    narrow = q.dtype in (torch.float16, torch.bfloat16) and bug.probs_dtype_narrow
    fma_scale = float(torch.tensor(abs(s_scale), dtype=work))  # the scale as the kernel holds it
    stop_at = Nk - (Nk % block) if bug.drop_tail_block and Nk % block and Nk > block else Nk
    for start in range(0, stop_at, block):
        end = min(start + block, stop_at)
        s = qc @ kc[:, :, start:end].transpose(-1, -2)
        if bug.fused_scale_shift:
            # The row max is taken on the raw scores (exact: rounding is monotone) and the
            # scale is applied inside exp's argument, with the shift, in one fused multiply-add.
            # The max element's argument is then the rounding error of max(s) * scale, up to
            # half an ulp of a huge number, not 0: exp overflows and the row turns NaN.
            s = -s if s_scale < 0 else s
        else:
            s = s * s_scale
        blk_vis = None if vis is None else vis[..., start:end]
        if blk_vis is not None and not bug.mask_by_multiply:
            fill = -math.inf if bug.sentinel is None else bug.sentinel
            s = s.masked_fill(~blk_vis, fill)
        m_new = torch.maximum(m, s.amax(-1) * abs(s_scale) if bug.fused_scale_shift else s.amax(-1))
        shift = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new) if bug.guard_inf else m_new
        alpha = torch.exp(m - shift)
        if bug.rescale_from:
            # "the max barely moved": no rescale, though the shift below is the new max
            alpha = torch.where(m_new - m < bug.rescale_from, torch.ones_like(alpha), alpha)
        if bug.fused_scale_shift:  # an FMA emulated in float64: the product of two floats is exact there
            p = torch.exp((s.double() * fma_scale - shift.double()[..., None]).to(work))
        else:
            p = torch.exp(s - shift[..., None])
        if blk_vis is not None and bug.mask_by_multiply:
            p = p * blk_vis
        l = _store(l * (alpha if bug.rescale_l else 1.0) + p.sum(-1), bug)
        pv = (p.to(q.dtype).to(work) if narrow else p) @ vc[:, :, start:end]
        acc = _store(acc * (alpha[..., None] if bug.rescale_acc else 1.0) + pv, bug)
        m = m_new
    out = acc / l[..., None]
    if bug.guard_inf:
        out = torch.where((l == 0)[..., None], torch.zeros_like(out), out)
    out = _live_rows_only(_to_output(out, q.dtype, bug), l == 0, bug)
    if not return_lse:
        return out
    lse = _lse(m, l, bug, 1.0 / s_scale if s_scale else 1.0)
    return out, lse.to(q.dtype if bug.lse_in_input_dtype else torch.float32)


@dataclass(frozen=True)
class Mutant:
    name: str
    op: str
    description: str
    bug_class: str
    reference: str
    fn: Callable
    caps: Capabilities = field(default_factory=Capabilities)
    form: str = "torch"


def _softmax(bug: Bug, lse: bool = False) -> Callable[[Tensor], Tensor]:
    return lambda x: _streaming_softmax(x, bug, return_lse=lse)


def _attention(bug: Bug, lse: bool = False) -> Callable[..., Tensor]:
    return lambda q, k, v, *, scale, causal=False, mask=None: _streaming_attention(
        q, k, v, scale=scale, causal=causal, mask=mask, bug=bug, return_lse=lse)


class FirstCallBuffers:
    """``fn`` run on the first call's tensors for the arguments named in ``stale`` whenever a
    later call has the same shapes, dtypes and device: a program cache that records buffer
    addresses when it builds a program and does not patch them on a hit (tt-metal PR #45137).
    The first call's tensors are kept alive, as their memory would still be mapped."""

    def __init__(self, fn: Callable[..., Tensor], stale: tuple[int, ...]) -> None:
        self.fn, self.stale, self.seen = fn, stale, {}

    def __call__(self, *args: Tensor, **kwargs) -> Tensor:
        key = tuple((tuple(a.shape), a.dtype, str(a.device)) for a in args)
        first = self.seen.setdefault(key, args)
        return self.fn(*(first[i] if i in self.stale else a for i, a in enumerate(args)), **kwargs)


CPU = ("cpu", "cuda")
LOW = ("float16", "bfloat16")
STD = ("float16", "bfloat16", "float32")

MUTANTS: list[Mutant] = [
    Mutant("softmax-no-rescale-l", "softmax", "running sum l not rescaled when the running max grows",
           "online-softmax rescale", "https://arxiv.org/abs/1805.02867",
           _softmax(Bug(rescale_l=False)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("softmax-inf-minus-inf", "softmax", "exp(-inf - (-inf)) = NaN after a fully masked leading block",
           "NaN from -inf rescale", "https://github.com/flashinfer-ai/flashinfer/pull/4401",
           _softmax(Bug(guard_inf=False)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("softmax-tail-pad-zero", "softmax", "ragged tail padded with 0 instead of -inf",
           "ragged tail", "https://github.com/jax-ml/jax/issues/27224",
           _softmax(Bug(pad_value=0.0)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("softmax-finite-sentinel", "softmax", "-inf logits replaced by a finite sentinel -5e4",
           "finite mask sentinel", "https://github.com/flashinfer-ai/flashinfer/issues/4267",
           _softmax(Bug(sentinel=-5e4)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("softmax-sum-low-precision", "softmax", "row sum l kept in the input dtype (fp16/bf16) between blocks",
           "low-precision accumulation", "https://github.com/flashinfer-ai/flashinfer/pull/5166",
           lambda x: _streaming_softmax(x, Bug(stats_dtype=x.dtype)), Capabilities(dtypes=LOW, devices=CPU)),
    Mutant("softmax-sum-toward-zero", "softmax",
           "row sum l accumulated with every addition rounded toward zero (a truncating adder): ~n u / 3 low, "
           "inside the worst case n u", "rounding mode", "https://peerj.com/articles/cs-330/",
           _softmax(Bug(sum_toward_zero=True)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("softmax-cheap-exp-long-rows", "softmax",
           "rows of 512 entries or more take an exp ~100 ulps off: hidden by the long row's summation bound",
           "approximate math", "https://docs.nvidia.com/cuda/cuda-c-programming-guide/#intrinsic-functions",
           _softmax(Bug(cheap_exp_from=512)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("softmax-bf16-truncation", "softmax", "float32 -> bfloat16 output by truncation, not round-to-nearest-even",
           "rounding mode", "https://github.com/triton-lang/triton/issues/11584",
           _softmax(Bug(truncate_bf16=True)), Capabilities(dtypes=("bfloat16",), devices=CPU)),
    Mutant("softmax-no-max-shift", "softmax", "exp(x) without subtracting the row max: overflow for large logits",
           "overflow", "https://github.com/pytorch/pytorch/issues/119131",
           _softmax(Bug(shift_by_max=False)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("softmax-nan-swallowed", "softmax", "NaN rows turned into zeros instead of propagating",
           "NaN propagation", "https://github.com/pytorch/pytorch/issues/101967",
           _softmax(Bug(propagate_nan=False)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("softmax-int16-index", "softmax", "column offsets kept in int16: past 32767 they wrap and read before the row",
           "16-bit index overflow", "https://github.com/facebookresearch/xformers/issues/719",
           _softmax(Bug(index_bits=16)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("softmax-masked-rows-unwritten", "softmax",
           "fully masked rows skipped: left as torch.empty gave them (fresh memory reads 0, the right answer)",
           "unwritten output", "https://github.com/microsoft/onnxruntime/pull/28958",
           _softmax(Bug(store_dead_rows=False)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("softmax-stale-input-buffer", "softmax",
           "a cache keyed by shape keeps the first call's input buffer and reads it at every later call",
           "stale buffer address", "https://github.com/tenstorrent/tt-metal/pull/45137",
           FirstCallBuffers(_softmax(Bug()), stale=(0,)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("softmax-ignores-strides", "softmax", "non-contiguous input read as if contiguous",
           "strides", "https://github.com/pytorch/pytorch/issues/146377",
           _softmax(Bug(assume_contiguous=True)), Capabilities(dtypes=STD, devices=("cpu",))),
    Mutant("attention-no-rescale-acc", "attention", "accumulator not rescaled when the running max grows",
           "online-softmax rescale", "https://arxiv.org/abs/2205.14135",
           _attention(Bug(rescale_acc=False)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-rescale-skipped-for-small-steps", "attention",
           "l and acc not rescaled where a block raises the running max by less than 2**-8 (the max still moves)",
           "online-softmax rescale", "https://arxiv.org/abs/2205.14135",
           _attention(Bug(rescale_from=2.0**-8)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-inf-minus-inf", "attention", "no guard for exp(-inf - (-inf)) in the rescale of a fully masked block",
           "NaN from -inf rescale", "https://github.com/flashinfer-ai/flashinfer/issues/4451",
           _attention(Bug(guard_inf=False)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-finite-sentinel", "attention", "masking with a finite -1e4 instead of -inf",
           "finite mask sentinel", "https://github.com/flashinfer-ai/flashinfer/issues/4267",
           _attention(Bug(sentinel=-1e4)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-causal-bottom-right", "attention", "causal mask aligned bottom-right when Nq != Nk",
           "causal alignment", "https://github.com/Dao-AILab/flash-attention/issues/1778",
           _attention(Bug(causal_bottom_right=True)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-causal-off-by-one", "attention", "causal mask j < i instead of j <= i",
           "causal off by one", "https://github.com/Dao-AILab/flash-attention/issues/517",
           _attention(Bug(causal_offset=-1)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-gqa-modulo", "attention", "GQA maps query head h to kv head h % Hkv",
           "GQA head mapping", "https://github.com/pytorch/pytorch/pull/133495",
           _attention(Bug(gqa_modulo=True)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-gqa-mask-group-head", "attention",
           "GQA: each query head reads the mask of its group's first head (the mask loaded once a packed tile)",
           "GQA mask indexed by the K/V head", "https://github.com/HKUSTDial/flash-sparse-attention/issues/107",
           _attention(Bug(mask_group_head=True)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-scale-twice", "attention", "softmax scale applied twice",
           "scale", "https://github.com/NVIDIA/Megatron-LM/pull/848",
           _attention(Bug(scale_twice=True)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-acc-low-precision", "attention", "accumulator kept in the input dtype (bf16/fp16) between key blocks",
           "low-precision accumulation", "https://github.com/flashinfer-ai/flashinfer/issues/5107",
           lambda q, k, v, *, scale, causal=False, mask=None: _streaming_attention(
               q, k, v, scale=scale, causal=causal, mask=mask, bug=Bug(stats_dtype=q.dtype)),
           Capabilities(dtypes=LOW, devices=CPU)),
    Mutant("attention-mask-by-multiply", "attention", "mask applied by zeroing probabilities: a NaN in a masked key leaks",
           "NaN leak from masked inputs", "https://github.com/pytorch/pytorch/issues/101967",
           _attention(Bug(mask_by_multiply=True)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-fma-exponent-overflow", "attention",
           "scale and max shift fused into one FMA in exp's argument: the max element's weight overflows for huge scores",
           "overflow to NaN for large inputs", "https://github.com/pytorch/pytorch/issues/121558",
           _attention(Bug(fused_scale_shift=True)), Capabilities(dtypes=("float16", "bfloat16", "float32"), devices=CPU)),
    Mutant("attention-drops-tail-block", "attention", "the last partial key block is skipped",
           "ragged tail", "https://github.com/jax-ml/jax/issues/27224",
           _attention(Bug(drop_tail_block=True)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-subnormal-v-flushed", "attention",
           "V entries below the input format's smallest normal read as 0, as MI200's MFMA_F16/BF16 flush them",
           "denormals flushed to zero",
           "https://rocm.docs.amd.com/projects/MIOpen/en/latest/MI200AlternateImplementation.html",
           _attention(Bug(flush_subnormal_v=True)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-dead-rows-unwritten", "attention",
           "query rows that see no key skipped: left as torch.empty gave them (fresh memory reads 0, the right answer)",
           "unwritten output", "https://github.com/microsoft/onnxruntime/pull/28958",
           _attention(Bug(store_dead_rows=False)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-stale-kv-buffers", "attention",
           "a cache keyed by shape keeps the first call's K and V buffers and reads them at every later call",
           "stale buffer address", "https://github.com/tenstorrent/tt-metal/pull/45137",
           FirstCallBuffers(_attention(Bug()), stale=(1, 2)), Capabilities(dtypes=STD, devices=CPU)),
    Mutant("attention-int16-key-index", "attention",
           "key offsets kept in int16: past 32767 they wrap and read K and V rows before the head's",
           "16-bit index overflow", "https://github.com/facebookresearch/xformers/issues/719",
           _attention(Bug(index_bits=16)), Capabilities(dtypes=STD, devices=CPU)),
    # ---- the log-sum-exp (targets returning (output, LSE)) ------------------------------------
    Mutant("softmax-lse-base-2", "softmax", "LSE reported in log2 units (the kernel's exp2 domain), not ln",
           "LSE scale or base", "https://github.com/lightseekorg/tokenspeed/pull/571",
           _softmax(Bug(lse_base_two=True), lse=True), Capabilities(dtypes=STD, devices=CPU, returns_lse=True)),
    Mutant("softmax-lse-max-not-added", "softmax", "LSE = log(l): the row max the sum was shifted by never added back",
           "LSE scale or base", "https://github.com/pytorch/pytorch/issues/181645",
           _softmax(Bug(lse_adds_max=False), lse=True), Capabilities(dtypes=STD, devices=CPU, returns_lse=True)),
    Mutant("attention-lse-base-2", "attention", "LSE reported in log2 units (the kernel's exp2 domain), not ln",
           "LSE scale or base", "https://github.com/lightseekorg/tokenspeed/pull/571",
           _attention(Bug(lse_base_two=True), lse=True), Capabilities(dtypes=STD, devices=CPU, returns_lse=True)),
    Mutant("attention-lse-raw-max", "attention",
           "LSE adds back the max of the raw scores: the scale was folded into exp's argument, not into the max",
           "LSE scale or base", "https://github.com/NVIDIA/Megatron-LM/pull/848",
           _attention(Bug(lse_scaled_max=False), lse=True), Capabilities(dtypes=STD, devices=CPU, returns_lse=True)),
    Mutant("attention-lse-dead-rows-zero", "attention",
           "query rows that see no key get LSE 0: l guarded to 1 for the division and the guard reused for the LSE",
           "empty-row LSE", "https://github.com/flashinfer-ai/flashinfer/pull/4401",
           _attention(Bug(lse_dead_rows=0.0), lse=True), Capabilities(dtypes=STD, devices=CPU, returns_lse=True)),
    Mutant("attention-lse-input-dtype", "attention",
           "LSE stored in the input's dtype (one buffer dtype for both outputs): a bfloat16 LSE is off by up to "
           "2^-8 |lse|; flash-attention keeps the LSE its backward reads in fp32",
           "LSE precision", "https://github.com/Dao-AILab/flash-attention/pull/2721",
           _attention(Bug(lse_in_input_dtype=True), lse=True), Capabilities(dtypes=STD, devices=CPU, returns_lse=True)),
]

CONTROLS: list[Mutant] = [
    Mutant("control-streaming-softmax", "softmax", "the mutants' softmax with no bug (and its LSE)", "control", "",
           _softmax(Bug(), lse=True), Capabilities(dtypes=STD, devices=CPU, returns_lse=True)),
    Mutant("control-streaming-attention", "attention", "the mutants' attention with no bug (and its LSE)", "control",
           "", _attention(Bug(), lse=True), Capabilities(dtypes=STD, devices=CPU, returns_lse=True)),
]

for _m in MUTANTS + CONTROLS:
    register(Target(_m.name, _m.op, _m.fn, _m.caps, _m.description,
                    kind="control" if _m.bug_class == "control" else "mutant"))


def on_default_stream(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``fn`` with its kernels launched on the device's default stream instead of the caller's
    current stream (the bug class of https://github.com/openvdb/fvdb-core/pull/587: launches
    on stream 0 race a caller that works on a stream of its own).  Right values whenever the
    caller's inputs were ready before the call; on the CPU it is ``fn`` unchanged."""

    def launch_on_default_stream(*args, **kwargs) -> Tensor:
        device = args[0].device
        if device.type != "cuda":
            return fn(*args, **kwargs)
        with torch.cuda.stream(torch.cuda.default_stream(device)):
            return fn(*args, **kwargs)

    return launch_on_default_stream


def all_mutants() -> tuple[list[Mutant], list[Mutant]]:
    """(mutants, controls) in every form available here: torch always, Triton when importable."""
    try:
        from kernels.triton_attention_mutants import TRITON_ATTENTION_CONTROLS, TRITON_ATTENTION_MUTANTS
        from kernels.triton_mutants import TRITON_CONTROLS, TRITON_MUTANTS
    except ImportError:  # triton is an optional extra
        return list(MUTANTS), list(CONTROLS)
    return (MUTANTS + TRITON_MUTANTS + TRITON_ATTENTION_MUTANTS,
            CONTROLS + TRITON_CONTROLS + TRITON_ATTENTION_CONTROLS)
