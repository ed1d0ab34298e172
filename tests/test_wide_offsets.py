"""The wide-offsets probe: inputs past 2**31 elements, where int32 offsets wrap.

A real case holds 4 to 8 GiB a tensor and runs on CUDA devices only (the GPU tier runs it,
tests/test_gpu_tier.py).  Here the strategy's draws are checked as specs (nothing past the
block is built), and the engine's check of a repeated block, the search's wiring and the
replay run end to end at a smaller width: ``WIDE_OFFSET_ELEMENTS`` patched to 2**25 (past
every ordinary CPU case, the grid probe's 16.8 M elements included), with a target whose
offsets wrap there.
"""

from __future__ import annotations

import importlib
import json
import math
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings

from kernels import reference
from kernels.registry import Target
from strategies.attention import attention_cases, attention_probes
from strategies.replay import case_from_dict
from strategies.softmax import SoftmaxSpec, softmax_cases, softmax_probes
from verify import artifacts, engine, search
from verify.capabilities import Capabilities

# by module path: the package's names ``lengths`` and ``softmax`` are functions too
LENGTHS = importlib.import_module("strategies.lengths")
SOFTMAX = importlib.import_module("strategies.softmax")
CPU32 = Capabilities(dtypes=("float32",), devices=("cpu",))


def _collect(strategy, n: int) -> list:
    seen = []

    @settings(max_examples=n, database=None, derandomize=True)
    @given(strategy)
    def draw(case) -> None:
        seen.append(case)

    draw()
    return seen


def test_a_wide_case_passes_2_31_elements_by_one_whole_block_and_replays() -> None:
    cases = _collect(softmax_cases(dtypes=("float16", "float32"), wide_offsets=True, probe="wide-offsets"), 40)
    lengths = set()
    for case in cases:
        s = case.spec
        block = s.rows * s.length
        total = s.full_shape[0] * s.full_shape[1]
        assert s.full_shape == (s.rows * s.tile, s.length) and s.layout == "contiguous"
        assert 2**31 + block <= total < 2**31 + 2 * block, s
        # a block of 2**k entries would line up with a power-of-two wrap; never drawn
        assert block & (block - 1) != 0, s
        assert "offsets:wide" in case.features and f"repeated x{s.tile}" in case.describe()
        assert case.build().shape == (s.rows, s.length)  # the block alone: the engine repeats it
        assert case_from_dict(json.loads(json.dumps(s.to_dict()))).spec == s
        lengths.add(s.length)
    assert len(lengths) > 5, lengths


def test_the_probe_is_drawn_only_when_asked_and_allowed() -> None:
    assert "wide-offsets" not in softmax_probes()
    assert "wide-offsets" in softmax_probes(wide_offsets=True)
    assert "wide-offsets" not in softmax_probes(wide_offsets=True, caps=Capabilities(max_length=8))
    with pytest.raises(Exception, match="wide_offsets=False"):
        _collect(softmax_cases(probe="wide-offsets"), 1)
    ordinary = _collect(softmax_cases(dtypes=("float16",), wide_offsets=True), 200)
    assert all(c.spec.tile == 1 for c in ordinary)
    assert "tile" not in SoftmaxSpec(dtype="float32", rows=2, length=3).to_dict()  # older specs replay unchanged


@pytest.mark.parametrize("bad", [dict(batch=1), dict(layout="transposed"), dict(tile=0),
                                 dict(rows=1, vector=True)])
def test_a_tiled_spec_is_a_contiguous_2d_block(bad: dict) -> None:
    with pytest.raises(ValueError, match="tile"):
        SoftmaxSpec(**{**dict(dtype="float32", rows=2, length=5, tile=3), **bad})


def _target(fn, name: str = "t") -> Target:
    return Target(name, "softmax", fn, CPU32, "test target")


def _right(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), -1).to(x.dtype)


def _block() -> torch.Tensor:
    return torch.randn(3, 37, generator=torch.Generator().manual_seed(0))


def test_every_repetition_is_checked() -> None:
    x = _block()
    assert engine.check_softmax_input(_target(_right), x, tile=6).evaluation.ok

    def last_rows_zero(t: torch.Tensor) -> torch.Tensor:
        out = _right(t)
        out[-2:] = 0.0  # never written past some offset: whatever the memory held
        return out

    ev = engine.check_softmax_input(_target(last_rows_zero), x, tile=6).evaluation
    assert not ev.ok
    v = ev.violations[0]
    assert "repetition 5 of 6 (rows 15 to 17" in v.message and v.index[0] in (16, 17), v


