"""Tests of the device helpers in ``kernels/triton_support.py`` against float64.

``exp_diff`` is the one piece of real numerics the precise softmax paths rest on: its
error is their error budget's largest term.  Run on the CPU interpreter (set by the root
conftest when no CUDA device is visible) or, when one is, on the GPU.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.triton_support import divide_rn, exp_diff, interpreting  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
]

DEVICE = "cpu" if interpreting() else "cuda"
TINY = 2.0**-126  # smallest normal float32
SUB_ULP = 2.0**-149  # the spacing of float32 subnormals


@triton.jit
def _elementwise_kernel(A, B, Y, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    a = tl.load(A + offs, mask=offs < n)
    b = tl.load(B + offs, mask=offs < n)
    if OP == "exp_diff":
        y = exp_diff(a, b)
    else:
        y = divide_rn(a, b)
    tl.store(Y + offs, y, mask=offs < n)


def _run(op: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``op`` ("exp_diff" or "divide_rn") of a and b, elementwise, on the kernels' device."""
    a, b = a.to(DEVICE), b.to(DEVICE)
    y = torch.empty_like(a)
    block = 1024
    _elementwise_kernel[(triton.cdiv(a.numel(), block),)](a, b, y, a.numel(), OP=op, BLOCK=block)
    return y.cpu()


def _ulp(r: torch.Tensor) -> torch.Tensor:
    r32 = r.abs().float()
    return (torch.nextafter(r32, torch.full_like(r32, float("inf"))) - r32).double()


def test_exp_diff_is_within_one_ulp():
    # x - m over the whole range that matters (down to the subnormal results), m of any
    # size, and x - m itself rounded: the recovered subtraction error must keep every
    # normal result within 1 ulp and every subnormal one within 1 subnormal spacing.
    g = torch.Generator().manual_seed(20261130)
    n = 1 << 16
    m = ((torch.rand(n, generator=g, dtype=torch.float64) - 0.5) * 2e3).float()
    m[: n // 8] *= 1e-3  # m near 0, where x - m is mostly exact
    d = -(torch.rand(n, generator=g, dtype=torch.float64) ** 2) * 104  # dense near 0
    d[: n // 16] = -87.0 - torch.rand(n // 16, generator=g, dtype=torch.float64) * 17  # subnormal results
    x = (m.double() + d).float()
    x = torch.minimum(x, m)
    y = _run("exp_diff", x, m)
    exact = torch.exp(x.double() - m.double())
    normal = exact >= TINY
    ulps = (y.double() - exact).abs()[normal] / _ulp(exact[normal])
    assert normal.sum() > n // 2 and (~normal).sum() > n // 32
    assert ulps.max() <= 1.0, f"max error {ulps.max().item():.3f} ulp"
    assert ulps.mean() <= 0.35, f"mean error {ulps.mean().item():.3f} ulp"
    sub_err = (y.double() - exact).abs()[~normal] / SUB_ULP
    assert sub_err.max() <= 1.0, f"subnormal error {sub_err.max().item():.3f} spacings"


def test_exp_diff_special_values():
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([3.0, -inf, nan, inf, -inf, 1e30, -1e30, 5.0, 0.0])
    m = torch.tensor([3.0, 2.0, 2.0, inf, 0.0, 1e30, 1e30, 5.0 + 2**-20, -0.0])
    y = _run("exp_diff", x, m)
    assert y[0] == 1.0 and y[8] == 1.0  # x == m
    assert y[1] == 0.0 and y[4] == 0.0 and y[6] == 0.0  # -inf, and far below: exactly 0
    assert y[2].isnan() and y[3].isnan()  # NaN input; inf - inf
    assert y[5] == 1.0
    assert y[7] == torch.exp(torch.tensor(-(2.0**-20), dtype=torch.float64)).float()


def test_divide_rn_rounds_normal_quotients_to_nearest():
    g = torch.Generator().manual_seed(7)
    n = 1 << 14
    p = torch.rand(n, generator=g)
    p[: n // 8] *= 1e-38  # subnormal quotients too
    l = 1.0 + torch.rand(n, generator=g) * 1e4
    y = _run("divide_rn", p, l)
    expected = (p.double() / l.double()).float()  # one rounding of the exact quotient
    normal = expected >= TINY
    assert torch.equal(y[normal], expected[normal])
    # Subnormal quotients: the Newton step's residual is itself rounded there, so the last
    # bit may differ (measured: 1 of 2048 here); never by more than one spacing.
    assert ((y[~normal].double() - expected[~normal].double()).abs() <= SUB_ULP).all()
