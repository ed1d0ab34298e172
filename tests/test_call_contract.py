"""The contract on a call, apart from its numbers: a target leaves its inputs as they were
(``input-modified``), returns an output that a later call does not overwrite
(``output-overwritten``), writes every element of its output (``unwritten-output``), computes
a second call on that call's inputs, not the first's (``stale-input``) and, on a GPU, runs on
the caller's current stream (``stream-order``).  Each bug is a kernel whose values
are right on the ordinary call; each check is shown to fire on it, to stay quiet on the same
kernel without the bug, and to be caught by a search."""

from __future__ import annotations

import math

import pytest
import torch

from verify import engine, search
from verify.api import assert_attention_correct, assert_softmax_correct
from kernels.mutants import FirstCallBuffers
from kernels.registry import Target
from verify.capabilities import Capabilities


def _softmax_in_place(x: torch.Tensor) -> torch.Tensor:
    """Right values; works in place on ``x.float()``, which is ``x`` itself for float32 input."""
    w = x.float()
    w.sub_(w.amax(-1, keepdim=True).nan_to_num(neginf=0.0, posinf=math.inf)).exp_()  # a +inf row: all NaN
    return (w / w.sum(-1, keepdim=True)).to(x.dtype)


def _softmax_copy(x: torch.Tensor) -> torch.Tensor:
    return _softmax_in_place(x.clone())


class _CachedOutput:
    """Right values into one buffer per (shape, dtype), returned at every call."""

    def __init__(self, inner) -> None:
        self.inner, self.buffers = inner, {}

    def __call__(self, *args, **kwargs) -> torch.Tensor:
        return self.pooled(self.inner(*args, **kwargs))

    def pooled(self, result: torch.Tensor) -> torch.Tensor:
        key = (tuple(result.shape), result.dtype)
        if key not in self.buffers:
            self.buffers[key] = torch.empty_like(result)
        return self.buffers[key].copy_(result)


def _attention(q, k, v, *, scale, causal=False, mask=None):
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    if causal:  # top-left: query i sees keys 0..i
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return (p @ v.double()).to(q.dtype)


def _attention_scaling_q_in_place(q, k, v, *, scale, causal=False, mask=None):
    q.mul_(scale)  # the caller's q is scaled afterwards
    return _attention(q, k, v, scale=1.0, mask=mask)


class _Inputs:
    def __init__(self, q, k, v, scale, mask=None) -> None:
        self.q, self.k, self.v, self.scale, self.causal, self.mask = q, k, v, scale, False, mask


def _qkv(seed: int = 0, nq: int = 5, nk: int = 7, d: int = 8) -> _Inputs:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 2, n, d, generator=g) for n in (nq, nk, nk))
    return _Inputs(q, k, v, 0.3)


def test_softmax_working_in_place_on_its_input_is_an_input_modified_violation() -> None:
    x = torch.randn(3, 9)
    with pytest.raises(AssertionError, match=r"input-modified.*wrote to its input x"):
        assert_softmax_correct(_softmax_in_place, x.clone())
    assert_softmax_correct(_softmax_in_place, x.to(torch.float16))  # .float() copies: nothing written
    assert_softmax_correct(_softmax_copy, x)


def test_attention_scaling_q_in_place_is_an_input_modified_violation() -> None:
    with pytest.raises(AssertionError, match=r"input-modified.*wrote to its input q"):
        assert_attention_correct(_attention_scaling_q_in_place, _qkv())
    assert_attention_correct(_attention, _qkv())


def _softmax_of_the_first_row_broadcast(x: torch.Tensor) -> torch.Tensor:
    """Right values for an input whose rows are one row broadcast (a zero stride): that row's
    softmax, expanded; its elements share memory (the thirteenth red team's S11)."""
    if x.dim() >= 2 and x.stride(-2) == 0:
        return _softmax_copy(x[..., :1, :]).expand(x.shape)
    return _softmax_copy(x)


def _attention_expanded_over_the_heads(q, k, v, *, scale, causal=False, mask=None):
    return _attention(q[:, :1], k[:, :1], v[:, :1], scale=scale, causal=causal, mask=mask).expand(q.shape)


