"""Deviations the suite found in third-party implementations, pinned so we notice when they change."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from kernels import reference
from strategies.replay import case_from_dict
from verify import oracle
from verify.contracts import evaluate_attention
from verify.tolerance import ToleranceModel, attention_tolerance_units
from verify.capabilities import Capabilities


def test_sdpa_math_leaks_nan_from_a_causally_masked_key() -> None:
    """torch SDPA (math backend, CPU) masks by adding -inf, so NaN in an invisible key reaches row 0.

    Shrunk counterexample found by `python -m verify check --op attention --target sdpa-math`
    (bug class of pytorch #101967).  If torch fixes it, this test fails: then drop the
    special_values=False declaration of the sdpa-math target in kernels/builtin_targets.py.
    """
    q = torch.tensor([[[[0.5], [1.0]]]])
    k = torch.tensor([[[[1.0], [math.nan]]]])
    v = torch.tensor([[[[2.0], [3.0]]]])
    out = reference.sdpa_math(q, k, v, scale=1.0, causal=True)
    truth = oracle.attention_truth(q, k, v, scale=1.0, causal=True)
    assert truth.row_status[0, 0, 0] == oracle.ROW_FINITE  # query 0 cannot see key 1
    tol = attention_tolerance_units(q, v, truth, "float32", ToleranceModel.for_target(Capabilities(), "float32"))
    kinds = {v.kind for v in evaluate_attention(out, truth, tol).violations}
    assert "leak" in kinds
    # our own references keep the masked NaN out
    ok = reference.blocked_attention(q, k, v, scale=1.0, causal=True)
    assert not evaluate_attention(ok, truth, tol).violations


def test_triton_interpreter_truncates_float32_to_bfloat16() -> None:
    """Under TRITON_INTERPRET=1 a float32 -> bfloat16 store truncates instead of rounding to nearest even.

    Found by `python -m verify check --op softmax --target triton-softmax` (0.695 ULP on a
    2-element row, shrunk from a random search).  If it starts rounding correctly, this
    test fails: then re-enable bfloat16 for triton-softmax on the interpreter
    (kernels/triton_targets.py).
    """
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        import pytest

        pytest.skip("only meaningful under the Triton interpreter (no CUDA device here sets it)")
    import triton
    import triton.language as tl

    @triton.jit
    def store_bf16(x_ptr, y_ptr):
        tl.store(y_ptr, tl.load(x_ptr).to(tl.bfloat16))

    x = torch.tensor([0.8972459905598634], dtype=torch.float32)
    y = torch.empty(1, dtype=torch.bfloat16)
    store_bf16[(1,)](x, y)
    assert float(x.to(torch.bfloat16)) == 0.8984375  # torch rounds to nearest
    assert float(y) == 0.89453125  # the interpreter truncated


@pytest.mark.parametrize("scale", [-1.0, 0.0])
def test_torch_default_cpu_sdpa_causal_negative_or_zero_scale_gives_nan(scale: float) -> None:
    """torch's default CPU SDPA returns NaN for row 0 with is_causal and scale <= 0.

    Shrunk by the suite to Nq = Nk = 2, D = 1 while checking a user callable that
    wrapped the default SDPA (scale 0: a new-user review's callable, 2026-12-04, also in
    float16 and float64).  The math backend is right; if the default one is fixed, this
    test fails and the README's findings list should drop the entry.
    """
    q = torch.tensor([[[[0.3], [0.5]]]])
    k = torch.tensor([[[[1.0], [2.0]]]])
    v = torch.tensor([[[[1.5], [2.5]]]])
    got = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    want = reference.sdpa_math(q, k, v, scale=scale, causal=True)
    assert float(want[0, 0, 0, 0]) == 1.5
    assert math.isnan(float(got[0, 0, 0, 0]))


# One process per backend: a fault that loses the CUDA context must not take the test run with it.
_MISALIGNED_V_PROBE = """
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q = torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.float16)
k = torch.randn_like(q)
v = torch.randn(q.numel() + 1, device="cuda", dtype=torch.float16)[1:].view(q.shape)  # 2 bytes off
try:
    with sdpa_kernel(getattr(SDPBackend, sys.argv[1])):
        out = F.scaled_dot_product_attention(q, k, v)
        aligned = F.scaled_dot_product_attention(q, k, v.clone())
    torch.cuda.synchronize()
