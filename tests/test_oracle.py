"""Self-tests of the certified oracle: closed forms, agreement with pure mpmath, certification."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verify import mp_reference, oracle
from verify.dtypes import FORMATS, get_format
from verify.rounding import ulp, ulp_of_exact

TARGETS = ("float16", "bfloat16", "float32", "float64")


def exact_error(cert: oracle.Certified, index, exact) -> float:
    """|hi + lo - exact| for an mpf ``exact``, evaluated in mpmath."""
    with mpmath.mp.workprec(300):
        return float(abs(mpmath.mpf(float(cert.hi[index])) + mpmath.mpf(float(cert.lo[index])) - exact))


def adversarial_rows(gen: torch.Generator, rows: int, n: int) -> torch.Tensor:
    """A mix of the row kinds that stress the fast path's bound."""
    x = torch.randn(rows, n, generator=gen, dtype=torch.float64)
    kinds = torch.randint(0, 7, (rows,), generator=gen)
    scale = 10 ** torch.empty(rows, 1).uniform_(-6, 4, generator=gen).double()
    x = x * scale
    x[kinds == 1] += 3e4  # large offset, tiny spread: cancellation in x - max
    x[kinds == 2, : n // 2] = -math.inf  # masked half
    x[kinds == 3] = x[kinds == 3] * 0 + 5.0  # constant rows: ties everywhere
    x[kinds == 4] -= 2e4  # every logit very negative
    x[kinds == 5, 0] += 800  # one dominant element: the rest underflow below float64
    return x


def test_uniform_rows_are_exactly_one_over_n() -> None:
    for n in (1, 2, 3, 7, 64, 1000):
        t = oracle.softmax_truth(torch.full((1, n), 3.25, dtype=torch.float32))
        for j in (0, n - 1):
            assert exact_error(t.probs, (0, j), mpmath.mpf(1) / n) <= float(t.probs.bound[0, j])
        assert exact_error(t.lse, (0,), mpmath.mpf(3.25) + mpmath.log(n)) <= float(t.lse.bound[0])


@given(a=st.floats(-80, 80), b=st.floats(-80, 80))
@settings(max_examples=200)
def test_two_element_rows_are_sigmoids(a: float, b: float) -> None:
    x = torch.tensor([[a, b]], dtype=torch.float32)
    t = oracle.softmax_truth(x, "float64")
    xa, xb = (float(v) for v in x[0])
    with mpmath.mp.workprec(200):
        exact = 1 / (1 + mpmath.exp(mpmath.mpf(xb) - mpmath.mpf(xa)))
    assert exact_error(t.probs, (0, 0), exact) <= float(t.probs.bound[0, 0])


def test_one_dominant_element() -> None:
    x = torch.zeros(1, 50, dtype=torch.float32)
    x[0, 7] = 200.0
    t = oracle.softmax_truth(x)
    with mpmath.mp.workprec(200):
        exact = 1 / (1 + 49 * mpmath.exp(-200))
        small = mpmath.exp(-200) * exact
    assert exact_error(t.probs, (0, 7), exact) <= float(t.probs.bound[0, 7])
    assert exact_error(t.probs, (0, 0), small) <= float(t.probs.bound[0, 0])


@pytest.mark.parametrize("prec", [128, 200])
def test_fast_path_agrees_with_pure_mpmath(prec: int) -> None:
    """Thousands of random and adversarial rows: every fast-path value is inside its bound."""
    gen = torch.Generator().manual_seed(prec)
    checked = 0
    for n in (1, 2, 5, 33, 129):
        x = adversarial_rows(gen, 300 if n < 100 else 60, n).to(torch.float32)
        t = oracle.softmax_truth(x, "float32")
        for r in range(x.shape[0]):
            ref = mp_reference.softmax_row(x[r].double().tolist(), prec)
            for j in range(n):
                slack = float(abs(ref.values[j])) * ref.rel_bound + mp_reference.UNDERFLOW_ABS
                assert exact_error(t.probs, (r, j), ref.values[j]) <= float(t.probs.bound[r, j]) + slack
                checked += 1
            slack = float(abs(ref.lse)) * ref.rel_bound
            assert exact_error(t.lse, (r,), ref.lse) <= float(t.lse.bound[r]) + slack
    assert checked > 10_000


@pytest.mark.parametrize("target", TARGETS)
def test_certified_resolution_is_met(target: str) -> None:
    """Every returned bound is at most 1e-3 ULP of the target format (the oracle's guarantee)."""
    gen = torch.Generator().manual_seed(1)
    x = adversarial_rows(gen, 40, 37).to(get_format(target).torch_dtype)
    t = oracle.softmax_truth(x)
    ok = t.row_status == oracle.ROW_FINITE
    u = ulp_of_exact(t.probs.hi, t.probs.lo, target)
    assert bool((t.probs.bound[ok] <= 1e-3 * u[ok]).all())
    ul = ulp_of_exact(t.lse.hi, t.lse.lo, target)
    assert bool((t.lse.bound[ok] <= 1e-3 * ul[ok]).all())
    if target == "float64":  # float64 cannot certify itself: every finite row went to mpmath
        assert bool(t.fallback_rows[ok].all())


def test_torch_exp_and_log_meet_the_assumed_accuracy() -> None:
    """The fast path assumes float64 exp/log within EXP_ULPS ulps; measure it."""
    gen = torch.Generator().manual_seed(3)
    d = torch.cat([torch.empty(4000).uniform_(-745, 709, generator=gen).double(),
                   -torch.logspace(-12, 2.8, 2000).double()])
    got = torch.exp(d)
    worst = 0.0
    with mpmath.mp.workprec(160):
        for a, g in zip(d.tolist(), got.tolist()):
            e = mpmath.exp(a)
            worst = max(worst, float(abs(mpmath.mpf(g) - e)) / float(ulp(torch.tensor(float(e), dtype=torch.float64), "float64")))
    assert worst <= oracle.EXP_ULPS
    s = torch.empty(3000).uniform_(1, 1e6, generator=gen).double()
    with mpmath.mp.workprec(160):
        w = max(float(abs(mpmath.mpf(g) - mpmath.log(a))) / float(ulp(torch.tensor(g, dtype=torch.float64), "float64"))
                for a, g in zip(s.tolist(), torch.log(s).tolist()))
    assert w <= oracle.EXP_ULPS


def test_special_rows_are_classified() -> None:
    x = torch.tensor([[0.0, 1.0], [-math.inf, -math.inf], [math.nan, 0.0], [math.inf, 0.0], [-math.inf, 2.0]])
    t = oracle.softmax_truth(x)
    assert t.row_status.tolist() == [0, 1, 2, 2, 0]
    assert t.probs.hi[4].tolist() == [0.0, 1.0]
    assert t.lse.hi[1] == -math.inf and math.isnan(float(t.lse.hi[2]))


def _attention_inputs(gen, dtype, B=1, Hq=2, Hkv=1, Nq=5, Nk=7, D=8, spread=1.0):
    q = (torch.randn(B, Hq, Nq, D, generator=gen) * spread).to(dtype)
    k = (torch.randn(B, Hkv, Nk, D, generator=gen) * spread).to(dtype)
    v = torch.randn(B, Hkv, Nk, D, generator=gen).to(dtype)
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("spread", [1.0, 30.0])
def test_attention_fast_path_agrees_with_mpmath(dtype: torch.dtype, spread: float) -> None:
    gen = torch.Generator().manual_seed(5)
    q, k, v = _attention_inputs(gen, dtype, spread=spread)
    mask = torch.rand(5, 7, generator=gen) > 0.3
    t = oracle.attention_truth(q, k, v, scale=0.35, causal=True, mask=mask)
    fmt = get_format(dtype)
    group = 2
    for b, h, i in [(0, 0, 0), (0, 1, 3), (0, 0, 4), (0, 1, 2)]:
        vis = t.visible[b, h, i].tolist()
        if not any(vis):
            assert t.out.hi[b, h, i].eq(0).all()
            continue
        ref = mp_reference.attention_row(q[b, h, i].double().tolist(), k[b, h // group].double().tolist(),
                                         v[b, h // group].double().tolist(), vis, 0.35, 200)
        for d in range(q.shape[-1]):
            err = exact_error(t.out, (b, h, i, d), ref.values[d])
            assert err <= float(t.out.bound[b, h, i, d]) + float(ref.cond[d]) * ref.rel_bound
            need = 1e-3 * max(fmt.unit_roundoff * float(t.cond[b, h, i, d]), fmt.smallest_subnormal)
            assert float(t.out.bound[b, h, i, d]) <= need


def test_float64_values_near_underflow_are_resolved_to_a_subnormal() -> None:
    """float64 V at float64's subnormals (the near-underflow kind): the exact fallback scales V
    up before its double-double sum, so its bound is a subnormal or two, not 16 Nk of them
    (before, an output of 2**-1074 came back as 0 with a bound of 5e-321), and it agrees with
    pure mpmath at 200 bits within that bound."""
    gen = torch.Generator().manual_seed(3)
    nq, nk, d = 3, 40, 6
    q, k = torch.randn(1, 1, nq, d, generator=gen, dtype=torch.float64), torch.randn(1, 1, nk, d, generator=gen,
                                                                                    dtype=torch.float64)
    e = torch.randint(-1073, -1018, (1, 1, nk, d), generator=gen)
    sign = torch.where(torch.rand(1, 1, nk, d, generator=gen, dtype=torch.float64) < 0.5, -1.0, 1.0)
    v = torch.ldexp(1 + torch.rand(1, 1, nk, d, generator=gen, dtype=torch.float64), e) * sign
    t = oracle.attention_truth(q, k, v, scale=0.5, causal=False, target=get_format(torch.float64))
    assert bool(t.fallback_rows.all())
    assert float(t.out.bound.max()) <= 2 * 2.0**-1074
    for i in range(nq):
        ref = mp_reference.attention_row(q[0, 0, i].tolist(), k[0, 0].tolist(), v[0, 0].tolist(), [True] * nk, 0.5,
                                         200)
        for j in range(d):
            err = exact_error(t.out, (0, 0, i, j), ref.values[j])
            assert err <= float(t.out.bound[0, 0, i, j]) + float(ref.cond[j]) * ref.rel_bound
    # the uniform case: every weight 1/64, V the same at every key, so the output is V exactly
    small = torch.ldexp(torch.ones(8, dtype=torch.float64), torch.arange(8)) * 2.0**-1074
    vu = small.expand(64, 8).reshape(1, 1, 64, 8).contiguous()
    tu = oracle.attention_truth(torch.zeros(1, 1, 1, 8, dtype=torch.float64),
                                torch.zeros(1, 1, 64, 8, dtype=torch.float64), vu, scale=1.0, causal=False,
                                target=get_format(torch.float64))
    assert torch.equal(tu.out.hi[0, 0, 0], small)


def test_attention_no_visible_key_and_nan_reach() -> None:
    q = torch.randn(1, 1, 3, 4)
    k = torch.randn(1, 1, 3, 4)
    v = torch.randn(1, 1, 3, 4)
    k[0, 0, 2, 0] = math.nan  # visible only to query 2 under causal
    mask = torch.tensor([[False, False, False], [True, True, True], [True, True, True]])
    t = oracle.attention_truth(q, k, v, scale=0.5, causal=True, mask=mask)
    assert t.row_status[0, 0].tolist() == [oracle.ROW_MASKED, oracle.ROW_FINITE, oracle.ROW_NONFINITE]
    assert t.expected_nonfinite[0, 0, 2].all() and not t.expected_nonfinite[0, 0, 1].any()


@pytest.mark.parametrize("name", list(FORMATS))
def test_ulp_matches_nextafter(name: str) -> None:
    f = FORMATS[name]
    if f.torch_dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        bits = torch.arange(1, 120, dtype=torch.uint8)  # positive finite values, in order
        vals = bits.view(f.torch_dtype).double()
        nxt = (bits + 1).view(f.torch_dtype).double()
        assert torch.equal(ulp(vals, f), nxt - vals)
        return
    x = torch.tensor([1.0, 1.5, 3.0, 1e-3, f.smallest_normal, f.smallest_subnormal * 3, 100.0], dtype=f.torch_dtype)
    spacing = torch.nextafter(x, torch.full_like(x, math.inf)) - x
    assert torch.equal(ulp(x.double(), f), spacing.double())
    assert float(ulp(torch.zeros(1, dtype=torch.float64), f)) == f.smallest_subnormal


def test_attention_fallback_rows_chosen_from_the_fast_path() -> None:
    # fallback_only as a function: it sees the fast path once (undecided rows uncertified) and
    # picks the rows to refine; the result equals choosing them from a separate fast-path call.
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    kw = dict(scale=0.4, causal=True, target="float32", resolution=1e-15)  # every row undecided
    seen = []

    def pick(fast: oracle.AttentionTruth) -> torch.Tensor:
        seen.append(fast)
        wanted = torch.zeros_like(fast.uncertified_rows)
        wanted[0, 1, 1:3] = True
        return wanted

    one_pass = oracle.attention_truth(q, k, v, fallback_only=pick, **kw)
    assert len(seen) == 1 and bool(seen[0].uncertified_rows.all()) and not seen[0].fallback_rows.any()
    first = oracle.attention_truth(q, k, v, max_fallback_work=0, **kw)
    for a, b in ((seen[0].out.hi, first.out.hi), (seen[0].cond, first.cond)):
        assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    two_pass = oracle.attention_truth(q, k, v, fallback_only=pick(first), **kw)
    assert one_pass.fallback_rows.sum() == 2 and one_pass.uncertified_rows.sum() == 8
    assert torch.equal(one_pass.fallback_rows, two_pass.fallback_rows)
    assert torch.equal(one_pass.uncertified_rows, two_pass.uncertified_rows)
    for a, b in ((one_pass.out.hi, two_pass.out.hi), (one_pass.out.lo, two_pass.out.lo),
                 (one_pass.out.bound, two_pass.out.bound), (one_pass.lse.hi, two_pass.lse.hi)):
        assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


def test_values_past_the_domain_may_overflow_an_accumulating_kernel() -> None:
    # bfloat16 V near 1e38 over 4 keys at scale 0 (every weight 1): sum_j |v_j| passes float32's
    # range, so a kernel that accumulates sum_j p_j v_j before dividing (FlashAttention's
    # schedule, our blocked reference) overflows where the exact output, their mean, is finite;
    # such elements (a sum past half the range) may be non-finite.
    # Past the domain only: the strategies' v_limit keeps Nk |V| within it.
    import dataclasses

    from kernels.registry import get_target
    from strategies.attention import v_limit
    from verify import engine

    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(1, 2, n, 8, generator=g).bfloat16() for n in (5, 4))
    v = (torch.rand(1, 2, 4, 8, generator=g) * 0.1 + 0.9).mul(1e38).bfloat16()
    v[:, 1, 1:] = 1.0  # the second head: one big key, the column sums within the domain
    mask = torch.ones(5, 4, dtype=torch.bool)
    mask[0, 1:] = False  # query 0 sees one key: its sum is 1e38 at most, within the domain
    fmt = get_format("bfloat16")
    big = oracle.accumulator_may_overflow(mask.expand(1, 2, 5, 4), v.double(), fmt)
    assert big[0, 0, 1:].all() and not big[0, 0, 0].any() and not big[0, 1].any()
    kw = dict(scale=0.0, causal=False, mask=mask)
    blocked = get_target("ref-blocked-attention")
    assert not torch.isfinite(blocked.fn(q, k, v, **kw)).all()  # it does overflow
    assert engine.check_attention_input(blocked, q, k, v, **kw).evaluation.ok
    naive = get_target("ref-naive-attention")
    halved = dataclasses.replace(naive, name="halved", fn=lambda *a, **kw: naive.fn(*a, **kw) * 0.5)
    assert [x.kind for x in engine.check_attention_input(halved, q, k, v, **kw).evaluation.violations] == ["accuracy"]
    # within the domain nothing is lenient (and the check costs no product)
    within = torch.full((1, 2, 4, 8), v_limit(fmt, 4), dtype=torch.float64)
    assert not oracle.accumulator_may_overflow(mask.expand(1, 2, 5, 4), within, fmt).any()