def test_an_output_whose_elements_share_memory_is_an_output_overlap_violation() -> None:
    x = torch.randn(1, 9).expand(4, 9)
    with pytest.raises(AssertionError, match=r"output-overlap.*\(0, 0\) and \(1, 0\) share one memory address"):
        assert_softmax_correct(_softmax_of_the_first_row_broadcast, x)
    assert_softmax_correct(_softmax_copy, x)
    assert_softmax_correct(_softmax_of_the_first_row_broadcast, x.contiguous())
    inputs = _qkv()
    inputs.q, inputs.k, inputs.v = (t[:, :1].expand(t.shape) for t in (inputs.q, inputs.k, inputs.v))
    with pytest.raises(AssertionError, match=r"output-overlap"):
        assert_attention_correct(_attention_expanded_over_the_heads, inputs)
    assert_attention_correct(_attention, inputs)


def test_shared_elements_finds_overlap_the_strides_do_not_rule_out() -> None:
    from verify.contracts import shared_elements

    base = torch.zeros(40)
    assert shared_elements(base.as_strided((3, 4), (4, 1))) is None
    assert shared_elements(base.as_strided((2, 3), (1, 2))) is None  # interleaved, no two alike
    assert shared_elements(base.as_strided((3, 4), (2, 1))) == ((0, 2), (1, 0))  # rows overlap by half
    assert shared_elements(base.as_strided((2, 2, 3), (6, 0, 1))) == ((0, 0, 0), (0, 1, 0))
    assert shared_elements(torch.zeros(0, 3).expand(0, 3)) is None


@pytest.mark.parametrize("shape", [(6,), (3, 7), (2, 3, 4)])
def test_softmax_returning_a_reused_buffer_is_an_output_overwritten_violation(shape) -> None:
    x = torch.randn(shape)
    with pytest.raises(AssertionError, match=r"output-overwritten.*overwrote the output"):
        assert_softmax_correct(_CachedOutput(_softmax_copy), x)
    assert_softmax_correct(_softmax_copy, x)


def test_attention_returning_a_reused_buffer_is_an_output_overwritten_violation() -> None:
    inputs = _qkv()
    inputs.mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(1)) < 0.7
    with pytest.raises(AssertionError, match=r"output-overwritten"):
        assert_attention_correct(_CachedOutput(_attention), inputs)
    assert_attention_correct(_attention, inputs)