def test_repetitions_may_differ_in_the_last_bits_within_tolerance() -> None:
    def rounding_by_position(t: torch.Tensor) -> torch.Tensor:
        out = _right(t)
        out[3:] = torch.nextafter(out[3:], torch.full_like(out[3:], 2.0))  # one ulp off past the first block
        return out

    out = engine.check_softmax_input(_target(rounding_by_position), _block(), tile=4)
    assert out.evaluation.ok and out.evaluation.max_error >= 0.5


def test_a_target_that_writes_its_wide_input_is_caught() -> None:
    def scribbles(t: torch.Tensor) -> torch.Tensor:
        out = _right(t)
        t[7, 0] = 0.0
        return out

    v = engine.check_softmax_input(_target(scribbles), _block(), tile=4).evaluation.violations[0]
    assert v.kind == "input-modified" and "rows 6 to 8" in v.message


def test_running_out_of_memory_is_not_a_violation() -> None:
    def short(t: torch.Tensor) -> torch.Tensor:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    with pytest.raises(engine.WideCaseUnaffordable, match="ran out of memory"):
        engine.check_softmax_input(_target(short), _block(), tile=3)


def test_the_probe_passes_2_31_on_cuda_2_24_elsewhere_and_never_in_float64() -> None:
    assert search.wide_offsets_allowed("float16", "cuda") == ""
    assert search.wide_offsets_allowed("bfloat16", "cuda") == ""
    assert search.wide_offsets_allowed("float16", "cpu") == ""  # past 2**24 there
    assert "float64" in search.wide_offsets_allowed("float64", "cuda:0")
    assert "float64" in search.wide_offsets_allowed("float64", "cpu")
    assert search.wide_offset_elements("cuda:0") == LENGTHS.WIDE_OFFSET_ELEMENTS == 2**31
    assert search.wide_offset_elements("cpu") == LENGTHS.FLOAT_OFFSET_ELEMENTS == 2**24


def test_off_cuda_the_probe_runs_where_the_target_is_fast_enough() -> None:
    assert search.wide_case_seconds((10**6, 1.0), 5 * 10**7) == pytest.approx(50.0)
    assert search.wide_case_seconds(None, 10) is None
    # A PyTorch callable on the CPU runs it (a few tenths of a second); too slow a target does not.
    cell = search.check_cell(_target(_right, "torch-right"), "float32",
                             search.CheckOptions(max_examples=40, seed=1, compare_naive=False))
    assert cell.wide_probe.startswith("wide-offsets: 2 case(s)"), cell.wide_probe
    assert cell.features["offsets:float-exact"] >= 1 and not cell.features.get("offsets:wide")


