"""The log-sum-exp contract: a target declaring ``returns_lse`` returns ``(output, lse)`` and
the LSE is held to the oracle's, row by row (``verify.contracts.evaluate_lse``).

A backward pass and a split-KV merge consume the LSE, so a wrong one (log2 units, the max
never added back, 0 for an empty row; pytorch #181645, tokenspeed PR #571) is a wrong kernel
even when its output is right.  Correct LSEs (torch.logsumexp in float64, rounded once) pass
on the strategies' inputs, specials included; each way of being wrong is caught.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings

from kernels import reference
from kernels.registry import Target
from strategies import attention_cases, softmax_cases
from verify import engine
from verify.capabilities import Capabilities

LSE_CAPS = Capabilities(dtypes=("float16", "float32"), devices=("cpu",), returns_lse=True)


def _softmax_target(fn, masked: str = "either") -> Target:
    return Target("lse-test", "softmax", fn, LSE_CAPS, "test target")


def _attention_target(fn) -> Target:
    return Target("lse-test", "attention", fn, LSE_CAPS, "test target")


def _softmax_and_lse(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x64 = x.double()
    return torch.softmax(x64, -1).to(x.dtype), torch.logsumexp(x64, -1).float()


def _scores(q, k, *, scale, causal, mask) -> torch.Tensor:
    """Scaled scores in float64, -inf where a key is not visible."""
    k64 = k.double().repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    s = (q.double() @ k64.transpose(-1, -2)) * scale
    visible = reference.key_visibility(q, k, causal, mask)
    return s if visible is None else s.masked_fill(~visible, -math.inf)


def _attention_and_lse(q, k, v, *, scale, causal=False, mask=None):
    out = reference.naive_attention(q, k, v, scale=scale, causal=causal, mask=mask, compute_dtype=torch.float64)
    return out.to(q.dtype), torch.logsumexp(_scores(q, k, scale=scale, causal=causal, mask=mask), -1).float()


def _softmax_check(fn, x: torch.Tensor, masked_rows: str = "either"):
    return engine.check_softmax_input(_softmax_target(fn), x, masked_rows=masked_rows, compare_naive=False).evaluation


def _kinds(ev) -> set[str]:
    return {v.kind for v in ev.violations}


# ---- correct LSEs pass ------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(case=softmax_cases(dtypes=("float16", "float32"), caps=LSE_CAPS, max_length=64))
def test_a_correct_softmax_lse_passes(case) -> None:
    ev = _softmax_check(_softmax_and_lse, case.build())
    assert ev.ok, (case.describe(), [v.one_line() for v in ev.violations])
    assert ev.lse_errors is not None


@settings(max_examples=30, deadline=None)
@given(case=attention_cases(dtypes=("float16", "float32"), caps=LSE_CAPS, max_seq=12))
def test_a_correct_attention_lse_passes(case) -> None:
    b = case.build()
    ev = engine.check_attention_input(_attention_target(_attention_and_lse), b.q, b.k, b.v, scale=b.scale,
                                      causal=b.causal, mask=b.mask, compare_naive=False).evaluation
    assert ev.ok, (case.describe(), [v.one_line() for v in ev.violations])


def test_an_lse_near_zero_is_judged_by_its_absolute_error() -> None:
    # exact LSE about 1e-9: a float32 LSE of 0 is 1e-9 off, billions of ULPs of the exact value
    # but far below u * max(1, |LSE|), the error any float32 sum of the row's exponentials makes
    x = torch.tensor([[0.0, -30.0]], dtype=torch.float32)
    exact = math.log1p(math.exp(-30.0))
    ev = _softmax_check(lambda t: (_softmax_and_lse(t)[0], torch.zeros(1)), x)
    assert ev.ok and 0 < float(ev.lse_errors.max()) < 1, (exact, ev.violations)


# ---- each way of being wrong is caught ---------------------------------------------------------

def _rows() -> torch.Tensor:
    x = torch.randn(4, 50, generator=torch.Generator().manual_seed(0)) * 3 + 5
    x[1] = -math.inf  # nothing visible
    x[2, 7] = math.nan
    x[3, 11] = math.inf
    return x


def _with_lse(edit):
    def fn(x: torch.Tensor):
        out, lse = _softmax_and_lse(x)
        return out, edit(lse.clone())
    return fn


def test_the_reference_rows_pass() -> None:
    assert _softmax_check(_softmax_and_lse, _rows()).ok


@pytest.mark.parametrize("edit, kind", [
    (lambda lse: lse / math.log(2), "lse-accuracy"),  # log2 units
    (lambda lse: lse.bfloat16().float(), "lse-accuracy"),  # stored in bfloat16 on the way
    (lambda lse: lse * (1 + 2e-5), "lse-accuracy"),
    (lambda lse: torch.where(torch.isinf(lse) & (lse < 0), torch.zeros_like(lse), lse), "lse-masked-row"),
    (lambda lse: torch.where(torch.isnan(lse), torch.zeros_like(lse), lse), "lse-nan-propagation"),
    (lambda lse: torch.where(lse == math.inf, torch.full_like(lse, 3.0), lse), "lse-nan-propagation"),
])
def test_a_wrong_softmax_lse_is_caught(edit, kind: str) -> None:
    ev = _softmax_check(_with_lse(edit), _rows())
    assert kind in _kinds(ev), [v.one_line() for v in ev.violations]
    assert all(v.kind.startswith("lse-") for v in ev.violations)  # the output itself is right


def test_an_lse_from_a_sum_past_its_probabilistic_bound_is_caught() -> None:
    """Rows of 8192 normal float32 entries, whose outputs are right: an LSE whose sum is
    1.2e-4 (~2000 u) high lies within the worst case gamma_{n-1} (~8191 u), which held it
    before, but the summation-bias check judges these rows and holds their sum to ~8 sqrt(n) u
    (~720 u): the LSE is the log of that sum.  The exact LSE passes, and so does one ~400 u off."""
    x = torch.randn(2, 8192, generator=torch.Generator().manual_seed(3))
    for off, ok in ((400, True), (2000, False)):
        ev = _softmax_check(_with_lse(lambda lse: lse + off * 2.0 ** -24), x)
        assert ev.ok == ok and all(v.kind == "lse-accuracy" for v in ev.violations), [v.one_line() for v in ev.violations]
        if not ok:
            assert ev.max_ratio < 1.0  # the outputs themselves pass
    assert _softmax_check(_softmax_and_lse, x).ok


def test_a_row_with_plus_inf_may_have_an_lse_of_nan_or_plus_inf() -> None:
    nan_for_inf = _with_lse(lambda lse: torch.where(lse == math.inf, torch.full_like(lse, math.nan), lse))
    assert _softmax_check(nan_for_inf, _rows()).ok


def test_an_empty_row_may_have_a_nan_lse_only_beside_a_nan_output_row() -> None:
    def nan_row(x: torch.Tensor):
        out, lse = _softmax_and_lse(x)
        dead = (x == -math.inf).all(-1)
        out[dead], lse[dead] = math.nan, math.nan
        return out, lse

    assert _softmax_check(nan_row, _rows()).ok
    assert {"masked-row"} <= _kinds(_softmax_check(nan_row, _rows(), masked_rows="zero"))

    def nan_lse_zero_row(x: torch.Tensor):
        out, lse = nan_row(x)
        out[(x == -math.inf).all(-1)] = 0.0
        return out, lse

    assert _kinds(_softmax_check(nan_lse_zero_row, _rows())) == {"lse-masked-row"}


def test_an_empty_row_holds_the_lse_its_target_declares() -> None:
    """-inf by default (the log of an empty sum); +inf where the target declares flash-attention's
    convention (``Capabilities.empty_row_lse``); either way the other sign is a violation."""
    def plus_inf(x: torch.Tensor):
        out, lse = _softmax_and_lse(x)
        return out, torch.where(lse == -math.inf, torch.full_like(lse, math.inf), lse)

    x = _rows()
    assert (x == -math.inf).all(-1).any()  # the rows hold an empty one
    plus = Target("lse-test", "softmax", plus_inf, LSE_CAPS.with_(empty_row_lse="+inf"), "test target")
    minus = Target("lse-test", "softmax", _softmax_and_lse, LSE_CAPS.with_(empty_row_lse="+inf"), "test target")
    check = engine.check_softmax_input
    assert check(plus, x, compare_naive=False).evaluation.ok
    assert _kinds(check(minus, x, compare_naive=False).evaluation) == {"lse-masked-row"}
    assert _kinds(_softmax_check(plus_inf, x)) == {"lse-masked-row"}
    with pytest.raises(ValueError, match="empty_row_lse must be"):
        LSE_CAPS.with_(empty_row_lse="inf")


@pytest.mark.parametrize("result, message", [
    (lambda x: _softmax_and_lse(x)[0], "must return \\(output, lse\\)"),
    (lambda x: (*_softmax_and_lse(x), None), "must return \\(output, lse\\)"),
    (lambda x: (_softmax_and_lse(x)[0], _softmax_and_lse(x)[1][:-1]), "shape"),
    (lambda x: (_softmax_and_lse(x)[0], _softmax_and_lse(x)[1].int()), "floating"),
    (lambda x: (_softmax_and_lse(x)[0], _softmax_and_lse(x)[1].bfloat16()), "float32 or wider"),
    (lambda x: (_softmax_and_lse(x)[0], _softmax_and_lse(x)[1].half()), "float32 or wider"),
    (lambda x: (_softmax_and_lse(x)[0], 1.0), "torch.Tensor"),
])
def test_an_lse_of_the_wrong_structure_is_a_violation(result, message: str) -> None:
    ev = _softmax_check(result, _rows())
    assert _kinds(ev) == {"lse-structure"}
    assert any(__import__("re").search(message, v.message) for v in ev.violations), ev.violations


def _attention_inputs():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 6, 8, generator=gen) for _ in range(3))
    mask = torch.ones(6, 6, dtype=torch.bool)
    mask[4] = False  # query row 4 sees nothing
    return q, k, v, dict(scale=0.7, causal=False, mask=mask)


@pytest.mark.parametrize("edit, kind", [
    (lambda lse, kw: lse / math.log(2), "lse-accuracy"),
    (lambda lse, kw: lse / kw["scale"], "lse-accuracy"),  # the max in raw-score units
    (lambda lse, kw: torch.where(torch.isinf(lse), torch.zeros_like(lse), lse), "lse-masked-row"),
])
def test_a_wrong_attention_lse_is_caught(edit, kind: str) -> None:
    q, k, v, kw = _attention_inputs()

    def fn(q, k, v, **call):
        out, lse = _attention_and_lse(q, k, v, **call)
        return out, edit(lse, call)

    ev = engine.check_attention_input(_attention_target(fn), q, k, v, **kw, compare_naive=False).evaluation
    assert kind in _kinds(ev), [x.one_line() for x in ev.violations]
    good = engine.check_attention_input(_attention_target(_attention_and_lse), q, k, v, **kw, compare_naive=False)
    assert good.evaluation.ok


def test_an_attention_lse_from_a_sum_past_its_probabilistic_bound_is_caught() -> None:
    """4096 keys, float32, outputs right: the key sum's worst case (gamma_Nk + 2 u Nk) let the
    LSE be ~1700 units of u max(1, |lse|) off; the rows' terms round without bias, so their sum
    is held to ~8 sqrt(Nk) u (~88 units).  An LSE whose sum is 3000 u high (~350 units) is
    caught, 300 u passes, and so does the exact one."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, n, 16, generator=g) for n in (3, 4096, 4096))
    for off, ok in ((0, True), (300, True), (3000, False)):
        def fn(q, k, v, **kw):
            out, lse = _attention_and_lse(q, k, v, **kw)
            return out, lse + off * 2.0 ** -24
        ev = engine.check_attention_input(_attention_target(fn), q, k, v, scale=0.25, causal=False, mask=None,
                                          compare_naive=False).evaluation
        assert ev.ok == ok and all(v.kind == "lse-accuracy" for v in ev.violations), [v.one_line() for v in ev.violations]
        assert float(ev.lse_tolerances.max()) < 120