except Exception as e:
    try:
        torch.ones(1, device="cuda").add_(1).item()
        state = "raised, context alive"
    except Exception:
        state = "raised, context lost"
    print(state + ": " + str(e).strip().splitlines()[0])
else:
    print("ran, same as with an aligned copy" if torch.equal(out, aligned) else
          f"ran, differs from an aligned copy by {(out - aligned).abs().max().item():.3g}")
"""


@pytest.mark.gpu
@pytest.mark.parametrize("backend, outcome", [
    # torch 2.11 on the H200 (2026-11-29): flash has no pointer-alignment check and faults;
    # the class of pytorch #183484 (efficient backend, fp32, nonzero storage offsets).
    ("FLASH_ATTENTION", "raised, context lost: CUDA error: misaligned address"),
    # efficient checks Q and K ("p.query_ptr is not correctly aligned") but not V
    ("EFFICIENT_ATTENTION", "raised, context lost: CUDA error: misaligned address"),
    # cuDNN raises nothing and returns a different (wrong) result: silent corruption
    ("CUDNN_ATTENTION", "ran, differs from an aligned copy"),
    ("MATH", "ran, same as with an aligned copy"),
])
def test_sdpa_backend_given_a_misaligned_value_pointer(backend: str, outcome: str) -> None:
    """Found by ``verify run --device cuda`` (the ``misaligned`` layout); why the SDPA peers declare
    ``layout_alignment=16``.  Fails the day a backend changes how it treats such an input."""
    got = subprocess.run([sys.executable, "-c", _MISALIGNED_V_PROBE, backend], capture_output=True, text=True,
                         timeout=120)
    last = (got.stdout.strip().splitlines() or [""])[-1]
    assert last.startswith(outcome), got.stdout + got.stderr


def _sdpa(backend: str, q, k, v, **kw) -> torch.Tensor:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, backend)):
        return F.scaled_dot_product_attention(q, k, v, **kw)


@pytest.mark.gpu
def test_sdpa_flash_gives_nan_for_a_negative_scale() -> None:
    """Found by ``verify run --device cuda`` on the H200 (14:36 UTC, torch 2.11), shrunk to one
    query and one key: with scale = -1 the flash backend returns NaN where the math backend
    returns v.  A max over raw scores is not the max of scaled ones once the scale is negative."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 1, 16, generator=gen).to("cuda", torch.bfloat16) for _ in range(3))
    flash = _sdpa("FLASH_ATTENTION", q, k, v, scale=-1.0)
    math_ = _sdpa("MATH", q, k, v, scale=-1.0)
    assert torch.equal(math_, v)  # one key: the output is its value row
    assert bool(torch.isnan(flash).all())


@pytest.mark.gpu
def test_sdpa_flash_gives_nan_for_a_zero_scale() -> None:
    """Found by ``verify run --device cuda`` on the H200 (2026-11-30 05:19 UTC, torch 2.11), shrunk
    to one query and one key, D = 16, float16: with scale = 0 every score is 0 and softmax is
    uniform over the keys (one key: the output is its value row, as the math backend returns),
    but the flash backend returns NaN."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 1, 16, generator=gen).to("cuda", torch.float16) for _ in range(3))
    flash = _sdpa("FLASH_ATTENTION", q, k, v, scale=0.0)
    math_ = _sdpa("MATH", q, k, v, scale=0.0)
    assert torch.equal(math_, v)
    assert bool(torch.isnan(flash).all())


@pytest.mark.gpu
def test_sdpa_cudnn_gives_nan_for_a_zero_scale() -> None:
    """The same input class as the flash finding above, characterized on the H200 (05:23 UTC):
    cuDNN returns NaN for scale = 0 as well (it rejects one key, so two here); efficient and
    math return the mean of the value rows."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 2, 16, generator=gen).to("cuda", torch.float16) for _ in range(3))
    cudnn = _sdpa("CUDNN_ATTENTION", q, k, v, scale=0.0)
    efficient = _sdpa("EFFICIENT_ATTENTION", q, k, v, scale=0.0)
    mean = v.float().mean(-2, keepdim=True).expand_as(efficient)
    assert torch.allclose(efficient.float(), mean, rtol=0, atol=1e-3)
    assert bool(torch.isnan(cudnn).any())