def test_the_reuse_check_skips_large_inputs_and_its_decoys_are_other_inputs() -> None:
    calls = []

    def counting(x):
        calls.append(x.clone())
        return _softmax_copy(x)

    x = torch.randn(2, 7)
    assert_softmax_correct(counting, x)
    # the call, the reuse check's on other inputs, then the in-place check's: x overwritten with
    # the decoy's values, called, and put back
    assert len(calls) == 3 and torch.equal(calls[0], x) and not torch.equal(calls[1], x)
    assert calls[1].shape == x.shape and calls[1].dtype == x.dtype and torch.equal(calls[2], calls[1])
    calls.clear()
    big = torch.randn(2, engine.OUTPUT_REUSE_MAX_ELEMENTS // 2 + 1)
    assert_softmax_correct(counting, big)
    assert len(calls) == 1


def test_a_search_finds_the_reused_buffer_within_a_few_examples(tmp_path) -> None:
    target = Target("cached-output-softmax", "softmax", _CachedOutput(_softmax_copy),
                    Capabilities(dtypes=("float32",), devices=("cpu",)), "returns one reused buffer")
    cell = search.check_cell(target, "float32", search.CheckOptions(max_examples=20, seed=3, shrink=False,
                                                                     compare_naive=False,
                                                                     artifact_dir=str(tmp_path)))
    assert cell.status == "violated" and cell.violation.kind == "output-overwritten"
    # Not always the first: rows of length 1 have the same softmax (1.0) on any input.
    assert cell.examples_to_first_failure <= 5


class _PooledLargeOutputs(_CachedOutput):
    """Fresh outputs up to ``above`` elements, one reused buffer per shape past that (a pool for
    large allocations): no small case shows it."""

    def __init__(self, inner, above: int) -> None:
        super().__init__(inner)
        self.above = above

    def __call__(self, *args, **kwargs) -> torch.Tensor:
        result = self.inner(*args, **kwargs)
        return result if result.numel() <= self.above else self.pooled(result)


@pytest.mark.parametrize("op, above", [("softmax", 32768), ("attention", 2 * engine.OUTPUT_REUSE_MAX_ELEMENTS)])
def test_a_buffer_reused_for_large_outputs_only_is_found_by_the_probe_round(op: str, above: int, tmp_path) -> None:
    """The second calls' checks run on small inputs, and whatever their size on the probe
    round's cases (SECOND_CALL_PROBES) and one ordinary case in SECOND_CALL_ODDS: a target that
    reuses a buffer for large outputs only is found, on an input past its threshold."""
    from verify import artifacts
    from verify.cli import main

    from kernels.registry import get_target

    inner = _softmax_copy if op == "softmax" else get_target("ref-naive-attention").fn
    target = Target(f"pooled-{op}", op, _PooledLargeOutputs(inner, above),
                    Capabilities(dtypes=("float32",), devices=("cpu",)), f"reuses buffers past {above} elements")
    opts = search.CheckOptions(max_examples=40, seed=3, shrink=False, compare_naive=False, artifact_dir=str(tmp_path))
    cell = search.check_cell(target, "float32", opts)
    assert cell.status == "violated" and cell.violation.kind == "output-overwritten", cell.violation
    art = artifacts.load(cell.artifact)
    assert math.prod(art.inputs["x" if op == "softmax" else "q"].shape) > above
    # Off the probes' cases, a large input gets one call and passes.
    big = art.inputs["x"] if op == "softmax" else None
    if big is not None:
        assert engine.check_softmax_input(target, big, compare_naive=False).evaluation.ok
        assert not engine.check_softmax_input(target, big, compare_naive=False,
                                              call_checks_at_any_size=True).evaluation.ok


def _softmax_skipping_masked_rows(x: torch.Tensor) -> torch.Tensor:
    """Right values where a row has a live entry; fully masked rows are left as torch.empty
    gave them (right, 0, on fresh memory)."""
    out = torch.empty_like(x)
    live = (x > -math.inf).any(-1)
    out[live] = torch.softmax(x[live].float(), -1).to(x.dtype)
    return out


def _softmax_zeroing_masked_rows(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), -1).nan_to_num(0.0).to(x.dtype)


def _attention_skipping_dead_rows(q, k, v, *, scale, causal=False, mask=None):
    out = torch.empty_like(q)
    live = mask.any(-1) if mask is not None else torch.ones(q.shape[-2], dtype=torch.bool)
    out[..., live, :] = _attention(q, k, v, scale=scale, mask=mask)[..., live, :]
    return out


def _masked_rows() -> torch.Tensor:
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(2))
    x[1] = -math.inf
    x[3, :4] = -math.inf
    return x


# The ordinary call of a kernel that skips rows returns what the allocator's memory held
# there: 0 on fresh device memory, the case these tests hand the check (on the CPU, malloc's
# leftovers vary from call to call, NaN from an earlier poisoned call among them).
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_softmax_leaving_masked_rows_unwritten_is_an_unwritten_output_violation(device, dtype) -> None:
    x = _masked_rows().to(device, dtype)
    on_fresh_memory = _softmax_zeroing_masked_rows(x)
    v = engine.every_output_written(_softmax_skipping_masked_rows, on_fresh_memory, (x,), {}, 60.0)
    assert v is not None and v.kind == "unwritten-output", v
    assert v.message.startswith("6 of 24 output elements were never written") and "index (1, 0)" in v.message
    assert engine.every_output_written(_softmax_zeroing_masked_rows, on_fresh_memory, (x,), {}, 60.0) is None
    assert not torch.are_deterministic_algorithms_enabled()  # the CPU check puts the global state back


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_attention_leaving_dead_rows_unwritten_is_an_unwritten_output_violation(device) -> None:
    inputs = _qkv()
    mask = torch.ones(5, 7, dtype=torch.bool)
    mask[2] = False
    q, k, v, mask = (t.to(device) for t in (inputs.q, inputs.k, inputs.v, mask))
    kwargs = dict(scale=inputs.scale, causal=False, mask=mask)
    on_fresh_memory = _attention(q, k, v, **kwargs)
    viol = engine.every_output_written(_attention_skipping_dead_rows, on_fresh_memory, (q, k, v), kwargs, 60.0)
    assert viol is not None and viol.message.startswith("16 of 80 output elements"), viol
    assert engine.every_output_written(_attention, on_fresh_memory, (q, k, v), kwargs, 60.0) is None


