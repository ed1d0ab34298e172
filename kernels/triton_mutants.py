"""Triton forms of the softmax mutants: one small online-softmax kernel with bug switches.

The kernel is the textbook streaming softmax (one program per row, running max m
and sum l over blocks, then a normalize sweep); each constexpr switch plants one
bug class of ``kernels.mutants``.  With every switch off it is the control.  They
run on the GPU and, on small rows, under the Triton interpreter on the CPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.mutants import Mutant, on_default_stream
from kernels.registry import Target, register
from verify.capabilities import Capabilities

BLOCK = 16  # small, so CPU-sized rows still cross block boundaries


@triton.jit
def _online_softmax_mutant(X, Y, n_cols, stride_x, stride_y, BLOCK_N: tl.constexpr,
                           NO_RESCALE: tl.constexpr, NO_INF_GUARD: tl.constexpr, PAD_ZERO: tl.constexpr,
                           SKIP_MASKED_BLOCKS: tl.constexpr, INT32_OFFSETS: tl.constexpr):
    row = tl.program_id(0)
    if INT32_OFFSETS:
        # program_id and the stride are int32: the product wraps past 2**31 elements.
        x_row = X + row * stride_x
        y_row = Y + row * stride_y
    else:
        x_row = X + row.to(tl.int64) * stride_x
        y_row = Y + row.to(tl.int64) * stride_y
    pad = 0.0 if PAD_ZERO else float("-inf")
    m = tl.full([BLOCK_N], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=pad).to(tl.float32)
        m_new = tl.maximum(m, x)
        # While a lane has seen only -inf, exp(-inf - -inf) would be NaN: shift by 0 instead.
        shift = m_new if NO_INF_GUARD else tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = 1.0 if NO_RESCALE else tl.exp(m - shift)
        l = l * alpha + tl.exp(x - shift)
        m = m_new
    m_row = tl.max(m, 0)
    shift_row = m_row if NO_INF_GUARD else tl.where(m_row == float("-inf"), 0.0, m_row)
    # Lanes that saw only -inf have l = 0 and weight exp(-inf - shift) = 0; substituting 0
    # for their max here would give exp(+big) * 0 = NaN (the suite caught that in this control).
    l_row = tl.sum(tl.where(l == 0.0, 0.0, l * tl.exp(m - shift_row)), 0)
    inv = tl.where(l_row == 0.0, 0.0, 1.0 / l_row)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        p = tl.exp(x - shift_row) * inv
        store = cols < n_cols
        if SKIP_MASKED_BLOCKS:
            # "Nothing to write" for a block of -inf: its zeros are left to the allocator.
            block_max = tl.zeros([BLOCK_N], tl.float32) + tl.max(x, 0)  # as a vector: the interpreter's & wants one
            store = store & (block_max > float("-inf"))
        tl.store(y_row + cols, p.to(Y.dtype.element_ty), mask=store)


def _launcher(no_rescale: bool = False, no_inf_guard: bool = False, pad_zero: bool = False,
              skip_masked_blocks: bool = False, int32_offsets: bool = False):
    def softmax(x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()  # strides are not what these mutants test
        y = torch.empty_like(x2, memory_format=torch.contiguous_format)
        _online_softmax_mutant[(x2.shape[0],)](x2, y, x2.shape[1], x2.stride(0), y.stride(0), BLOCK_N=BLOCK,
                                               NO_RESCALE=no_rescale, NO_INF_GUARD=no_inf_guard, PAD_ZERO=pad_zero,
                                               SKIP_MASKED_BLOCKS=skip_masked_blocks, INT32_OFFSETS=int32_offsets)
        return y.reshape(x.shape)
    return softmax


def _probe(device: str) -> str | None:
    from kernels.triton_targets import _probe as triton_probe

    return triton_probe(device)


# float16 / float32 only: the interpreter's float32 -> bfloat16 store truncates (tests/test_findings.py).
_CAPS = Capabilities(dtypes=("float16", "float32"), devices=("cpu", "cuda"), max_length=4096)

TRITON_MUTANTS = [
    Mutant("triton-softmax-no-rescale-l", "softmax", "Triton: running sum l not rescaled when the max grows",
           "online-softmax rescale", "https://arxiv.org/abs/1805.02867", _launcher(no_rescale=True), _CAPS, "triton"),
    Mutant("triton-softmax-inf-minus-inf", "softmax", "Triton: exp(-inf - (-inf)) = NaN in lanes that saw only -inf",
           "NaN from -inf rescale", "https://github.com/flashinfer-ai/flashinfer/pull/4401",
           _launcher(no_inf_guard=True), _CAPS, "triton"),
    Mutant("triton-softmax-tail-pad-zero", "softmax", "Triton: ragged tail loaded with 0 instead of -inf",
           "ragged tail", "https://github.com/jax-ml/jax/issues/27224", _launcher(pad_zero=True), _CAPS, "triton"),
    Mutant("triton-softmax-masked-blocks-unstored", "softmax",
           "Triton: blocks of only -inf not stored (their zeros left to the allocator; fully masked rows too)",
           "unwritten output", "https://github.com/tile-ai/tilelang/pull/2461",
           _launcher(skip_masked_blocks=True), _CAPS, "triton"),
    # GPU only: on the CPU there is no stream to get wrong.
    Mutant("triton-softmax-default-stream", "softmax",
           "Triton: launched on the default stream, not the caller's current stream", "stream order",
           "https://github.com/openvdb/fvdb-core/pull/587", on_default_stream(_launcher()),
           _CAPS.with_(devices=("cuda",)), "triton"),
    # GPU only: its bug shows past 2**31 elements, which only the CUDA wide-offsets probe reaches.
    Mutant("triton-softmax-int32-row-offsets", "softmax",
           "Triton: row offsets formed in int32 (program_id * stride), wrapping past 2**31 elements",
           "32-bit offset overflow", "https://github.com/triton-lang/triton/issues/832",
           _launcher(int32_offsets=True), _CAPS.with_(devices=("cuda",)), "triton"),
]
TRITON_CONTROLS = [
    Mutant("control-triton-online-softmax", "softmax", "the Triton mutants' kernel with no bug", "control", "",
           _launcher(), _CAPS, "triton"),
]

for _m in TRITON_MUTANTS + TRITON_CONTROLS:
    register(Target(_m.name, _m.op, _m.fn, _m.caps, _m.description, _probe,
                    kind="control" if _m.bug_class == "control" else "mutant"))
