"""The SDPA backends' LSE targets (``sdpa-*-lse``): what their wrappers hand the private ops.

The ops themselves run on CUDA only (the GPU tier and the campaign check them); here, on the
CPU, the two pieces of the wrappers that could get the contract wrong: the boolean mask turned
into an additive bias, and the head dim padded for flash.
"""

from __future__ import annotations

import math

import pytest
import torch

from kernels.peer_targets import _bias_from_mask, _pad_head_dim
from kernels.reference import key_visibility
from kernels.registry import get_target


@pytest.mark.parametrize("mask_shape", [(5, 7), (5, 1), (2, 1, 5, 7), (1, 3, 5, 7), (1, 1, 1, 7)])
@pytest.mark.parametrize("causal", [False, True])
def test_the_bias_is_zero_where_a_key_is_visible_and_minus_inf_elsewhere(mask_shape, causal) -> None:
    gen = torch.Generator().manual_seed(sum(mask_shape) + causal)
    q, k = torch.zeros(2, 3, 5, 4, dtype=torch.float16), torch.zeros(2, 3, 7, 4, dtype=torch.float16)
    mask = torch.rand(mask_shape, generator=gen) > 0.4
    bias = _bias_from_mask(mask, causal, q, 7)
    visible = key_visibility(q, k, causal, mask).expand(2, 3, 5, 7)
    assert bias.shape == (2, 3, 5, 7) and bias.dtype == torch.float16
    assert torch.equal(bias == 0, visible) and torch.equal(bias == -math.inf, ~visible)
    # Rows padded to 16 elements (what the efficient kernel reads), broadcast dims kept at stride 0.
    assert bias.stride(-2) % 16 == 0 or bias.shape[-2] == 1 or bias.stride(-2) == 0
    folded = torch.broadcast_shapes(mask_shape, (5, 7)) if causal else mask_shape  # causal widens the mask
    assert all(st == 0 for n, st in zip((1,) * (4 - len(folded)) + tuple(folded), bias.stride()) if n == 1)


def test_padding_the_head_dim_keeps_the_columns_and_adds_zeros() -> None:
    t = torch.randn(1, 2, 3, 13)
    p = _pad_head_dim(t, 8)
    assert p.shape == (1, 2, 3, 16) and torch.equal(p[..., :13], t) and not p[..., 13:].any()
    assert _pad_head_dim(p, 8) is p


def test_each_lse_target_declares_its_public_twins_support_and_returns_lse() -> None:
    for name in ("sdpa-flash", "sdpa-efficient", "sdpa-cudnn"):
        public, private = get_target(name).caps, get_target(f"{name}-lse").caps
        assert private.returns_lse and not public.returns_lse
        # the wrapper pads flash's and efficient's head dims (efficient alone refuses D % 4 != 0)
        multiple = public.head_dim_multiple if name == "sdpa-cudnn" else 1
        assert private.head_dim_multiple == multiple
        restored = private.with_(returns_lse=False, notes=public.notes, head_dim_multiple=public.head_dim_multiple)
        assert restored == public


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["flash", "efficient", "cudnn"])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_each_backend_returns_the_natural_log_sum_exp_of_the_suites_scores(backend: str, causal: bool) -> None:
    """On CUDA: GQA (4 query heads over 2), head dim 13 (the wrapper pads it to 16 for flash
    and efficient) or 40 for cuDNN (multiples of 8 only), a mask for efficient and cuDNN: the
    wrapper's output and LSE against float64."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA: SDPA's private backend ops have no CPU kernels")
    from kernels.peer_targets import sdpa_op_with_lse

    gen = torch.Generator().manual_seed(1)
    d = 13 if backend != "cudnn" else 40
    q = torch.randn(2, 4, 24, d, generator=gen).to("cuda", torch.float16)
    k, v = (torch.randn(2, 2, 24, d, generator=gen).to("cuda", torch.float16) for _ in range(2))
    mask = None if backend == "flash" else (torch.rand(24, 24, generator=gen) > 0.3).to("cuda")
    out, lse = sdpa_op_with_lse(q, k, v, scale=0.3, causal=causal, mask=mask, backend=backend)
    kk, vv = (t.double().repeat_interleave(2, 1) for t in (k, v))
    s = q.double() @ kk.transpose(-1, -2) * 0.3
    visible = key_visibility(q, k, causal, mask)
    s = s if visible is None else s.masked_fill(~visible, -math.inf)
    exact = torch.logsumexp(s, -1)
    seen = torch.isfinite(exact)
    assert out.shape == q.shape and lse.shape == q.shape[:-1] and lse.dtype == torch.float32
    assert torch.allclose(lse.double()[seen], exact[seen], rtol=1e-5, atol=1e-5)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    assert torch.allclose(out.double()[seen], (p @ vv)[seen], atol=4e-3)