def test_the_unwritten_check_runs_only_on_small_outputs_holding_a_zero() -> None:
    calls = []

    def counting(x):
        calls.append(x)
        return _softmax_zeroing_masked_rows(x)

    assert_softmax_correct(counting, torch.randn(2, 7))  # no zero: the call, the reuse and in-place checks'
    assert len(calls) == 3
    calls.clear()
    x = _masked_rows()
    assert_softmax_correct(counting, x)  # then the same inputs again, for the unwritten check
    assert len(calls) == 4 and calls[2] is x  # the in-place check's comes last, once the output passed
    calls.clear()
    big = torch.randn(2, engine.OUTPUT_REUSE_MAX_ELEMENTS // 2 + 1)
    big[0] = -math.inf
    assert_softmax_correct(counting, big)
    assert len(calls) == 1


def test_a_search_finds_the_unwritten_rows(tmp_path) -> None:
    target = Target("skips-masked-rows-softmax", "softmax", _softmax_skipping_masked_rows,
                    Capabilities(dtypes=("float32",), devices=("cpu",)), "leaves fully masked rows unwritten")
    cell = search.check_cell(target, "float32", search.CheckOptions(max_examples=100, seed=3, compare_naive=False,
                                                                     artifact_dir=str(tmp_path)))
    # On the CPU the ordinary call reads malloc's leftovers, which the masked-row contract may
    # catch first (a leftover that is not 0 or NaN); where they read 0, only this check can.
    assert cell.status == "violated" and cell.violation.kind in ("unwritten-output", "masked-row"), cell.violation


@pytest.mark.gpu
def test_the_poisoned_pools_memory_stays_bounded() -> None:
    # Each check makes a fresh pool of >= 24 MiB.  The allocator frees a dead pool's segments on
    # its own schedule, not at once: on the H200 (torch 2.11, 2026-12-02) reserved memory rose
    # 2 MiB a call for about 32 calls and then stayed at 66 MiB for the next 90.  A leak of
    # whole pools would add >= 24 MiB a call, 1.8 GiB over the second stretch.
    x = _masked_rows().cuda()
    assert_softmax_correct(_softmax_zeroing_masked_rows, x)
    before = torch.cuda.memory_reserved()
    for _ in range(75):
        assert_softmax_correct(_softmax_zeroing_masked_rows, x)
    middle = torch.cuda.memory_reserved()
    for _ in range(75):
        assert_softmax_correct(_softmax_zeroing_masked_rows, x)
    after = torch.cuda.memory_reserved()
    assert after - middle <= 2 * engine.POISON_LARGE_BYTES, (before, middle, after)
    assert after - before <= 8 * engine.POISON_LARGE_BYTES, (before, middle, after)


def test_softmax_reading_the_first_calls_buffer_is_a_stale_input_violation() -> None:
    x = torch.randn(3, 9)
    stale = FirstCallBuffers(lambda t: torch.softmax(t.float(), -1).to(t.dtype), stale=(0,))
    with pytest.raises(AssertionError, match=r"stale-input.*bit for bit the first call's result"):
        assert_softmax_correct(stale, x)
    assert_softmax_correct(lambda t: torch.softmax(t.float(), -1).to(t.dtype), x)


def test_attention_reading_the_first_calls_k_and_v_is_a_stale_input_violation() -> None:
    inputs = _qkv()
    with pytest.raises(AssertionError, match=r"stale-input.*leak into it"):  # new Q, old K and V
        assert_attention_correct(FirstCallBuffers(_attention, stale=(1, 2)), inputs)


def test_the_stale_limit_widens_for_float8_outputs_only() -> None:
    truth = torch.full((2, 4), 0.25, dtype=torch.float64)
    live = torch.ones(2, dtype=torch.bool)
    first = torch.zeros(2, 4)
    off = truth + 0.5  # past 0.1: stale for 16- and 32-bit outputs
    assert engine.decoy_is_answered(off.half(), first.half(), truth, live).kind == "stale-input"
    assert engine.decoy_is_answered(off.to(torch.float8_e4m3fn), first.to(torch.float8_e4m3fn), truth, live) is None
    assert engine.decoy_is_answered(off.half(), first.half(), truth, torch.zeros(2, dtype=torch.bool)) is None


def test_the_second_call_is_judged_only_once_the_first_passed() -> None:
    """A kernel wrong at every call is reported for the case's own input, not for the decoy."""
    def scale_twice(q, k, v, *, scale, causal=False, mask=None):
        return _attention(q, k, v, scale=scale * scale, mask=mask)

    with pytest.raises(AssertionError, match=r"accuracy") as failed:
        assert_attention_correct(scale_twice, _qkv())
    assert "stale-input" not in str(failed.value)


def _on_default_stream(fn):
    def run(*args, **kwargs):
        with torch.cuda.stream(torch.cuda.default_stream(args[0].device)):
            return fn(*args, **kwargs)
    return run


@pytest.mark.gpu
def test_softmax_on_the_default_stream_is_a_stream_order_violation() -> None:
    x = torch.randn(3, 9, device="cuda")
    with pytest.raises(AssertionError, match=r"stream-order.*outside the caller's current stream"):
        assert_softmax_correct(_on_default_stream(lambda t: torch.softmax(t, -1)), x)
    assert_softmax_correct(lambda t: torch.softmax(t, -1), x)


@pytest.mark.gpu
def test_attention_on_the_default_stream_is_a_stream_order_violation() -> None:
    inputs = _qkv()
    inputs.q, inputs.k, inputs.v = inputs.q.cuda(), inputs.k.cuda(), inputs.v.cuda()
    with pytest.raises(AssertionError, match=r"stream-order"):
        assert_attention_correct(_on_default_stream(_attention), inputs)
    assert_attention_correct(_attention, inputs)


@pytest.mark.gpu
def test_the_stream_check_runs_the_target_on_a_side_stream_with_the_true_inputs() -> None:
    seen = []

    def recording(x):
        seen.append((torch.cuda.current_stream(), x.clone()))
        return torch.softmax(x, -1)

    x = torch.randn(2, 7, device="cuda")
    assert_softmax_correct(recording, x)
    assert seen[0][0] == torch.cuda.default_stream()
    # later calls (reuse, in-place update) run on the default stream too: find the side-stream one
    side = [seen_x for s, seen_x in seen if s != torch.cuda.default_stream()]
    assert len(side) == 1
    assert torch.equal(side[0], x)  # on its own stream the target saw the inputs, not the poison


def test_a_cache_keyed_on_addresses_is_caught_when_the_inputs_change_in_place() -> None:
    """A result cached under the input's address, shape and strides is right for every new tensor
    (the reuse check's decoys are other tensors) and wrong for a KV cache or mask updated in
    place between calls: the engine overwrites the inputs in place, calls again, and puts them back
    (sixth red team, 2026-12-05: such mutants died only when the allocator reused an address)."""
    cache: dict = {}

    def keyed_on_address(x):
        key = (x.data_ptr(), tuple(x.shape), x.stride())
        if key not in cache:
            cache[key] = _softmax_copy(x)
        return cache[key].clone()

    x = torch.randn(2, 7)
    before = x.clone()
    v = engine.check_softmax_input(Target("by-address", "softmax", keyed_on_address, Capabilities(), "test"), x,
                                   compare_naive=False).evaluation.violations
    assert [e.kind for e in v] == ["stale-input"] and "overwritten in place" in v[0].message
    assert torch.equal(x, before)  # the caller's input is put back
    assert not engine.check_softmax_input(Target("copy", "softmax", _softmax_copy, Capabilities(), "test"), x,
                                          compare_naive=False).evaluation.violations


def _check_attention(fn, inputs: _Inputs, caps: Capabilities = Capabilities(), causal: bool = False):
    target = Target("t", "attention", fn, caps, "test")
    return engine.check_attention_input(target, inputs.q, inputs.k, inputs.v, scale=inputs.scale, causal=causal,
                                        mask=inputs.mask, compare_naive=False).evaluation.violations


def test_a_mask_remembered_by_address_is_caught_when_the_mask_changes_in_place() -> None:
    """A kernel that remembers, under the mask's address, that it hides nothing (and then skips
    it) is right for every new mask and wrong for a mask rewritten in place: the in-place check
    rewrites the mask too (every entry flipped, the first key kept), where it has memory of its
    own (seventh red team, 2026-12-05)."""
    hides_nothing: dict = {}

    def skips_a_full_mask(q, k, v, *, scale, causal=False, mask=None):
        if mask is not None:
            key = (mask.data_ptr(), tuple(mask.shape), mask.stride())
            if hides_nothing.setdefault(key, bool(mask.all())):
                mask = None
        return _attention(q, k, v, scale=scale, causal=causal, mask=mask)

    inputs = _qkv()
    inputs.mask = torch.ones(5, 7, dtype=torch.bool)
    before = inputs.mask.clone()
    v = _check_attention(skips_a_full_mask, inputs)
    assert [e.kind for e in v] == ["stale-input"] and "mask's" in v[0].message
    assert torch.equal(inputs.mask, before)  # put back
    assert not _check_attention(_attention, inputs)
    # a mask broadcast with a zero stride cannot be rewritten: only Q, K and V are, and that passes
    hides_nothing.clear()
    inputs.mask = torch.ones(1, 7, dtype=torch.bool).expand(5, 7)
    assert not _check_attention(skips_a_full_mask, inputs)


@pytest.mark.parametrize("causal", [False, True])
def test_a_kernel_specialized_without_the_causal_flag_is_caught(causal: bool) -> None:
    """A specialization compiled for the first call's causal flag and cached under the shapes
    alone answers the other flag as the first: the decoy tensors are called again with the flag
    flipped (seventh red team, 2026-12-05)."""
    seen: dict = {}

    def keyed_without_causal(q, k, v, *, scale, causal=False, mask=None):
        flag = seen.setdefault((q.shape, k.shape, q.dtype), causal)
        return _attention(q, k, v, scale=scale, causal=flag, mask=mask)

    v = _check_attention(keyed_without_causal, _qkv(), causal=causal)
    assert [e.kind for e in v] == ["stale-input"] and "causal flag flipped" in v[0].message
    assert not _check_attention(_attention, _qkv(), causal=causal)
    calls = []

    def counting(q, k, v, *, scale, causal=False, mask=None):
        calls.append(causal)
        return _attention(q, k, v, scale=scale, causal=causal, mask=mask)

    # a target that takes no causal flag is never called with causal=True
    assert not _check_attention(counting, _qkv(), caps=Capabilities(causal=False))
    assert calls == [False, False, False]
    calls.clear()
    # nor one that takes causal with Nq == Nk only, where they differ (_qkv: 5 and 7)
    assert not _check_attention(counting, _qkv(), caps=Capabilities(causal_square_only=True), causal=causal)
    assert calls == [causal] * 3 + ([False] if causal else [])


def test_a_lost_nan_names_the_exact_answer_nan() -> None:
    # The thirteenth red team read "exact not computed (ill-conditioned row)" where the exact
    # answer is NaN because a NaN input reaches the element.
    inputs = _qkv()
    inputs.q[0, 1, 2, 0] = float("nan")

    def nan_lost(q, k, v, *, scale, causal=False, mask=None):
        return _attention(q, k, v, scale=scale, causal=causal, mask=mask).nan_to_num(0.0)

    with pytest.raises(AssertionError, match=r"nan-propagation.*exact NaN \(a NaN or \+inf input reaches it\)"):
        assert_attention_correct(nan_lost, inputs)
