"""Registers the targets that ship with the suite (imported lazily by ``kernels.registry``).

Each entry pins one implementation and declares honestly what it supports and
the precision it computes in; the tolerance policy is derived from that claim.
"""

from __future__ import annotations

import functools

import torch

from kernels import reference
from kernels.registry import Target, register
from verify.capabilities import Capabilities

CPU_AND_CUDA = ("cpu", "cuda")


def _needs_cuda(device: str) -> str | None:
    if device.startswith("cuda") and not torch.cuda.is_available():
        return "CUDA is not available on this machine"
    return None


# ---- softmax ----------------------------------------------------------------------------

register(Target(
    "ref-online-softmax", "softmax",
    functools.partial(reference.online_softmax, block_size=32),
    Capabilities(devices=CPU_AND_CUDA),
    "the article's streaming softmax (running max m and sum l over blocks of 32), float32 statistics",
    _needs_cuda,
))
register(Target(
    "ref-two-pass-softmax", "softmax", reference.two_pass_softmax,
    Capabilities(devices=CPU_AND_CUDA),
    "safe two-pass softmax: max, then exp(x - max) / sum, float32 for 16-bit inputs",
    _needs_cuda,
))
register(Target(
    "torch.softmax", "softmax", reference.torch_softmax,
    Capabilities(devices=CPU_AND_CUDA),
    "torch.softmax(x, dim=-1)",
    _needs_cuda, kind="torch",
))

# ---- attention --------------------------------------------------------------------------

register(Target(
    "ref-naive-attention", "attention",
    functools.partial(reference.naive_attention, compute_dtype=torch.float32),
    Capabilities(devices=CPU_AND_CUDA, probs_rounded_to_input=False, dtypes=("float16", "bfloat16", "float32")),
    "materialized softmax(scale Q K^T + mask) V computed in float32 (upcast), rounded once",
    _needs_cuda,
))
register(Target(
    "ref-naive-attention-fp64", "attention",
    reference.naive_attention,
    Capabilities(devices=CPU_AND_CUDA, dtypes=("float64",), probs_rounded_to_input=False),
    "materialized attention in float64",
    _needs_cuda,
))
register(Target(
    "ref-blocked-attention", "attention",
    functools.partial(reference.blocked_attention, block_n=16),
    Capabilities(devices=CPU_AND_CUDA),
    "FlashAttention-style forward in torch: key blocks of 16, running m / l / acc in float32, P in the input dtype",
    _needs_cuda,
))
#: Found by this suite (tests/test_findings.py): the math backend masks by *adding* -inf to
#: the scores, so a NaN in a masked-out key still reaches the output (NaN + -inf = NaN), the
#: bug class of pytorch #101967.  Declared here so every other property is still checked.
SDPA_MASKED_NAN_LEAK = "leaks NaN from masked-out keys (additive -inf masking); see tests/test_findings.py"

register(Target(
    "sdpa-math", "attention", reference.sdpa_math,
    Capabilities(devices=CPU_AND_CUDA, probs_rounded_to_input=True, special_values=False,
                 notes=(SDPA_MASKED_NAN_LEAK,)),
    "torch.nn.functional.scaled_dot_product_attention pinned to the MATH backend",
    _needs_cuda, kind="torch",
))
