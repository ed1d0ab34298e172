"""Triton forms of the attention mutants: one small FlashAttention forward kernel with bug switches.

The kernel is the textbook FlashAttention forward: one program per ``BLOCK_M``
query rows of one (batch, head), a loop over all key blocks of ``BLOCK_N`` with
the running max ``m``, sum ``l`` and accumulator ``acc`` in float32, P rounded
to the input dtype before ``P V``.  Pointer loads with masks; the head dim is
padded to ``BLOCK_D`` (a power of two >= 16) with zeros.  Key blocks are visited
last to first (as FlashAttention-2 does); under causal, keys right of the
diagonal are masked, not skipped (a compact kernel, not a fast one), so a
row's first blocks can be all ``-inf``, the case the running max must survive.
Each constexpr switch plants one bug class of ``kernels.mutants``; with every
switch off it is the control.  They run on the GPU and, on small inputs, under
the Triton interpreter on the CPU.  Written independently of the production
kernel (``kernels.triton_attention``), so the two do not share bugs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.mutants import Mutant, FirstCallBuffers, on_default_stream
from kernels.registry import Target, register
from verify.capabilities import Capabilities

BLOCK = 16  # BLOCK_M = BLOCK_N: small, so CPU-sized inputs cross block boundaries


@triton.jit
def _flash_attention_mutant(
    Q, K, V, MASK, OUT, scale,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_mb, stride_mh, stride_mm, stride_mn,
    stride_ob, stride_oh, stride_om, stride_od,
    n_heads, n_kv_heads, n_q, n_k,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr,
    NO_RESCALE: tl.constexpr, NO_INF_GUARD: tl.constexpr, CAUSAL_STRICT: tl.constexpr,
    CAUSAL_BOTTOM_RIGHT: tl.constexpr, GQA_MODULO: tl.constexpr, TAIL_UNMASKED: tl.constexpr,
    HEAD_DIM_UNMASKED: tl.constexpr, SCALE_TWICE: tl.constexpr, ACC_LOW_PRECISION: tl.constexpr,
    FUSED_SCALE_SHIFT: tl.constexpr, DEAD_ROWS_UNSTORED: tl.constexpr, INT32_OFFSETS: tl.constexpr,
):
    bh = tl.program_id(1)
    b = bh // n_heads
    h = bh % n_heads
    h_kv = h % n_kv_heads if GQA_MODULO else h // (n_heads // n_kv_heads)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    # Padding columns d >= HEAD_DIM must load as 0 in Q and K so they add nothing to Q K^T;
    # unmasked, they read whatever follows each row in memory (the next row's entries).
    qk_d_ok = offs_d < (BLOCK_D if HEAD_DIM_UNMASKED else HEAD_DIM)

    if INT32_OFFSETS:
        # program_id and the strides are int32: (batch, head) offsets wrap past 2**31 elements.
        q_base = Q + b * stride_qb + h * stride_qh
        o_base = OUT + b * stride_ob + h * stride_oh
    else:
        q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
        o_base = OUT + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    q_ptrs = q_base + rows[:, None] * stride_qm + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=(rows < n_q)[:, None] & qk_d_ok[None, :], other=0.0)
    k_head = K + b.to(tl.int64) * stride_kb + h_kv.to(tl.int64) * stride_kh
    v_head = V + b.to(tl.int64) * stride_vb + h_kv.to(tl.int64) * stride_vh
    mask_rows = MASK + b.to(tl.int64) * stride_mb + h.to(tl.int64) * stride_mh + rows[:, None] * stride_mm
    # Causal is top-left aligned: query i sees keys j <= i (bottom-right would add n_k - n_q).
    diag = n_k - n_q if CAUSAL_BOTTOM_RIGHT else 0

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # Last key block first, as FlashAttention-2 does: under causal, blocks right of a row's
    # diagonal (all -inf for it) come before any key it sees.
    n_blocks = tl.cdiv(n_k, BLOCK_N)
    for i in range(0, n_blocks):
        cols = (n_blocks - 1 - i) * BLOCK_N + offs_n
        in_k = (cols < n_k)[:, None]
        k = tl.load(k_head + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                    mask=in_k & qk_d_ok[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
        if FUSED_SCALE_SHIFT:
            # Scale applied later, inside exp's argument (scores negated for a negative scale).
            s = -s if scale < 0 else s
        else:
            s = s * scale
        if SCALE_TWICE:
            s = s * scale
        # Keys past the ragged tail of n_k are loaded as 0 and must be hidden with -inf.
        visible = (cols >= 0)[None, :] if TAIL_UNMASKED else (cols < n_k)[None, :]
        if CAUSAL:
            if CAUSAL_STRICT:
                visible = visible & (cols[None, :] < rows[:, None] + diag)
            else:
                visible = visible & (cols[None, :] <= rows[:, None] + diag)
        if HAS_MASK:
            in_range = (rows < n_q)[:, None] & (cols < n_k)[None, :]
            allowed = tl.load(mask_rows + cols[None, :] * stride_mn, mask=in_range, other=0)
            visible = visible & (allowed != 0)
        s = tl.where(visible, s, float("-inf"))

        if FUSED_SCALE_SHIFT:
            # max(s) * c is the max of s * c (rounding is monotone), but fma(s, c, -shift) leaves
            # the max element the rounding error of max(s) * c: huge for huge scores.
            m_new = tl.maximum(m_i, tl.max(s, 1) * tl.abs(scale))
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row with no visible key yet has m_new = -inf: shift by 0, or exp(-inf - -inf) = NaN.
        shift = m_new if NO_INF_GUARD else tl.where(m_new == float("-inf"), 0.0, m_new)
        if FUSED_SCALE_SHIFT:
            p = tl.exp(tl.fma(s, tl.abs(scale), -shift[:, None]))
        else:
            p = tl.exp(s - shift[:, None])
        alpha = tl.exp(m_i - shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_head + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=in_k & d_ok[None, :], other=0.0)
        if not NO_RESCALE:
            acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision="ieee")  # P in the input dtype
        if ACC_LOW_PRECISION:
            l_i = l_i.to(v.dtype).to(tl.float32)
            acc = acc.to(v.dtype).to(tl.float32)
        m_i = m_new

    # l = 0 exactly when a row saw no key: output 0 (acc may hold 0 * NaN from a masked V).
    empty = l_i == 0.0
    out = tl.where(empty[:, None], 0.0, acc / tl.where(empty, 1.0, l_i)[:, None])
    o_ptrs = o_base + rows[:, None] * stride_om + offs_d[None, :] * stride_od
    store = (rows < n_q)[:, None] & d_ok[None, :]
    if DEAD_ROWS_UNSTORED:
        store = store & (~empty)[:, None]  # "nothing to write": the allocator's memory stays
    tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=store)


def _with_slack(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of t followed by 256 zeros, so reads up to 256 elements past its end are defined."""
    buf = torch.zeros(t.numel() + 256, dtype=t.dtype, device=t.device)
    buf[:t.numel()] = t.reshape(-1)
    return buf[:t.numel()].view(t.shape)