@pytest.mark.gpu
@pytest.mark.parametrize("padded", ["q", "k", "v"])
@pytest.mark.parametrize("head_dim, row_stride, reads_gaps", [
    (16, 19, True), (16, 17, True), (64, 65, True), (96, 99, True),
    (16, 24, False), (96, 104, False),
])
def test_sdpa_cudnn_reads_the_gaps_of_padded_rows(padded: str, head_dim: int, row_stride: int,
                                                  reads_gaps: bool) -> None:
    """Found by ``verify run --device cuda`` on the H200 (2026-11-29 14:36 UTC, torch 2.11), shrunk to
    Nq = Nk = 2, D = 16: V a view whose rows are 19 elements apart (a sliced, wider last dim)
    with NaN in the gaps, and cuDNN returns NaN, so it reads the gaps: a silently wrong result
    for any such input, visible only because the suite poisons the gaps.  The search met it
    again for Q (D = 96, rows 99 apart, the ``head-dim-padded`` layout, 2026-12-02); a sweep
    the same day (fp16 and bf16, Q, K or V padded, 8 queries and keys) saw NaN for every row
    stride that is not a multiple of 8 elements (17, 19, 65, 99) and an output bitwise equal
    to a contiguous copy's for every multiple of 8 (24, 72, 104, 136)."""
    gen = torch.Generator().manual_seed(0)
    t = {n: torch.randn(1, 2, 8, head_dim, generator=gen).to("cuda", torch.float16) for n in "qkv"}
    wide = torch.full((1, 2, 8, row_stride), float("nan"), dtype=torch.float16, device="cuda")
    wide[..., :head_dim] = t[padded]
    t[padded] = wide[..., :head_dim]
    cudnn = _sdpa("CUDNN_ATTENTION", t["q"], t["k"], t["v"])
    copy = _sdpa("CUDNN_ATTENTION", *(t[n].contiguous() for n in "qkv"))
    assert torch.isfinite(copy).all() and torch.isfinite(_sdpa("MATH", t["q"], t["k"], t["v"])).all()
    if reads_gaps:
        assert bool(torch.isnan(cudnn).any())
    else:
        assert torch.equal(cudnn, copy)


@pytest.mark.gpu
def test_sdpa_cudnn_refuses_head_dims_that_are_not_multiples_of_8() -> None:
    """Measured on the H200 (2026-12-02, torch 2.11): pinned to cuDNN, SDPA raises "No available
    kernel" for every head dim from 1 to 127 that is not a multiple of 8 (fp16 and bf16, 64
    queries and keys, contiguous), and runs every multiple of 8; hence ``head_dim_multiple=8``
    on ``sdpa-cudnn``.  The search had drawn D = 5 and 24-with-a-misaligned-V cases, which
    raised as drawn and as contiguous copies alike."""
    for d in (1, 5, 12, 20, 100, 127):
        q = torch.randn(1, 2, 64, d, device="cuda", dtype=torch.bfloat16)
        with pytest.raises(RuntimeError, match="No available kernel"):
            _sdpa("CUDNN_ATTENTION", q, q, q)
    for d in (8, 16, 24, 104, 128):
        q = torch.randn(1, 2, 64, d, device="cuda", dtype=torch.bfloat16)
        assert torch.isfinite(_sdpa("CUDNN_ATTENTION", q, q, q)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_cudnn_gives_values_for_a_query_row_with_no_visible_key(dtype: torch.dtype) -> None:
    """Found by a search of sdpa-cudnn on the H200 (2026-12-01 06:05 UTC, torch 2.11; causal with a
    single-unmasked mask, Nq = 119, Nk = 609): a query row whose boolean mask hides every key
    comes back as finite, nonzero numbers, neither 0 (what efficient and math return, PyTorch's
    rule since pytorch #133882) nor NaN.  Characterized at about 06:23 UTC on aligned, contiguous
    inputs from Nq = Nk = 2 to 119 x 609, both 16-bit dtypes, causal or not; the other rows
    agree with math.  Shown here with Nq = Nk = 16, D = 64, query 1 masked out."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 64, generator=gen).to("cuda", dtype) for _ in range(3))
    mask = torch.ones(16, 16, dtype=torch.bool, device="cuda")
    mask[1] = False
    cudnn = _sdpa("CUDNN_ATTENTION", q, k, v, attn_mask=mask)
    math_ = _sdpa("MATH", q, k, v, attn_mask=mask)
    assert bool((math_[:, :, 1] == 0).all())
    assert bool((_sdpa("EFFICIENT_ATTENTION", q, k, v, attn_mask=mask)[:, :, 1] == 0).all())
    assert torch.isfinite(cudnn).all() and bool((cudnn[:, :, 1] != 0).any())
    others = torch.ones(16, dtype=torch.bool)
    others[1] = False
    assert torch.allclose(cudnn[:, :, others].float(), math_[:, :, others].float(), rtol=0, atol=2e-2)


# One process a mask: the fault loses the CUDA context.  As measured: the mask, kept as given or
# made into the full (B, Hq, Nq, Nk) tensor, then cuDNN; the last line says what happened.
_KEY_BROADCAST_MASK_PROBE = """
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[sys.argv[1]]
shape = tuple(int(s) for s in sys.argv[2].split("x"))
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 2, 64, 64, generator=g).to("cuda", dtype) for _ in range(3))
mask = torch.rand(*shape, generator=g) < 0.9
mask.view(-1)[0] = True
mask = mask.to("cuda")
if sys.argv[3] == "materialized":
    mask = mask.expand(1, 2, 64, 64).contiguous()