def test_a_nan_query_needs_a_nan_lse_but_a_nan_value_does_not() -> None:
    q, k, v, kw = _attention_inputs()
    q[0, 0, 1, 3] = math.nan
    v[0, 1, 2, 0] = math.nan  # reaches head 1's outputs, not its LSE

    def nan_dropped(q, k, v, **call):
        out, lse = _attention_and_lse(q, k, v, **call)
        return out, torch.where(torch.isnan(lse), torch.zeros_like(lse), lse)

    right = engine.check_attention_input(_attention_target(_attention_and_lse), q, k, v, **kw, compare_naive=False)
    assert right.evaluation.ok, right.evaluation.violations
    assert torch.isfinite(_attention_and_lse(q, k, v, **kw)[1][0, 1, :4]).all()  # row 4 sees nothing
    wrong = engine.check_attention_input(_attention_target(nan_dropped), q, k, v, **kw, compare_naive=False)
    assert _kinds(wrong.evaluation) == {"lse-nan-propagation"}


def test_the_wide_probe_checks_every_repetition_of_the_lse() -> None:
    x = torch.randn(3, 37, generator=torch.Generator().manual_seed(0))
    assert engine.check_softmax_input(_softmax_target(_softmax_and_lse), x, tile=6).evaluation.ok

    def last_lse_wrong(t: torch.Tensor):
        out, lse = _softmax_and_lse(t)
        lse[-1] += 0.5  # the output is right everywhere; the LSE's last repetition is not
        return out, lse

    ev = engine.check_softmax_input(_softmax_target(last_lse_wrong), x, tile=6).evaluation
    assert _kinds(ev) == {"lse-accuracy"} and "repetition 5 of 6" in ev.violations[0].message, ev.violations
    assert ev.violations[0].index == (17,)