#: The kernel's bug switches, as keyword names of ``_launcher`` (the constexpr is the upper-case name).
BUGS = ("no_rescale", "no_inf_guard", "causal_strict", "causal_bottom_right", "gqa_modulo", "tail_unmasked",
        "head_dim_unmasked", "scale_twice", "acc_low_precision", "fused_scale_shift", "dead_rows_unstored",
        "int32_offsets")


def _launcher(**bug: bool):
    unknown = set(bug) - set(BUGS)
    if unknown:
        raise ValueError(f"unknown bug switch(es) {sorted(unknown)}; known: {', '.join(BUGS)}")
    switches = {name.upper(): bool(bug.get(name, False)) for name in BUGS}

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float, causal: bool = False,
                  mask: torch.Tensor | None = None) -> torch.Tensor:
        B, Hq, Nq, D = q.shape
        Hkv, Nk = k.shape[1], k.shape[2]
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        if switches["HEAD_DIM_UNMASKED"]:  # the unmasked reads run past the last row: keep them in bounds
            q, k = _with_slack(q), _with_slack(k)
        if mask is not None:
            full = mask.expand(B, Hq, Nq, Nk)  # broadcast dims read with stride 0
            mask_arg, mask_strides = full.view(torch.uint8), full.stride()
        else:
            mask_arg, mask_strides = out, (0, 0, 0, 0)  # never read
        grid = (triton.cdiv(Nq, BLOCK), B * Hq)
        _flash_attention_mutant[grid](
            q, k, v, mask_arg, out, float(scale),
            *q.stride(), *k.stride(), *v.stride(), *mask_strides, *out.stride(),
            Hq, Hkv, Nq, Nk,
            HEAD_DIM=D, BLOCK_D=max(16, triton.next_power_of_2(D)), BLOCK_M=BLOCK, BLOCK_N=BLOCK,
            CAUSAL=bool(causal), HAS_MASK=mask is not None, **switches,
        )
        return out
    return attention


def _probe(device: str) -> str | None:
    from kernels.triton_targets import _probe as triton_probe

    return triton_probe(device)


# float16 / float32 only: the interpreter's bfloat16 tl.dot multiplies raw bit patterns (triton #11584).
# Short sequences: the interpreter runs every program and key block in Python.  The (batch, head)
# pairs go on the grid's second axis, which holds 65535.
_CAPS = Capabilities(dtypes=("float16", "float32"), devices=("cpu", "cuda"), max_length=64, head_dim_max=256,
                     max_pairs=65535)


