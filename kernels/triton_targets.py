"""Registers our Triton kernels (imported only when triton is importable).

On a machine without CUDA they run under the Triton interpreter (TRITON_INTERPRET=1,
set by the root conftest and by ``python -m verify`` before triton is imported).
The interpreter multiplies the raw bit patterns in a bfloat16 ``tl.dot`` (triton
#11584), so on the interpreter our attention declares no bfloat16: that cell is
shown as unsupported on CPU and verified on the GPU tier instead.
"""

from __future__ import annotations

import functools
import os

import torch

from kernels.registry import Target, register
from verify.capabilities import Capabilities

INTERPRETER = os.environ.get("TRITON_INTERPRET") == "1"
STD = ("float16", "bfloat16", "float32")


def _probe(device: str) -> str | None:
    if device.startswith("cuda"):
        if INTERPRETER:
            return "TRITON_INTERPRET=1 is set, so Triton kernels run on the CPU only"
        return None if torch.cuda.is_available() else "CUDA is not available on this machine"
    if not INTERPRETER:
        return "Triton kernels run on the CPU only under TRITON_INTERPRET=1 (set it before importing triton)"
    return None


# Our kernels return their log-sum-exp beside the output (``returns_lse``), so every check of
# them checks the LSE too: the statistic a backward pass or a split-KV merge consumes.  They
# document zeros for a row with nothing visible (``masked_rows="zero"``): with "either", a copy
# of the softmax whose shift lost its -inf guard gave NaN rows and passed (2026-12-03).
def _softmax(x, precise=True):
    from kernels.triton_softmax import softmax

    return softmax(x, precise=precise, return_lse=True)


def _attention(q, k, v, *, scale, causal=False, mask=None, allow_tf32=False):
    from kernels.triton_attention import attention

    return attention(q, k, v, scale=scale, causal=causal, mask=mask, allow_tf32=allow_tf32, return_lse=True)


DEVICES = ("cpu", "cuda")
ATTN_DTYPES = ("float16", "float32") if INTERPRETER else STD
INTERP_NOTE = ("bfloat16 tl.dot is broken in the Triton interpreter (triton #11584): bfloat16 is checked on the GPU",)
#: Found by this suite: the interpreter converts float32 -> bfloat16 by truncation, not
#: round-to-nearest-even (pinned in tests/test_findings.py), so a correct kernel's bfloat16
#: outputs are up to 1 ULP off there.  bfloat16 is verified on the GPU tier.
SOFTMAX_DTYPES = ("float16", "float32") if INTERPRETER else STD
#: The interpreter runs the precise float32 path's compensated sums (tl.reduce with a combine
#: function) one element at a time: one row of 65537 took 20 s (0.45 s on the fast path), and the
#: search's 16-bit index-width probe made the precise target CI's slowest (2026-12-01).  Rows up
#: to the long-row probe's 16385 stay; the fast target, whose addressing is the same, keeps the
#: index widths on the CPU, and the GPU tier checks both.
INTERPRETED_PRECISE_MAX_LENGTH = 16385

register(Target(
    "triton-softmax", "softmax", _softmax,
    Capabilities(dtypes=SOFTMAX_DTYPES, devices=DEVICES, returns_lse=True, masked_rows="zero",
                 max_length=INTERPRETED_PRECISE_MAX_LENGTH if INTERPRETER else 1 << 20,
                 notes=("the interpreter truncates float32 -> bfloat16: bfloat16 is checked on the GPU",
                        f"rows of at most {INTERPRETED_PRECISE_MAX_LENGTH} under the interpreter: 16-bit index "
                        "widths are checked by triton-softmax-fast here and on the GPU")
                 if INTERPRETER else ()),
    "our Triton streaming softmax: one pass when the row fits on chip, online m/l otherwise",
    _probe, kind="triton",
))
register(Target(
    "triton-softmax-fast", "softmax", functools.partial(_softmax, precise=False),
    Capabilities(dtypes=("float32",), devices=DEVICES, max_length=1 << 20, returns_lse=True, masked_rows="zero"),
    "our Triton streaming softmax, float32 fast path: hardware exp2, plain sum, reciprocal multiply",
    _probe, kind="triton",
))
register(Target(
    "triton-attention", "attention", functools.partial(_attention, allow_tf32=False),
    Capabilities(dtypes=ATTN_DTYPES, devices=DEVICES, head_dim_max=256, returns_lse=True, masked_rows="zero",
                 notes=INTERP_NOTE if INTERPRETER else ()),
    "our Triton FlashAttention forward (online softmax, float32 m/l/acc, P in the input dtype; IEEE fp32 dot)",
    _probe, kind="triton",
))
register(Target(
    "triton-attention-tf32", "attention", functools.partial(_attention, allow_tf32=True),
    Capabilities(dtypes=("float32",), devices=DEVICES, head_dim_max=256, dot_precision="tfloat32", returns_lse=True,
                 masked_rows="zero",
                 notes=("held to the TF32 bound: Q K^T and P V operands rounded to 11 bits",)),
    "our Triton FlashAttention forward, float32 with TF32 tensor-core dots",
    _probe, kind="triton",
))