def test_an_estimate_a_little_over_the_gate_from_a_small_case_is_taken_again_from_a_pilot() -> None:
    spec = SoftmaxSpec(dtype="float32", rows=3, length=16, tile=699052)
    case = SOFTMAX.SoftmaxCase(spec)
    work = search.probe_work(case)
    small = (65567, 0.0036)  # a millisecond's noise on a small case: 5.5 s estimated
    pilot = search.wide_pilot(case, 5.5, 3.0, small)
    assert pilot.spec == SoftmaxSpec(dtype="float32", rows=3, length=16, tile=699052 // search.WIDE_PILOT_SHARE)
    assert search.probe_work(pilot) * search.WIDE_PILOT_SHARE <= work
    assert search.wide_pilot(case, 2.9, 3.0, small) is None  # under the gate: the case runs
    assert search.wide_pilot(case, 3.0 * search.WIDE_PILOT_SHARE + 1, 3.0, small) is None  # the pilot would not fit
    assert search.wide_pilot(case, 5.5, 3.0, (work // 2, 1.0)) is None  # measured on as much as a pilot's work
    assert search.wide_pilot(SOFTMAX.SoftmaxCase(replace(spec, tile=31)), 5.5, 3.0, small) is None  # 1 repetition


def _at_float32_positions(t: torch.Tensor) -> torch.Tensor:
    """``t`` read back at positions made in float32 (torch.arange): exact up to 2**24 elements,
    past it an odd position rounds to an even neighbour and the entry read is the one beside it."""
    flat = t.reshape(-1)
    where = torch.arange(flat.numel(), dtype=torch.float32).to(torch.int64).clamp(max=flat.numel() - 1)
    return flat[where].reshape(t.shape)


def _float_positions(x: torch.Tensor) -> torch.Tensor:
    return _right(_at_float32_positions(x))


def _caught_past_2_24(target: Target, examples: int, tmp_path):
    """``target``'s float32 cell on the CPU, violated by a repetition of a wide case past 2**24."""
    opts = search.CheckOptions(max_examples=examples, seed=1, compare_naive=False, artifact_dir=str(tmp_path),
                               shrink=False)
    cell = search.check_cell(target, "float32", opts)
    assert cell.status == "violated", cell.wide_probe
    assert "repetition" in cell.violation.message and "repeated x" in cell.counterexample
    assert cell.features["offsets:float-exact"] >= 1 and not cell.features.get("offsets:wide")
    return cell


def test_on_the_cpu_the_probe_finds_positions_made_in_float32(tmp_path) -> None:
    cell = _caught_past_2_24(_target(_float_positions, "float-positions"), 40, tmp_path)
    art = artifacts.load(cell.artifact)
    assert art.inputs["x"].numel() * art.inputs["tile"] > 2**24


WIDTH = 2**25  # the patched wrap: 128 MiB of float32, past every ordinary case of the CPU profile


def _wrapping_at_width(x: torch.Tensor) -> torch.Tensor:
    """Right but for the offsets: a row's start is taken modulo WIDTH elements (a 25-bit
    unsigned wrap standing in for a 31-bit one), so rows past WIDTH read earlier memory."""
    n = x.shape[-1]
    flat = x.reshape(-1)
    starts = (torch.arange(x.numel() // n) * n) % WIDTH
    rows = flat[(starts[:, None] + torch.arange(n)).clamp(max=flat.numel() - 1)]
    return _right(rows).reshape(x.shape)


def _narrow(monkeypatch, strategy_module, width: int, **limits: int) -> None:
    """The wide-offsets probes at ``width`` elements (``limits``: the module's size limits too),
    allowed on the CPU."""
    for module in (LENGTHS, strategy_module):
        monkeypatch.setattr(module, "WIDE_OFFSET_ELEMENTS", width)
    for name, value in limits.items():
        monkeypatch.setattr(strategy_module, name, value)
    monkeypatch.setattr(search, "wide_offsets_allowed", lambda dtype, device, op="softmax": "")
    monkeypatch.setattr(search, "wide_offset_elements", lambda device: width)


@pytest.fixture
def narrow_wide_offsets(monkeypatch):
    _narrow(monkeypatch, SOFTMAX, WIDTH, WIDE_MAX_LENGTH=300)


def test_the_search_runs_the_probe_and_a_wrap_replays(narrow_wide_offsets, tmp_path) -> None:
    opts = search.CheckOptions(max_examples=40, seed=3, compare_naive=False, artifact_dir=str(tmp_path))
    right = search.check_cell(_target(_right, "torch-right"), "float32", opts)
    assert right.status == "passed" and right.wide_probe.startswith("wide-offsets: "), right.wide_probe
    assert right.features["offsets:wide"] >= 1
    # Ordinary cases stay below the width: only the probe shows the wrap.
    opts.shrink = False  # each wide case is 128 MiB
    wrapping = search.check_cell(_target(_wrapping_at_width, "wraps-at-2-25"), "float32", opts)
    assert wrapping.status == "violated", wrapping.wide_probe
    assert "repetition" in wrapping.violation.message and "repeated x" in wrapping.counterexample
    art = artifacts.load(wrapping.artifact)
    assert art.inputs["tile"] > 1 and art.inputs["x"].numel() * art.inputs["tile"] > WIDTH
    inputs, how = artifacts.replay_inputs(art, "cpu")  # as `python -m verify replay` gets them
    assert how.startswith("rebuilt from the spec") and inputs["tile"] == art.inputs["tile"], how
    again = engine.check_softmax_input(_target(_wrapping_at_width), inputs["x"], tile=inputs["tile"])
    assert not again.evaluation.ok


def test_a_pilot_is_checked_first_and_reported_apart(narrow_wide_offsets, monkeypatch, tmp_path) -> None:
    timed = search.wide_case_seconds

    def long_from_small_cases(widest, work):  # what a slow millisecond on a small case says
        seconds = timed(widest, work)
        small = widest is not None and widest[0] * search.WIDE_PILOT_SHARE * 2 < work  # not a pilot
        return 5.0 if small and seconds is not None else seconds

    monkeypatch.setattr(search, "wide_case_seconds", long_from_small_cases)
    # as if the largest case so far were small (a many-rows probe case may pass a pilot's work,
    # and then no pilot is due: the unit test above checks that guard)
    pilot_for = search.wide_pilot
    monkeypatch.setattr(search, "wide_pilot", lambda case, seconds, gate, widest: pilot_for(case, 5.0, gate, (1, 1.0)))
    opts = search.CheckOptions(max_examples=40, seed=3, compare_naive=False, artifact_dir=str(tmp_path), shrink=False)
    right = search.check_cell(_target(_right, "torch-right"), "float32", opts)
    assert right.status == "passed", right.violation
    assert right.wide_probe.startswith("wide-offsets: ") and "pilot(s) of 1/16" in right.wide_probe, right.wide_probe
    wrapping = search.check_cell(_target(_wrapping_at_width, "wraps-at-2-25"), "float32", opts)
    assert wrapping.status == "violated" and "repetition" in wrapping.violation.message
    # the pilot (a sixteenth: short of the width) passed; the case it timed is the one kept
    kept = artifacts.load(wrapping.artifact).inputs
    assert kept["tile"] * kept["x"].numel() > WIDTH  # the block's repetitions pass the width


def test_a_failure_the_probe_found_stands_when_shrinking_meets_a_case_the_gate_stops(narrow_wide_offsets, monkeypatch,
                                                                                       tmp_path) -> None:
    # Shrinking tries variants of the failing case; one the gate stops (too slow to try) used to
    # end the probe as "not tried" and the failure was lost (the eighth red team's band-mask
    # mutant: a violation at example 27, reported PASSED, 2026-12-06).
    failed_at: list = []

    def slow_past_the_failure(widest, work):  # fast, then slow for any variant of the failing case
        return 1e9 if failed_at and work != failed_at[0] else 0.1

    def wraps(x: torch.Tensor) -> torch.Tensor:
        out = _wrapping_at_width(x)
        if x.numel() > WIDTH and not failed_at:
            failed_at.append(x.shape[0] * (x.shape[1] + search.ROW_COST))
        return out

    monkeypatch.setattr(search, "wide_case_seconds", slow_past_the_failure)
    opts = search.CheckOptions(max_examples=40, seed=3, compare_naive=False, artifact_dir=str(tmp_path), shrink=True)
    cell = search.check_cell(_target(wraps, "wraps-at-2-25"), "float32", opts)
    assert failed_at and cell.status == "violated", (cell.wide_probe, cell.examples_to_first_failure)
    assert "repetition" in cell.violation.message and "repeated x" in cell.counterexample


# ---- attention ---------------------------------------------------------------------------------

ATTENTION = importlib.import_module("strategies.attention")


def _right_attention(q, k, v, *, scale, causal=False, mask=None):
    return reference.naive_attention(q, k, v, scale=scale, causal=causal, mask=mask,
                                     compute_dtype=torch.float64).to(q.dtype)


def _attention_target(fn, name: str = "a") -> Target:
    return Target(name, "attention", fn, CPU32, "test target")


def test_a_wide_attention_case_passes_2_31_elements_in_every_tensor_within_the_pair_limit() -> None:
    caps = Capabilities(max_pairs=65535)
    cases = _collect(attention_cases(dtypes=("float16",), caps=caps, max_seq=1024, head_dims=(16, 40, 64, 128, 256),
                                     wide_offsets=True, probe="wide-offsets"), 30)
    for case in cases:
        s = case.spec
        full = s.full_shapes
        assert s.batch == 1 and s.heads_q == s.heads_kv and s.layouts == ("contiguous",) * 3
        assert s.mask is None or s.mask_shape in ATTENTION.WIDE_MASK_SHAPES
        for name in "qkv":
            block = math.prod(s.shapes[name])
            assert 2**31 + block <= math.prod(full[name]) < 2**31 + 2 * block, (name, s)
            assert block & (block - 1) != 0, s
        assert full["q"][1] <= 65535, s  # the target's pair limit
        assert "offsets:wide" in case.features and "along the heads" in case.describe()
        assert case_from_dict(json.loads(json.dumps(s.to_dict()))).spec == s
    assert "wide-offsets" not in attention_probes()
    assert "wide-offsets" not in attention_probes(wide_offsets=True, caps=caps, max_seq=64, head_dims=(16,))


def test_every_head_repetition_is_checked() -> None:
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=gen) for _ in range(3))
    kw = dict(scale=0.3, causal=True, mask=None)
    assert engine.check_attention_input(_attention_target(_right_attention), q, k, v, **kw, tile=5).evaluation.ok

    def last_head_stale(q, k, v, **kw):
        out = _right_attention(q, k, v, **kw)
        out[:, -1] = out[:, 0]  # the last head written from the first's: a wrapped offset
        return out

    ev = engine.check_attention_input(_attention_target(last_head_stale), q, k, v, **kw, tile=5).evaluation
    assert not ev.ok and "repetition 4 of 5 (heads 8 to 9" in ev.violations[0].message, ev.violations
    assert ev.violations[0].index[1] == 9


def test_a_mask_expanded_over_the_heads_is_expanded_over_the_repeated_heads() -> None:
    # The "expanded" mask layout is a (1, H, Nq, Nk) view with zero strides over the heads;
    # repeated heads need it over H x tile heads, still one slab shared by all.
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=gen) for _ in range(3))
    keep = torch.rand(5, 7, generator=gen) > 0.4
    keep[:, 0] = True
    mask = keep.expand(1, 2, 5, 7)
    k, v = (torch.randn(1, 2, 7, 8, generator=gen) for _ in range(2))
    seen = []

    def right_and_shows_mask(q, k, v, **kw):
        seen.append((tuple(kw["mask"].shape), kw["mask"].stride(1)))
        return _right_attention(q, k, v, **kw)

    ev = engine.check_attention_input(_attention_target(right_and_shows_mask), q, k, v, scale=0.3, causal=False,
                                      mask=mask, tile=3).evaluation
    assert ev.ok, ev.violations
    assert seen[0] == ((1, 6, 5, 7), 0)


ATTENTION_WIDTH = 2**20  # the patched wrap for attention: 4 MiB of float32 a tensor


def _q_wrapping_at_width(q, k, v, **kw):
    """Right but for Q's addressing: a query row's start is taken modulo ATTENTION_WIDTH."""
    b, h, n, d = q.shape
    rows = q.reshape(-1, d)
    starts = (torch.arange(rows.shape[0]) * d) % ATTENTION_WIDTH
    return _right_attention(rows[starts // d].reshape(q.shape), k, v, **kw)


@pytest.fixture
def narrow_attention_offsets(monkeypatch):
    _narrow(monkeypatch, ATTENTION, ATTENTION_WIDTH, WIDE_MAX_SEQ=24)


def test_the_attention_probe_keeps_only_masks_that_leave_keys_to_weigh() -> None:
    # A row with one visible key (or none) outputs that key's V row (or 0) whatever Q was read:
    # the probe drops a mask that leaves most rows so (a leading block of every key under the
    # causal flag let a wrapped Q offset pass, CI 2026-12-07).
    from strategies.attention import _rows_weighing_keys
    from strategies.masks import MaskSpec

    assert _rows_weighing_keys(MaskSpec("leading-block", block=16), True, 16, 16) == 0.0
    assert _rows_weighing_keys(MaskSpec("leading-block", block=8), False, 16, 16) == 1.0
    assert _rows_weighing_keys(MaskSpec(), True, 16, 16) == 15 / 16
    assert _rows_weighing_keys(MaskSpec("single-unmasked"), False, 16, 16) == 0.0


def test_the_attention_probe_catches_a_wrap_and_runs_in_a_search(narrow_attention_offsets, tmp_path) -> None:
    strategy = attention_cases(dtypes=("float32",), caps=CPU32, max_seq=32, head_dims=(8, 16, 24),
                               wide_offsets=True, probe="wide-offsets")
    opts = search.CheckOptions(compare_naive=False)
    for case in _collect(strategy, 3):
        assert case.spec.tile > 1 and math.prod(case.spec.full_shapes["q"]) > ATTENTION_WIDTH
        assert search.run_case(_attention_target(_right_attention), case, opts).evaluation.ok
        wrapped = search.run_case(_attention_target(_q_wrapping_at_width), case, opts).evaluation
        assert not wrapped.ok and "repetition" in wrapped.violations[0].message, case.describe()
    cell = search.check_cell(_attention_target(_right_attention, "right-attention"), "float32",
                             search.CheckOptions(max_examples=52, seed=2, compare_naive=False,  # a probe round
                                                 artifact_dir=str(tmp_path)))
    assert cell.status == "passed" and cell.wide_probe.startswith("wide-offsets: 2 case(s)"), cell.wide_probe


def _float_positions_attention(q, k, v, *, scale, causal=False, mask=None):
    """Right but for Q's positions, made in float32 (_at_float32_positions)."""
    return reference.naive_attention(_at_float32_positions(q), k, v, scale=scale, causal=causal, mask=mask)


def test_on_the_cpu_the_attention_probe_finds_positions_made_in_float32(tmp_path) -> None:
    _caught_past_2_24(_attention_target(_float_positions_attention, "float-positions"), 100, tmp_path)


def test_program_units_and_the_work_count_rows_query_tiles_and_every_repetition() -> None:
    soft = _collect(softmax_cases(dtypes=("float32",), caps=CPU32, probe="wide-offsets", wide_offsets=True,
                                  wide_elements=2**24), 2)
    for case in soft:
        assert search.program_units(case) == case.spec.total_rows * case.spec.tile
        # the gate's work is the whole input the target gets, not the block (2**24 entries and more)
        assert search.probe_work(case) == case.spec.total_rows * (case.spec.length + search.ROW_COST) * case.spec.tile
        assert case.spec.total_rows * case.spec.length * case.spec.tile > 2**24
    attn = _collect(attention_cases(dtypes=("float32",), caps=CPU32, probe="wide-offsets", wide_offsets=True,
                                    wide_elements=2**24), 2)
    for case in attn:
        s = case.spec
        assert search.program_units(case) == s.batch * s.heads_q * s.tile * -(-s.seq_q // 64)
        assert search.probe_work(case) >= s.tile * s.batch * s.heads_q * s.seq_q * s.seq_k > s.seq_q * s.seq_k
        assert s.batch * s.heads_q * s.tile * s.seq_q * s.head_dim > 2**24


def test_the_gate_estimates_a_wide_case_from_the_last_wide_case_once_one_ran() -> None:
    # The numbers of CI's failure (CPU, 2026-12-07): the ordinary case with the most programs,
    # 320, took 0.415 s alone and past 2 ms a program under load; the first wide case, 266
    # programs, took 0.047 s; the next, of 13,130 programs, was put at 28 s by programs.
    slow_ordinary, widest = (320, 0.70), (15_736_832, 0.70)
    wide = (3_404_800, 266, 0.047)
    assert search.wide_estimate(9_873_760, 13_130, widest, slow_ordinary, None) > 20  # before: by programs
    by_work = search.wide_estimate(9_873_760, 13_130, widest, slow_ordinary, wide)
    assert by_work == pytest.approx(0.047 * 9_873_760 / 3_404_800)  # the wide case's rate: 0.2 ms a program
    # a kernel under the interpreter stays bound by its programs, by the wide case's own rate
    interpreted = (3_404_800, 266, 266 * 13e-3)
    assert search.wide_estimate(9_873_760, 13_130, widest, None, interpreted) == pytest.approx(13_130 * 13e-3)
    assert search.wide_estimate(9_873_760, 13_130, None, None, None) is None


def test_a_wide_case_the_gate_stops_is_not_saved_as_a_failure(monkeypatch) -> None:
    # The gate raises inside the property; Hypothesis would record the example in flight as a
    # failure, and later runs would replay an input that never failed.
    from hypothesis.database import InMemoryExampleDatabase

    monkeypatch.setattr(search, "wide_case_seconds", lambda widest, work: 1e9)
    db = InMemoryExampleDatabase()
    cell = search.check_cell(_target(_right, "torch-right"), "float32",
                             search.CheckOptions(max_examples=40, seed=None, compare_naive=False, database=db))
    assert cell.status == "passed" and cell.wide_probe.startswith("wide-offsets not tried: a case of"), cell.wide_probe
    failures = {k: v for k, v in db.data.items() if v and not k.endswith((b".pareto", b".secondary"))}
    assert not failures, f"{len(failures)} key(s) hold examples saved as failures"