def _mutant(name: str, description: str, bug_class: str, reference: str, caps: Capabilities = _CAPS,
            **bug: bool) -> Mutant:
    return Mutant(name, "attention", "Triton: " + description, bug_class, reference, _launcher(**bug), caps,
                  "triton")


TRITON_ATTENTION_MUTANTS = [
    _mutant("triton-attention-no-rescale-acc", "accumulator not rescaled by alpha when the running max grows",
            "online-softmax rescale", "https://arxiv.org/abs/2205.14135", no_rescale=True),
    _mutant("triton-attention-inf-minus-inf", "no guard for exp(-inf - (-inf)) when a whole key block is masked",
            "NaN from -inf rescale", "https://github.com/flashinfer-ai/flashinfer/issues/4451", no_inf_guard=True),
    _mutant("triton-attention-causal-off-by-one", "causal mask j < i instead of j <= i",
            "causal off by one", "https://github.com/Dao-AILab/flash-attention/issues/517", causal_strict=True),
    _mutant("triton-attention-causal-bottom-right", "causal mask aligned bottom-right when Nq != Nk",
            "causal alignment", "https://github.com/Dao-AILab/flash-attention/issues/1778",
            causal_bottom_right=True),
    _mutant("triton-attention-gqa-modulo", "GQA maps query head h to kv head h % Hkv",
            "GQA head mapping", "https://github.com/pytorch/pytorch/pull/133495", gqa_modulo=True),
    _mutant("triton-attention-tail-unmasked", "ragged key tail not masked: padding keys score 0 and count",
            "ragged tail", "https://github.com/jax-ml/jax/issues/27224", tail_unmasked=True),
    _mutant("triton-attention-head-dim-unmasked", "Q and K padding lanes d >= D loaded unmasked (next row's entries)",
            "head-dim padding", "https://github.com/sgl-project/sglang/pull/1281", head_dim_unmasked=True),
    _mutant("triton-attention-scale-twice", "softmax scale applied twice",
            "scale", "https://github.com/NVIDIA/Megatron-LM/pull/848", scale_twice=True),
    _mutant("triton-attention-acc-low-precision", "running sum l and accumulator rounded to float16 between key blocks",
            "low-precision accumulation", "https://github.com/flashinfer-ai/flashinfer/issues/5107",
            _CAPS.with_(dtypes=("float16",)), acc_low_precision=True),
    _mutant("triton-attention-fma-exponent-overflow",
            "scale and max shift fused into one FMA in exp's argument: the max element's weight overflows",
            "overflow to NaN for large inputs", "https://github.com/pytorch/pytorch/issues/121558",
            fused_scale_shift=True),
    Mutant("triton-attention-stale-kv-address", "attention",
           "Triton: the launch keeps the first call's K and V pointers for every later call of the same shapes",
           "stale buffer address", "https://github.com/tenstorrent/tt-metal/pull/45137",
           FirstCallBuffers(_launcher(), stale=(1, 2)), _CAPS, "triton"),
    _mutant("triton-attention-dead-rows-unstored",
            "query rows that saw no key not stored (their zeros left to the allocator)",
            "unwritten output", "https://github.com/microsoft/onnxruntime/pull/28958", dead_rows_unstored=True),
    # GPU only: on the CPU there is no stream to get wrong.
    Mutant("triton-attention-default-stream", "attention",
           "Triton: launched on the default stream, not the caller's current stream", "stream order",
           "https://github.com/openvdb/fvdb-core/pull/587", on_default_stream(_launcher()),
           _CAPS.with_(devices=("cuda",)), "triton"),
    # GPU only: its bug shows past 2**31 elements, which only the CUDA wide-offsets probe reaches
    # (heads of 129 keys and more, where 65535 pairs pass it).
    _mutant("triton-attention-int32-head-offsets",
            "(batch, head) offsets of Q and the output formed in int32, wrapping past 2**31 elements",
            "32-bit offset overflow", "https://github.com/sgl-project/sglang/issues/20389",
            _CAPS.with_(devices=("cuda",), max_length=1024), int32_offsets=True),
]
TRITON_ATTENTION_CONTROLS = [
    Mutant("control-triton-flash-attention", "attention", "the Triton attention mutants' kernel with no bug",
           "control", "", _launcher(), _CAPS, "triton"),
]

for _m in TRITON_ATTENTION_MUTANTS + TRITON_ATTENTION_CONTROLS:
    register(Target(_m.name, _m.op, _m.fn, _m.caps, _m.description, _probe,
                    kind="control" if _m.bug_class == "control" else "mutant"))