try:
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.1)
    torch.cuda.synchronize()
    print("ran")
except Exception as e:
    print("raised: " + str(e).strip().splitlines()[0])
"""


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", ["1x1x64x1", "64x1", "1x2x64x1"])
@pytest.mark.parametrize("mask, outcome", [
    ("as given", "raised: CUDA error: misaligned address"),
    ("materialized", "ran"),
])
def test_sdpa_cudnn_faults_on_a_mask_broadcast_over_the_keys(dtype: str, shape: str, mask: str, outcome: str) -> None:
    """Found by ``verify run --device cuda --jobs 4`` on the H200 (2026-12-04 03:17 UTC, torch 2.11,
    float16): a boolean mask of shape (B, 1, Nq, 1) -- one flag a query, SDPA broadcasting it over
    the heads and keys -- makes the cuDNN backend fault with "misaligned address", and the CUDA
    context is lost.  The found input (B = 2, Hq = 6, Nk = 2999, D = 72, K broadcast over the
    batch, V sliced from a longer buffer) reduced on the same machine, one change a process:
    every variant with that mask shape faulted (Nk = 16, 64, 2999, 3000; K and V contiguous;
    B = Hq = 1, Nq = Nk = D = 64), the same mask made into a full (B, Hq, Nq, Nk) tensor ran,
    and expanded to it with stride 0 was refused ("No available kernel").  On 2026-12-04 at
    17:54 UTC the other shapes of a mask over the queries alone, (Nq, 1) and (B, Hq, Nq, 1),
    faulted the same way, in bfloat16 as in float16 (Hq = 2).  Why sdpa-cudnn declares
    ``mask_key_broadcast=False``.  Fails the day the backend changes how it treats them."""
    got = subprocess.run([sys.executable, "-c", _KEY_BROADCAST_MASK_PROBE, dtype, shape, mask], capture_output=True,
                         text=True, timeout=120)
    last = (got.stdout.strip().splitlines() or [""])[-1]
    assert last == outcome, got.stdout + got.stderr


@pytest.mark.gpu
def test_sdpa_efficient_flushes_float32_subnormals() -> None:
    """Found by ``verify run --device cuda`` on the H200 (16:47 UTC, torch 2.11): with one query
    and one key the output is V's row, but the efficient backend returns 0 for a float32 V
    element of -3.98e-42 (subnormal): it flushes subnormals to zero (error 2840 u*cond against
    a tolerance of 1.01).  The math backend keeps them."""
    gen = torch.Generator().manual_seed(1)
    q, k = (torch.randn(1, 1, 1, 16, generator=gen).to("cuda") for _ in range(2))
    v = torch.randn(1, 1, 1, 16, generator=gen).to("cuda")
    v[..., 7] = -3.9796876386824805e-42
    assert 0 < abs(float(v[..., 7])) < torch.finfo(torch.float32).tiny  # subnormal, kept by the copy
    efficient = _sdpa("EFFICIENT_ATTENTION", q, k, v)
    assert torch.equal(_sdpa("MATH", q, k, v), v)
    assert float(efficient[..., 7]) == 0.0
    normal = torch.arange(16, device="cuda") != 7
    assert torch.allclose(efficient[..., normal], v[..., normal], rtol=1e-6, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("v8", [(-0.5, -0.25), (1.5, -1.25)], ids=["subnormal-values", "normal-values"])
def test_sdpa_cudnn_flushes_bfloat16_outputs_below_the_smallest_normal(v8: tuple[float, float]) -> None:
    """Found by ``verify run --device cuda`` on the H200 (2026-12-04 ~18:03 UTC, torch 2.11,
    sdpa-cudnn-lse bfloat16: got -0.0 where the exact output is -1.13e-38, 123 u*cond against a
    tolerance of 1.49).  Probed at 18:08 UTC with Nq = Nk = 2, D = 64: where an output lies below
    bfloat16's (and float32's) smallest normal, cuDNN returns 0, whether V's entries there are
    subnormal or small normals (1.5 and -1.25 times the smallest normal, whose weighted mean is
    subnormal); math, flash and efficient return the subnormal result.  float16 outputs of 2e-5
    (subnormal in float16, normal in float32) are kept by all four.  The attention tolerance
    admits no such flush (only TF32's flush of V entries), as for efficient's float32 one above."""
    tiny = torch.finfo(torch.bfloat16).tiny
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 2, 64, generator=gen).to("cuda", torch.bfloat16) for _ in range(3))
    v[..., 8] = torch.tensor([v8[0] * tiny, v8[1] * tiny], dtype=torch.bfloat16)
    exact = _sdpa("MATH", q.double(), k.double(), v.double())[..., 8]
    assert bool(((exact.abs() < tiny) & (exact != 0)).all())  # subnormal, in bfloat16 and float32
    others = torch.arange(64, device="cuda") != 8
    math_ = _sdpa("MATH", q, k, v)
    cudnn = _sdpa("CUDNN_ATTENTION", q, k, v)
    assert bool((math_[..., 8] != 0).all()) and bool((_sdpa("FLASH_ATTENTION", q, k, v)[..., 8] != 0).all())
    assert bool((cudnn[..., 8] == 0).all())
    assert torch.allclose(cudnn[..., others].float(), math_[..., others].float(), rtol=0, atol=2e-2)


@pytest.mark.gpu
def test_sdpa_flash_refuses_causal_with_fewer_keys_than_queries() -> None:
    """Found by ``verify run --device cuda`` on the H200 (16:47 UTC, torch 2.11): causal with
    Nq = 2, Nk = 1 raises "No available kernel" when pinned to the flash backend (its warning:
    is_causal needs seqlen_q == seqlen_k).  The sdpa-flash target declares causal_square_only,
    so the search no longer draws such inputs for it; this test notices if torch lifts it."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 2, 16, generator=gen).to("cuda", torch.float16)
    k, v = (torch.randn(1, 1, 1, 16, generator=gen).to("cuda", torch.float16) for _ in range(2))
    with pytest.raises(RuntimeError, match="No available kernel"):
        _sdpa("FLASH_ATTENTION", q, k, v, is_causal=True)
    square = torch.randn(1, 1, 2, 16, generator=gen).to("cuda", torch.float16)
    assert torch.isfinite(_sdpa("FLASH_ATTENTION", q, square, square, is_causal=True)).all()


@pytest.mark.gpu
def test_sdpa_efficient_refuses_a_mask_with_a_non_unit_last_stride() -> None:
    """Found by ``verify run --device cuda`` on the H200 (22:58 UTC, torch 2.11), shrunk to
    Nq = Nk = 2, D = 16: a boolean mask laid out transposed (last stride 2, same values)
    makes the efficient backend raise "No available kernel"; a contiguous copy runs, and
    the math backend takes the transposed one (torch's warning: the fused GPU backends need
    the mask's last stride to be 1, the CPU does not).  The sdpa-efficient target declares
    ``mask_unit_stride``, so the search draws no such masks for it; this test notices if
    torch lifts the limit."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 2, 16, generator=gen).to("cuda", torch.float16) for _ in range(3))
    mask = torch.tensor([[True, False], [True, True]], device="cuda").t().contiguous().t()
    assert mask.stride(-1) != 1
    with pytest.raises(RuntimeError, match="No available kernel"):
        _sdpa("EFFICIENT_ATTENTION", q, k, v, attn_mask=mask)
    dense = _sdpa("EFFICIENT_ATTENTION", q, k, v, attn_mask=mask.contiguous())
    assert torch.allclose(dense.float(), _sdpa("MATH", q, k, v, attn_mask=mask).float(), atol=2e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"])
def test_sdpa_fused_backends_refuse_a_dim_major_value(backend: str) -> None:
    """Measured on the H200 (2026-12-01, torch 2.11): Q, K or V stored dim-major (the head dim
    at stride N, as the strategies' ``dim-major`` layout) makes each fused backend raise "No
    available kernel"; the math backend takes it.  sdpa-cudnn declares ``unit_last_stride``
    (flash and efficient are kept to unit strides by ``layout_alignment``); this test notices
    if torch lifts the limit."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 64, generator=gen).to("cuda", torch.float16) for _ in range(3))
    v_dim_major = v.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert v_dim_major.stride(-1) == 64 and torch.equal(v_dim_major, v)
    with pytest.raises(RuntimeError, match="No available kernel"):
        _sdpa(backend, q, k, v_dim_major)
    assert torch.allclose(_sdpa("MATH", q, k, v_dim_major).float(), _sdpa("MATH", q, k, v).float())


@pytest.mark.gpu
def test_sdpa_efficient_refuses_a_mask_broadcast_over_the_keys() -> None:
    """Found by ``verify run --device cuda`` on the H200 (2026-12-01, torch 2.11), as drawn:
    Nq = 1, Nk = 17, D = 16, float32, a (Nq, 1) mask (query padding, broadcastable as SDPA's
    documentation allows).  The efficient backend raises "(*bias): last dimension must be
    contiguous" (it expands the mask over the keys with stride 0); math takes it.  sdpa-efficient
    declares ``mask_key_broadcast=False``; this test notices if torch lifts the limit."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 1, 16, generator=gen).to("cuda")
    k, v = (torch.randn(1, 1, 17, 16, generator=gen).to("cuda") for _ in range(2))
    mask = torch.ones(1, 1, dtype=torch.bool, device="cuda")
    with pytest.raises(RuntimeError, match="last dimension must be contiguous"):
        _sdpa("EFFICIENT_ATTENTION", q, k, v, attn_mask=mask)
    assert torch.allclose(_sdpa("MATH", q, k, v, attn_mask=mask), _sdpa("MATH", q, k, v), atol=1e-6)


@pytest.mark.gpu
def test_sdpa_efficient_refuses_an_odd_stride_on_a_size_one_dim() -> None:
    """Found by ``verify run --device cuda`` on the H200 (2026-12-01, torch 2.11), as drawn:
    float16, Nq = Nk = 1, D = 16, K a view of a wider last dim (row stride 19 elements).  torch
    calls that K contiguous (its only row has no neighbour), yet the efficient backend raises
    "cutlassF: no kernel found to launch!".  ``layouts.is_aligned`` now counts the strides of
    size-1 dims, so the search no longer draws it for sdpa-efficient."""
    gen = torch.Generator().manual_seed(0)
    q, v = (torch.randn(1, 1, 1, 16, generator=gen).to("cuda", torch.float16) for _ in range(2))
    k = torch.randn(1, 1, 1, 19, generator=gen).to("cuda", torch.float16)[..., :16]
    assert k.is_contiguous() and k.stride(-2) == 19
    with pytest.raises(RuntimeError, match="no kernel found to launch"):
        _sdpa("EFFICIENT_ATTENTION", q, k, v)
    assert torch.allclose(_sdpa("MATH", q, k, v).float(), _sdpa("MATH", q, k.contiguous(), v).float())


def _many_pairs(batch: int, heads: int) -> tuple[torch.Tensor, ...]:
    """Q, K, V of ``batch`` x ``heads`` (batch, head) pairs of 4 queries and keys, D = 16, float16."""
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(batch, heads, 4, 16, generator=gen).to("cuda", torch.float16) for _ in range(3))


@pytest.mark.gpu
@pytest.mark.parametrize("backend, batch, heads, refused", [
    ("FLASH_ATTENTION", 65536, 1, True), ("FLASH_ATTENTION", 1, 65536, True), ("FLASH_ATTENTION", 256, 256, False),
    ("EFFICIENT_ATTENTION", 1, 65536, True), ("EFFICIENT_ATTENTION", 65536, 1, False),
    ("CUDNN_ATTENTION", 65536, 1, False), ("CUDNN_ATTENTION", 1, 65536, False),
])
def test_sdpa_backends_past_a_grid_axis(backend: str, batch: int, heads: int, refused: bool) -> None:
    """Found by the grid-heads probe's cases on the H200 (2026-12-01, torch 2.11): 65536 on one
    axis of a CUDA grid is one past its limit.  Flash raises "CUDA error: invalid argument" for
    a batch or a head count of 65536 (pytorch #146704, closed), efficient for 65536 heads (pytorch
    #142228, open) but not for a batch of 65536, cuDNN for neither; the context survives.  The
    peers declare ``max_batch`` / ``max_heads``; this test notices if torch lifts a limit."""
    q, k, v = _many_pairs(batch, heads)
    if refused:
        with pytest.raises(RuntimeError, match="invalid argument"):
            _sdpa(backend, q, k, v)
        torch.cuda.synchronize()
        return
    out = _sdpa(backend, q, k, v)
    assert torch.allclose(out.float(), _sdpa("MATH", q, k, v).float(), atol=2e-3)


@pytest.mark.gpu
def test_compiled_flex_attention_past_a_grid_axis() -> None:
    """Found as above: compiled FlexAttention raises "CUDA driver error: invalid argument" for
    65536 (batch, head) pairs, all on the batch or split 256 x 256; 65535 pass.  flex-attention
    declares ``max_pairs``.  (In that run the later shapes passed: dynamo had hit its limit of 8
    recompiles and run flex_attention eager, which kernels.peer_targets now raises.)"""
    from kernels.peer_targets import flex

    for batch, heads in ((65536, 1), (256, 256)):
        q, k, v = _many_pairs(batch, heads)
        with pytest.raises(RuntimeError, match="invalid argument"):
            flex(q, k, v, scale=0.25)
        torch.cuda.synchronize()
    q, k, v = _many_pairs(65535, 1)
    assert torch.allclose(flex(q, k, v, scale=0.25).float(), _sdpa("MATH", q, k, v, scale=0.25).float(), atol=2e-3)


# The counterexample `verify run --device cuda` saved on the H200 (2026-11-30 00:34 UTC), as its spec:
# it rebuilds bit for bit from the seed.
_FLASH_LARGE_SCORES = {
    "op": "attention", "dtype": "float16", "batch": 1, "heads_q": 1, "heads_kv": 1, "seq_q": 127, "seq_k": 127,
    "head_dim": 256, "scale": None, "causal": False, "mask": None, "mask_shape": "qk", "mask_layout": "contiguous",
    "q": {"kind": "normal", "scale": 200.0}, "k": {"kind": "cancellation", "scale": 0.09765625, "offset": 100.0},
    "v": {"kind": "normal"}, "specials": [], "layouts": ["contiguous", "contiguous", "contiguous"], "seed": 0,
}


@pytest.mark.gpu
def test_sdpa_flash_weights_do_not_sum_to_one_for_large_scores() -> None:
    """Found by ``verify run --device cuda`` on the H200 (00:34 UTC 2026-11-30, torch 2.11) as a
    ``range`` violation: an fp16 output 4 ulps below the smallest value in its column, which no
    softmax weighting reaches.  The scores are large (|s| up to 7.4e4: K sits at 100 with a
    spread of 0.1, Q has a spread of 200) but differ by ~100 within a row.  With V = 1 the
    output is the sum of the weights: flash returns 0.998..1.0039 where rounding P to fp16
    allows 1 +- 2^-11; efficient and math return 1.  Softmax is shift-invariant, and with K
    centred flash returns 1 too, so the error comes from the scores' size alone.  A sweep
    (README, "Findings so far") saw it at D = 256 only, growing with the scores' size."""
    x = case_from_dict(_FLASH_LARGE_SCORES).build("cuda")
    ones = torch.ones_like(x.v)

    def weight_sum_error(backend: str, k: torch.Tensor) -> float:
        return float((_sdpa(backend, x.q, k, ones, scale=x.scale).float() - 1).abs().max())

    assert weight_sum_error("FLASH_ATTENTION", x.k) > 2e-3
    assert weight_sum_error("MATH", x.k) <= 2.0**-10 and weight_sum_error("EFFICIENT_ATTENTION", x.k) <= 2.0**-10
    centred = x.k - x.k.double().mean(-2, keepdim=True).to(x.k.dtype)
    assert weight_sum_error("FLASH_ATTENTION", centred) <= 2.0**-10


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_efficient_gives_an_lse_of_0_for_a_query_row_with_no_visible_key(dtype: torch.dtype) -> None:
    """Found by ``verify check --op attention --target sdpa-efficient-lse --device cuda`` on the
    H200 (2026-12-03, torch 2.11), shrunk to Nq = Nk = 1 with the one key masked: the efficient
    backend's private op returns an output row of 0 (right) and a log-sum-exp of 0, where the
    log of an empty sum is -inf; cuDNN returns -inf.  Its own backward is unharmed (exp(-inf - 0)
    is 0), but a split-KV or ring-attention merge weighs each partial output by exp(lse): an
    empty partial with lse = 0 takes weight from the partials that saw keys.  On the other
    rows both LSEs are natural logs, within 1e-5 of float64's."""
    from kernels.peer_targets import sdpa_op_with_lse

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 64, generator=gen).to("cuda", dtype) for _ in range(3))
    mask = torch.ones(16, 16, dtype=torch.bool, device="cuda")
    mask[1] = False
    scores = (q.double() @ k.double().transpose(-1, -2) * 0.125).masked_fill(~mask, -math.inf)
    exact = torch.logsumexp(scores, -1)
    others = torch.arange(16) != 1
    out, lse = sdpa_op_with_lse(q, k, v, scale=0.125, mask=mask, backend="efficient")
    assert bool((out[:, :, 1] == 0).all()) and bool((lse[:, :, 1] == 0).all())
    assert torch.allclose(lse[:, :, others].double(), exact[:, :, others], rtol=1e-5, atol=1e-5)
    _, lse_cudnn = sdpa_op_with_lse(q, k, v, scale=0.125, mask=mask, backend="cudnn")
    assert bool((lse_cudnn[:, :, 1] == -math.inf).all())
    assert torch.allclose(lse_cudnn[:, :, others].double(), exact[:, :, others], rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_cudnn_returns_none_for_an_empty_batch(dtype: torch.dtype) -> None:
    """Found by the empty-batch probe on an H100 (2026-12-06 18:05 UTC, torch 2.11.0+cu130):
    pinned to the cuDNN backend, ``F.scaled_dot_product_attention`` on Q, K, V of batch 0
    returns None, not an empty tensor (measured for (0, 1, 2, 8) and (0, 2, 3, 16) in float16,
    and through the sdpa-cudnn target in bfloat16), and its private op returns a tuple of
    Nones; flash and efficient return the empty output.  sdpa-cudnn (and sdpa-cudnn-lse)
    declare ``empty_inputs=False``; this test notices if torch changes it."""
    q = torch.randn(0, 1, 2, 8, device="cuda", dtype=dtype)
    assert _sdpa("CUDNN_ATTENTION", q, q, q) is None
    assert torch.ops.aten._scaled_dot_product_cudnn_attention(q, q, q, None, True, 0.0, False, False)[0] is None
    for backend in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION"):
        assert _sdpa(backend, q, q, q).shape == q.shape


@pytest.mark.gpu
def test_flex_attention_returns_no_lse_for_an_empty_batch() -> None:
    """Found by the empty-batch probe on an H100 (2026-12-06 18:05 UTC, torch 2.11.0+cu130):
    compiled FlexAttention asked for ``return_lse=True`` gives None for the LSE of a batch of 0
    (Q, K, V of (0, 1, 1, 16), in float16, bfloat16 and float32), where a batch of 1 gives a
    tensor.  flex-attention declares ``empty_inputs=False``; this test notices if torch changes
    it."""
    from kernels.peer_targets import flex

    q = torch.randn(0, 1, 1, 16, device="cuda", dtype=torch.float16)
    assert flex(q, q, q, scale=0.25, return_lse=True)[1] is None
    one = torch.randn(1, 1, 1, 16, device="cuda", dtype=torch.float16)
    assert flex(one, one, one, scale=0.25, return_lse=True)[1].shape == (1, 1, 1)
