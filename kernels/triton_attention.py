"""FlashAttention forward pass in Triton.

One program owns ``BLOCK_M`` query rows of one (batch, head) and walks the keys in
blocks of ``BLOCK_N``, keeping for each row the running maximum ``m``, running sum
``l`` and unnormalized output ``acc`` in float32 (the online softmax).  The
``Nq x Nk`` score matrix only ever exists one tile at a time, on chip.

Key blocks are visited in two stages: blocks that every row of the program may
fully see take a path with no per-element masking; the rest (the ragged tail of
``Nk`` and, when causal, the blocks crossing the diagonal) are masked with
``-inf``.  Under ``causal`` the blocks right of the diagonal are never visited.

Scores are kept in base-2 units (``scale * log2(e)`` folded into one multiply) so
the exponentials are plain ``exp2``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import triton
import triton.language as tl
import triton.testing
from triton.runtime.errors import OutOfResources
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels.triton_support import LN2, check_device, check_dtype, interpreting, safe_max

__all__ = ["attention", "attention_fp32_ieee", "attention_fp32_tf32", "AUTOTUNE_CONFIGS", "MAX_HEAD_DIM",
           "pick_tiling"]


@triton.jit
def _load_block(X, base, b, h, start, rows, n_rows, stride_row, stride_d, offs_d,
                BLOCK_ROWS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                CHECK_ROWS: tl.constexpr, USE_TMA: tl.constexpr):
    """Rows [start, start + BLOCK_ROWS) of one head, zero past the end and past HEAD_DIM.

    Zero padding adds nothing to either product.  With TMA the copy engine clips and
    zero-fills by itself; with pointers the masks do it (skipped where known in range).
    """
    if USE_TMA:
        t = X.load([b, h, start, 0]).reshape(BLOCK_ROWS, BLOCK_D)
    else:
        ptrs = X + base + rows[:, None] * stride_row + offs_d[None, :] * stride_d
        if CHECK_ROWS:
            if BLOCK_D == HEAD_DIM:
                t = tl.load(ptrs, mask=(rows < n_rows)[:, None], other=0.0)
            else:
                t = tl.load(ptrs, mask=(rows < n_rows)[:, None] & (offs_d < HEAD_DIM)[None, :], other=0.0)
        else:
            if BLOCK_D == HEAD_DIM:
                t = tl.load(ptrs)
            else:
                t = tl.load(ptrs, mask=(offs_d < HEAD_DIM)[None, :], other=0.0)
    return t


@triton.jit
def _attn_blocks(
    acc, l_i, m_i, q, K, V, k_base, v_base, mask_rows, b, h_kv,
    stride_kn, stride_kd, stride_vn, stride_vd, stride_mn,
    lo, hi, n_q, n_k, qk_scale, offs_m, offs_n, offs_d,
    BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr,
    DOT_PRECISION: tl.constexpr, USE_TMA: tl.constexpr, SCALE_MODE: tl.constexpr,
):
    """Fold key blocks [lo, hi) into the running (acc, l, m) of one query block."""
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = _load_block(K, k_base, b, h_kv, start_n, cols, n_k, stride_kn, stride_kd, offs_d,
                        BLOCK_N, HEAD_DIM, BLOCK_D, MASKED, USE_TMA)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if SCALE_MODE == 0:
            s = s * qk_scale
        elif SCALE_MODE == 2:
            s = -s  # exact; qk_scale holds |scale| * log2(e)
        if MASKED:
            visible = (cols < n_k)[None, :]
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None])
            s = tl.where(visible, s, float("-inf"))
        if HAS_MASK:
            in_range = (offs_m < n_q)[:, None] & (cols < n_k)[None, :]
            allowed = tl.load(mask_rows + cols[None, :] * stride_mn, mask=in_range, other=0)
            s = tl.where(allowed != 0, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # A row with nothing visible yet has m_new = -inf; shifting it by 0 keeps
        # p = exp2(-inf) = 0 and alpha = exp2(-inf) = 0, never exp2(-inf + inf) = NaN.
        shift = safe_max(m_new)
        if SCALE_MODE == 0:
            p = tl.math.exp2(s - shift[:, None])
            alpha = tl.math.exp2(m_i - shift)
        else:
            # Scores stay unscaled and the scale multiplies the difference.  Scaling first
            # invites the compiler to contract s * c - shift into one FMA, which leaves the
            # largest score the rounding error of its product, not 0: for scores near 2**32
            # that is exp2(+256) = inf and a NaN row (the suite found it on the H200; the bug
            # class of pytorch #121558).  (s - shift) * c has no FMA form, and the
            # subtraction is exact for scores within a factor of two of the maximum.
            p = tl.math.exp2((s - shift[:, None]) * qk_scale)
            alpha = tl.math.exp2((m_i - shift) * qk_scale)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = _load_block(V, v_base, b, h_kv, start_n, cols, n_k, stride_vn, stride_vd, offs_d,
                        BLOCK_N, HEAD_DIM, BLOCK_D, MASKED, USE_TMA)
        # P is rounded to the input type before P @ V, as FlashAttention does.
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd_kernel(
    Q, K, V, MASK, OUT, LSE, qk_scale,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_mb, stride_mh, stride_mm, stride_mn,
    stride_ob, stride_oh, stride_om, stride_od,
    n_heads, group, n_q, n_k,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, WRITE_LSE: tl.constexpr,
    DOT_PRECISION: tl.constexpr, USE_TMA: tl.constexpr, BLOCK_D: tl.constexpr, SCALE_MODE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # One grid axis: (query block, batch x head) flattened with the query block fastest,
    # the order a 2-D grid would give, without the 65535 limit of a second axis (B * H
    # past it would not launch, pytorch #142228).
    n_m = tl.cdiv(n_q, BLOCK_M)
    pid = tl.program_id(0)
    bh = pid // n_m
    pid_m = pid - bh * n_m
    if CAUSAL:
        # Later query blocks see more keys: launch them first so the short ones fill the tail.
        pid_m = n_m - 1 - pid_m
    b = bh // n_heads
    h = bh % n_heads
    h_kv = h // group
    # 64-bit head offsets: B * H * N * D can pass 2**31 elements.
    q_base = b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = b.to(tl.int64) * stride_kb + h_kv.to(tl.int64) * stride_kh
    v_base = b.to(tl.int64) * stride_vb + h_kv.to(tl.int64) * stride_vh
    o_base = b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh

    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_rows = MASK + b.to(tl.int64) * stride_mb + h.to(tl.int64) * stride_mh + offs_m[:, None] * stride_mm

    q = _load_block(Q, q_base, b, h, start_m, offs_m, n_q, stride_qm, stride_qd, offs_d,
                    BLOCK_M, HEAD_DIM, BLOCK_D, True, USE_TMA)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    # Key j is visible to query i iff j < n_k and (not causal or j <= i).
    if CAUSAL:
        hi = tl.minimum(start_m + BLOCK_M, n_k)
        # Blocks ending at or before start_m + 1 are visible to every row of this program.
        full = (tl.minimum(start_m + 1, n_k) // BLOCK_N) * BLOCK_N
    else:
        hi = n_k
        full = (n_k // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _attn_blocks(
        acc, l_i, m_i, q, K, V, k_base, v_base, mask_rows, b, h_kv,
        stride_kn, stride_kd, stride_vn, stride_vd, stride_mn,
        0, full, n_q, n_k, qk_scale, offs_m, offs_n, offs_d,
        BLOCK_N, HEAD_DIM, BLOCK_D, False, CAUSAL, HAS_MASK, DOT_PRECISION, USE_TMA, SCALE_MODE,
    )
    acc, l_i, m_i = _attn_blocks(
        acc, l_i, m_i, q, K, V, k_base, v_base, mask_rows, b, h_kv,
        stride_kn, stride_kd, stride_vn, stride_vd, stride_mn,
        full, hi, n_q, n_k, qk_scale, offs_m, offs_n, offs_d,
        BLOCK_N, HEAD_DIM, BLOCK_D, True, CAUSAL, HAS_MASK, DOT_PRECISION, USE_TMA, SCALE_MODE,
    )

    # l == 0 exactly when a row saw no key: output 0, LSE -inf.  acc is not trusted
    # there: a NaN in a masked-out V still reaches it through 0 * NaN in P V.
    empty = l_i == 0.0
    out = tl.where(empty[:, None], 0.0, acc / tl.where(empty, 1.0, l_i)[:, None])
    if USE_TMA:
        OUT.store([b, h, start_m, 0], out.to(OUT.dtype).reshape(1, 1, BLOCK_M, BLOCK_D))
    else:
        o_ptrs = OUT + o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
        if BLOCK_D == HEAD_DIM:
            o_mask = (offs_m < n_q)[:, None]
        else:
            o_mask = (offs_m < n_q)[:, None] & (offs_d < HEAD_DIM)[None, :]
        tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=o_mask)
    if WRITE_LSE:
        m_scaled = m_i if SCALE_MODE == 0 else m_i * qk_scale
        lse = tl.where(empty, float("-inf"), (m_scaled + tl.math.log2(l_i)) * LN2)
        tl.store(LSE + bh.to(tl.int64) * n_q + offs_m, lse, mask=offs_m < n_q)


def _tiling(bm: int, bn: int, warps: int, stages: int) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages}


#: Candidate tilings by (kind, padded head dim), kind one of "16bit", "tf32", "ieee".  Few on
#: purpose: each is compiled and timed once per (dtype, head dim, causal, mask, length bucket).
#: IEEE float32 products run on FMA units whose operand tiles live in registers, hence the
#: small tiles there.
AUTOTUNE_CONFIGS: dict[tuple[str, int], list[dict]] = {
    ("16bit", 16): [_tiling(64, 64, 4, 3), _tiling(128, 64, 4, 3)],
    ("16bit", 32): [_tiling(64, 64, 4, 3), _tiling(128, 64, 4, 3)],
    ("16bit", 64): [_tiling(64, 64, 4, 3), _tiling(128, 64, 8, 3)],
    ("16bit", 128): [_tiling(64, 64, 4, 3), _tiling(128, 64, 8, 3), _tiling(128, 128, 8, 3)],
    ("16bit", 256): [_tiling(64, 64, 4, 2), _tiling(128, 64, 8, 2), _tiling(64, 32, 4, 2)],
    ("tf32", 16): [_tiling(64, 64, 4, 3), _tiling(64, 32, 4, 3)],
    ("tf32", 32): [_tiling(64, 64, 4, 3), _tiling(64, 32, 4, 3)],
    ("tf32", 64): [_tiling(64, 64, 4, 3), _tiling(64, 32, 4, 3)],
    ("tf32", 128): [_tiling(64, 64, 4, 2), _tiling(64, 32, 4, 2)],
    ("tf32", 256): [_tiling(64, 32, 4, 2), _tiling(32, 32, 4, 2)],
    ("ieee", 16): [_tiling(32, 32, 4, 2)],
    ("ieee", 32): [_tiling(32, 32, 4, 2)],
    ("ieee", 64): [_tiling(32, 32, 4, 2)],
    ("ieee", 128): [_tiling(32, 16, 4, 2)],
    ("ieee", 256): [_tiling(32, 16, 8, 1)],
}


def pick_tiling(candidates: list[dict], launch: Callable[[dict], None],
                time_call: Callable[[Callable[[], None]], float], rounds: int = 2) -> dict:
    """The candidate whose launch is fastest: every candidate is launched once first (which
    compiles it; one that does not fit on chip is dropped), then all are timed in ``rounds``
    rounds, each round in the reverse order of the one before, and a candidate's time is its
    fastest round (noise only adds time).

    Why not ``triton.autotune``: it times each candidate right after compiling it, and the
    GPU idles while the host compiles.  On the H200 that let the pick for D = 128 flip
    between runs, 64 x 64 one run and 128 x 128 the next, a 7% difference at N = 4096
    (BENCHMARKS.md, 2026-11-30).  Here the timings run back to back on a busy GPU.

    Raises:
        OutOfResources: no candidate fits.
    """
    usable = []
    for c in candidates:
        try:
            launch(c)
            usable.append(c)
        except OutOfResources:
            continue
    if not usable:
        raise OutOfResources(0, 0, f"shared memory: none of the tilings {candidates} fits")
    best = [float("inf")] * len(usable)
    for r in range(rounds):
        order = range(len(usable)) if r % 2 == 0 else reversed(range(len(usable)))
        for i in order:
            best[i] = min(best[i], time_call(lambda c=usable[i]: launch(c)))
    return usable[min(range(len(usable)), key=best.__getitem__)]


def _time_on_gpu(fn: Callable[[], None]) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")


#: Under the interpreter, key sequences longer than this are tiled 128 keys wide, not 16 (and
#: 4096 wide past eight times this): many key blocks still, but not thousands.  Query
#: sequences longer than this are tiled 128 queries wide.
INTERPRETER_LONG_KEYS = 1024
#: Under the interpreter, sequences up to this are tiled 16 wide, longer ones 32 wide: every
#: tile costs the interpreter milliseconds, and four 16-wide blocks already cross every
#: kind of block boundary (first, inner, ragged last).
INTERPRETER_SMALL_TILES = 64

#: Largest head dim: every candidate tiling keeps Q, a K and a V tile of BLOCK_D <= 256 on chip.
MAX_HEAD_DIM = 256

#: Whether ``use_tma=None`` picks TMA descriptors where the hardware and strides allow.  Off:
#: on an H200 (triton 3.6) the pointer path was as fast or faster at most shapes and costs
#: ~40 us less host time per call (bench/attention.py --sweep, 2026-11-29).
DEFAULT_USE_TMA = False


def _block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))  # tl.dot needs K >= 16


@functools.lru_cache(maxsize=None)
def _capability(device_index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device_index)


def _tma_addressable(*tensors: torch.Tensor) -> bool:
    """Unit last stride, 16-byte aligned base and other strides: what a TMA descriptor needs."""
    for t in tensors:
        elem = t.element_size()
        if t.stride(-1) != 1 or t.data_ptr() % 16 or any((st * elem) % 16 for st in t.stride()[:-1]):
            return False
    return True


#: Benchmark-only override.  ``multiply_first``: scale the scores before taking the maximum,
#: the order the compiler contracts into one FMA (s * c - m), which overflows to NaN rows for
#: scores near 2**32 (see ``_attn_blocks``); ``bench/attention.py --sweep`` times it to show
#: what the safe order costs.  Never set it outside a benchmark.
TUNING: dict = {"multiply_first": False}

#: Tiling chosen by pick_tiling per key (see attention()), replayed on later calls.
_TUNED: dict[tuple, dict] = {}


def _descriptor(t: torch.Tensor, rows: int, block_d: int) -> TensorDescriptor:
    return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, block_d])


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    causal: bool = False,
    mask: torch.Tensor | None = None,
    return_lse: bool = False,
    allow_tf32: bool | None = None,
    config: dict | None = None,
    use_tma: bool | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention forward: ``O = softmax(scale * Q K^T) V`` over visible keys.

    For query ``i`` of head ``h``, ``O[b, h, i] = sum_j P[i, j] V[b, g(h), j]`` with
    ``P[i, :] = softmax_j(scale * <Q[b, h, i], K[b, g(h), j]>)`` over the keys ``j`` that
    are visible, where ``g(h) = h // (Hq // Hkv)`` (grouped-query attention) and key ``j``
    is visible iff ``mask[b, h, i, j]`` (when given) and ``j <= i`` (when ``causal``; top-left
    aligned, as ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``, also for
    ``Nq != Nk``).  ``P`` is computed with float32 statistics and rounded to the input dtype
    before the ``P V`` product (fp16/bf16); all products accumulate in float32.

    A query row with no visible key gets output exactly 0 and LSE ``-inf`` (never NaN).
    NaN or infinite inputs propagate to the rows whose visible keys they reach; a NaN or
    infinite K or V row may also reach rows that do not see it but share its key block
    (``0 * inf`` inside the ``P V`` product), as in other fused kernels.

    Args:
        q: ``(B, Hq, Nq, D)``; k, v: ``(B, Hkv, Nk, D)``; one dtype among float16, bfloat16,
            float32; any strides; ``Nq, Nk >= 1``; ``Hq % Hkv == 0``; ``1 <= D <= 256``
            (padded to a power of two >= 16 on chip; the padding contributes 0).
        scale: multiplier of the scores, any finite float (negative too).
        causal: hide keys ``j > i``.
        mask: boolean, broadcastable to ``(B, Hq, Nq, Nk)``; True = attend.  Broadcast
            dimensions are read with stride 0, never materialized.
        return_lse: also return ``LSE[b, h, i] = log sum_j exp(scale * <q_i, k_j>)`` over the
            visible keys, float32 ``(B, Hq, Nq)``.
        allow_tf32: float32 inputs only: True multiplies in TF32 on tensor cores, False
            (default, also for None) in full IEEE float32.  Ignored for 16-bit inputs.
        config: fixed tiling ``{"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"}`` instead of
            the tuned one (:func:`pick_tiling` over ``AUTOTUNE_CONFIGS``, once per shape class);
            the interpreter always uses a fixed tiling, 16 x 16 by default.
        use_tma: True loads Q, K, V and stores O through TMA tensor descriptors (Hopper or
            later; unit last stride, 16-byte aligned pointers and strides); False or None
            (default, see ``DEFAULT_USE_TMA``) uses pointer loads.  True on the interpreter
            exercises the descriptor code path.

    Returns:
        ``O`` with q's shape and dtype (contiguous), or ``(O, LSE)``.

    Raises:
        TypeError: unsupported dtypes, mixed dtypes, or a non-boolean mask.
        ValueError: bad shapes (rank, batch, head counts, head dims, empty sequences, a mask
            that does not broadcast), a non-finite scale, mixed devices, CPU tensors without
            the interpreter, or ``use_tma=True`` for tensors the copy engine cannot address.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_dtype(name, t)
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, N, D), got shape {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    check_device(q, k, v, *([mask] if mask is not None else []))
    B, Hq, Nq, D = q.shape
    Bk, Hkv, Nk, Dk = k.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if Bk != B or Dk != D:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch or head dim")
    if Hkv < 1 or Hq % Hkv:
        raise ValueError(f"query heads ({Hq}) must be a multiple of key/value heads ({Hkv})")
    if Nq < 1 or Nk < 1 or not 1 <= D <= MAX_HEAD_DIM:
        raise ValueError(f"need Nq, Nk >= 1 and 1 <= D <= {MAX_HEAD_DIM}, got Nq={Nq}, Nk={Nk}, D={D}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be boolean (True = attend), got {mask.dtype}")

    out = torch.empty(q.shape, device=q.device, dtype=q.dtype)
    lse = torch.empty((B, Hq, Nq), device=q.device, dtype=torch.float32) if return_lse else None
    if B == 0 or Hq == 0:
        return (out, lse) if return_lse else out

    if mask is not None:
        try:
            mask_full = mask.expand(B, Hq, Nq, Nk)  # stride-0 view, no copy
        except RuntimeError as e:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to {(B, Hq, Nq, Nk)}") from e
        mask_arg = mask_full.view(torch.uint8)  # same size; loads as bytes, tested != 0
        mask_strides = mask_full.stride()
    else:
        mask_arg, mask_strides = out, (0, 0, 0, 0)  # never read

    block_d = _block_d(D)
    if use_tma is None:
        use_tma = (DEFAULT_USE_TMA and q.device.type == "cuda" and _capability(q.device.index or 0)[0] >= 9
                   and _tma_addressable(q, k, v, out))
    elif use_tma and not _tma_addressable(q, k, v, out):
        raise ValueError("use_tma=True needs unit last strides and 16-byte aligned pointers and strides")
    if use_tma:
        # Box shapes are placeholders until the tiling is known (launch() sets them).
        q_arg, k_arg, v_arg, o_arg = (_descriptor(t, 16, block_d) for t in (q, k, v, out))
    else:
        q_arg, k_arg, v_arg, o_arg = q, k, v, out

    qk_scale = scale * math.log2(math.e)
    # 1 / 2: scale > 0 / < 0 (scores negated, exactly): the scale multiplies score - max.
    # 0: a scale of 0 (or below float32's normal range) multiplies first, since
    # (-inf - m) * 0 for a masked score would be NaN.
    scale_mode = 0 if abs(qk_scale) < 2.0**-126 or TUNING["multiply_first"] else 1 if qk_scale > 0 else 2
    precision = "tf32" if (q.dtype == torch.float32 and allow_tf32) else "ieee"
    n_max = max(Nq, Nk)
    tune_n = 1024 if n_max <= 1024 else 4096 if n_max <= 4096 else 16384
    args = (
        q_arg, k_arg, v_arg, mask_arg, o_arg, lse if return_lse else out, abs(qk_scale) if scale_mode else qk_scale,
        *q.stride(), *k.stride(), *v.stride(), *mask_strides, *out.stride(),
        Hq, Hq // Hkv, Nq, Nk,
    )
    meta = dict(HEAD_DIM=D, CAUSAL=bool(causal), HAS_MASK=mask is not None, WRITE_LSE=return_lse,
                DOT_PRECISION=precision, USE_TMA=bool(use_tma), BLOCK_D=block_d, SCALE_MODE=scale_mode)

    if config is None and interpreting():
        # The interpreter runs every key block in Python: thousands of keys (the strategies'
        # 16-bit index probes hold 32k-65k) take wide key blocks, or one call takes seconds.
        block_n = (16 if Nk <= INTERPRETER_SMALL_TILES else 32 if Nk <= INTERPRETER_LONG_KEYS
                   else 128 if Nk <= 8 * INTERPRETER_LONG_KEYS else 4096)
        # Likewise a thousand queries and more (the strategies' mid-queries probe): 128 wide.
        block_m = 16 if Nq <= INTERPRETER_SMALL_TILES else 32 if Nq <= INTERPRETER_LONG_KEYS else 128
        config = {"BLOCK_M": block_m, "BLOCK_N": block_n,
                  "num_warps": 1, "num_stages": 1}
    def launch(tiling: dict) -> None:
        if use_tma:
            for desc, rows in ((q_arg, tiling["BLOCK_M"]), (o_arg, tiling["BLOCK_M"]),
                               (k_arg, tiling["BLOCK_N"]), (v_arg, tiling["BLOCK_N"])):
                desc.block_shape = [1, 1, rows, block_d]
        _attn_fwd_kernel[(triton.cdiv(Nq, tiling["BLOCK_M"]) * B * Hq,)](
            *args, **meta, BLOCK_M=tiling["BLOCK_M"], BLOCK_N=tiling["BLOCK_N"],
            num_warps=tiling.get("num_warps", 4), num_stages=tiling.get("num_stages", 2))

    if config is None:
        key = (tune_n, q.dtype, D, *meta.values())
        config = _TUNED.get(key)
        if config is None:
            candidates = AUTOTUNE_CONFIGS[("16bit" if q.dtype != torch.float32 else precision, block_d)]
            try:
                config = pick_tiling(candidates, launch, _time_on_gpu)
            except OutOfResources:
                config = candidates[0]  # the launch below lowers its stages until it fits
            _TUNED[key] = config
    stages = config.get("num_stages", 2)
    while True:
        # A tiling tuned on one call may not fit in shared memory on the next, which Triton
        # compiles as another variant (it specializes on stride alignment): on the H200 a
        # 2 x 2 mask after tuned masked calls needed 256 KiB of 227 at 128 x 128 x 3 stages
        # (found by the suite on 2026-11-29, after it began drawing sliced and expanded
        # masks).  Fewer stages hold less and compute the same result.
        try:
            launch(dict(config, num_stages=stages))
            break
        except OutOfResources:
            if stages <= 1:
                raise
            stages -= 1
    return (out, lse) if return_lse else out


def attention_fp32_ieee(q, k, v, **kwargs):
    """:func:`attention` with float32 products in full IEEE precision (``allow_tf32=False``)."""
    return attention(q, k, v, allow_tf32=False, **kwargs)


def attention_fp32_tf32(q, k, v, **kwargs):
    """:func:`attention` with float32 products on TF32 tensor cores (``allow_tf32=True``).

    Inputs of Q K^T and P V are rounded to TF32 (10-bit mantissa); accumulation stays float32.
    """
    return attention(q, k, v, allow_tf32=True, **kwargs)
