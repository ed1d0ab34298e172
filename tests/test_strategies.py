"""Tests of ``strategies``: feature coverage, deterministic replay, capabilities, argument checks.

All on CPU; the file runs in well under a minute.  Hypothesis runs here use
explicit, derandomized settings so the results do not depend on the profile.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math

import hypothesis
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, assume, find, given, settings
from hypothesis.errors import InvalidArgument, NoSuchExample
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

import strategies as S
import strategies.attention as attention_module
from strategies.attention import DECODE_KEYS_FACTOR, KEY_BROADCAST_SHAPES, QUERY_BROADCAST_SHAPES
from strategies.masks import mask_specs
from strategies.specials import SpecialSpec, edge_positions, special_specs
from verify.tolerance import ILL_CONDITIONED_ARGUMENT_ERROR
from strategies.lengths import INDEX_WIDTH_LENGTHS, LONG_BLOCKS, common_multiples, index_width_length
from strategies import (
    ATTENTION_FEATURES,
    FEATURES,
    SOFTMAX_FEATURES,
    AttentionCase,
    AttentionSpec,
    MaskSpec,
    SoftmaxCase,
    SoftmaxSpec,
    SpecialSpec,
    ValueRecipe,
    attention_cases,
    case_from_dict,
    length_features,
    lengths,
    softmax_cases,
)
from verify.capabilities import Capabilities
from verify.dtypes import FORMATS, get_format

ALL_DTYPES = tuple(FORMATS)
CAPS_ALL = Capabilities(dtypes=ALL_DTYPES)

_QUIET = dict(deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))


def checks(n: int = 40) -> settings:
    return settings(max_examples=n, **_QUIET)


def _bits(t: torch.Tensor) -> bytes:
    """The exact bytes of a tensor's logical elements (layout-independent)."""
    # A fresh row-major copy: .contiguous() may keep odd strides on size-1 dims.
    t = torch.empty(t.shape, dtype=t.dtype).copy_(t)
    if t.dtype == torch.bool:
        return t.numpy().tobytes()
    return t.view(torch.uint8).numpy().tobytes()


def _hash(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(_bits(t))
    return h.hexdigest()


# ---- feature vocabulary and reachability --------------------------------------------------


def test_vocabulary_is_a_closed_set_without_duplicates() -> None:
    assert len(set(FEATURES)) == len(FEATURES)
    assert set(SOFTMAX_FEATURES) | set(ATTENTION_FEATURES) == set(FEATURES)
    assert len(set(SOFTMAX_FEATURES)) == len(SOFTMAX_FEATURES)
    assert len(set(ATTENTION_FEATURES)) == len(ATTENTION_FEATURES)


_REACH_STRATEGIES = {
    "softmax": lambda **kw: softmax_cases(dtypes=ALL_DTYPES, caps=CAPS_ALL, **kw),
    # Nk up to 160 so that the multiple-of-128 lengths are in range.
    "attention": lambda **kw: attention_cases(dtypes=ALL_DTYPES, caps=CAPS_ALL, max_seq=160, **kw),
}


@functools.lru_cache(maxsize=None)
def _seen(op: str) -> frozenset[str]:
    """Features met in one seeded run of generation only (no shrinking): the cheap common path."""
    seen: set[str] = set()

    @settings(max_examples=400, phases=[Phase.generate], **_QUIET)
    @given(_REACH_STRATEGIES[op]())
    def run(case: SoftmaxCase | AttentionCase) -> None:
        assert set(case.features) <= set(FEATURES)
        seen.update(case.features)

    run()
    return frozenset(seen)


#: Features drawn only by a probe that the search forces, sized by the target's speed.
_FORCED_ONLY = {"rows:grid": dict(probe="grid-rows", grid_rows=65536),
                "offsets:wide": dict(probe="wide-offsets", wide_offsets=True),
                "offsets:float-exact": dict(probe="wide-offsets", wide_offsets=True, wide_elements=2**24),
                "attn:grid-heads": dict(probe="grid-heads", grid_pairs=65536),
                "attn:many-tiles": dict(probe="many-tiles", tiles_seq=258),
                "values:narrow": dict(probe="narrow-values"),
                "values:spread-ladder": dict(probe="spread-ladder")}


def _reachable(op: str, feature: str) -> None:
    if feature in _FORCED_ONLY:
        case = find(_REACH_STRATEGIES[op](**_FORCED_ONLY[feature]), lambda case: True,
                    settings=settings(max_examples=1, phases=[Phase.generate], **_QUIET))
        assert feature in case.features
        assert feature not in _seen(op)  # never drawn at random: such a case costs seconds on the CPU
        return
    if feature in _seen(op):
        return
    # Not met in the common run: search for it specifically (fails with NoSuchExample).
    find(
        _REACH_STRATEGIES[op](),
        lambda case: feature in case.features,
        settings=settings(max_examples=3000, phases=[Phase.generate], **_QUIET),
    )


@pytest.mark.parametrize("feature", SOFTMAX_FEATURES)
def test_softmax_feature_reachable(feature: str) -> None:
    _reachable("softmax", feature)


@pytest.mark.parametrize("feature", ATTENTION_FEATURES)
def test_attention_feature_reachable(feature: str) -> None:
    _reachable("attention", feature)


# ---- determinism and replay ---------------------------------------------------------------


@checks(60)
@given(softmax_cases(dtypes=ALL_DTYPES, caps=CAPS_ALL, max_length=200))
def test_softmax_build_is_deterministic_and_replays_through_json(case: SoftmaxCase) -> None:
    a, b = case.build(), case.build()
    assert a.dtype == get_format(case.spec.dtype).torch_dtype
    assert tuple(a.shape) == case.spec.shape
    assert a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
    assert _bits(a) == _bits(b)

    d = json.loads(json.dumps(case.spec.to_dict()))
    assert d["op"] == "softmax"
    replay = case_from_dict(d)
    assert isinstance(replay, SoftmaxCase)
    assert replay.spec == case.spec and replay.features == case.features
    assert _bits(replay.build()) == _bits(a)
    assert "\n" not in case.describe() and f"seed={case.spec.seed}" in case.describe()
    assert eval(repr(case), {"case_from_dict": case_from_dict}).spec == case.spec


def test_a_row_shift_moves_each_row_by_its_step_and_leaves_softmax_alone() -> None:
    from strategies.softmax import ROW_SHIFT_STEPS, SoftmaxSpec
    plain = SoftmaxSpec("float64", rows=9, length=5, batch=2, seed=3)
    shifted = dataclasses.replace(plain, row_shift=753.0)
    a, b = plain.values().reshape(-1, 5), shifted.values().reshape(-1, 5)
    steps = np.array([ROW_SHIFT_STEPS[g % 7] for g in range(18)], dtype=np.float64)
    np.testing.assert_allclose(b - a, np.repeat(753.0 * steps[:, None], 5, axis=1), rtol=0, atol=1e-12)
    assert "rows:shifted" in SoftmaxCase(shifted).features and "row-shift=753" in SoftmaxCase(shifted).describe()
    assert case_from_dict(json.loads(json.dumps(shifted.to_dict()))).spec == shifted
    assert "row_shift" not in plain.to_dict()  # specs saved before the field replay unchanged
    torch.testing.assert_close(torch.softmax(shifted.build(), -1), torch.softmax(plain.build(), -1), rtol=1e-12,
                               atol=0)


@checks(30)
@given(attention_cases(dtypes=ALL_DTYPES, caps=CAPS_ALL, max_seq=40))
def test_attention_build_is_deterministic_and_replays_through_json(case: AttentionCase) -> None:
    x, y = case.build(), case.build()
    for name in "qkv":
        tx, ty = getattr(x, name), getattr(y, name)
        assert tuple(tx.shape) == case.spec.shapes[name]
        assert tx.stride() == ty.stride() and tx.storage_offset() == ty.storage_offset()
        assert _bits(tx) == _bits(ty)
    assert (x.mask is None) == (y.mask is None)
    if x.mask is not None:
        assert x.mask.dtype == torch.bool and torch.equal(x.mask, y.mask)

    replay = case_from_dict(json.loads(json.dumps(case.spec.to_dict())))
    assert isinstance(replay, AttentionCase)
    assert replay.spec == case.spec and replay.features == case.features
    z = replay.build()
    assert _hash(z.q, z.k, z.v) == _hash(x.q, x.k, x.v)
    assert z.scale == x.scale and z.causal == x.causal
    assert "\n" not in case.describe()


def test_softmax_golden_bits() -> None:
    # Pins the random streams and the rounding: a change here breaks replay of stored specs.
    spec = SoftmaxSpec(
        dtype="bfloat16",
        rows=3,
        length=37,
        recipes=(ValueRecipe("normal", scale=5.0, offset=3e4), ValueRecipe("outliers", scale=1.0, gap=100.0, rate=0.01)),
        mask=MaskSpec("random", density=0.5),
        specials=(SpecialSpec("nan", "x", (1, 3)),),
        layout="row-padded",
        seed=7,
    )
    t = case_from_dict(spec.to_dict()).build()
    assert t.stride() == (40, 1)
    assert _hash(t) == "ad369e645d4f531459800b11a209239133d1a6b18a57bf8a1d93936c8839e2f2"


def test_attention_golden_bits() -> None:
    spec = AttentionSpec(
        dtype="float16",
        batch=2,
        heads_q=4,
        heads_kv=2,
        seq_q=5,
        seq_k=17,
        head_dim=40,
        causal=True,
        mask=MaskSpec("key-padding", pads=(3, 0)),
        mask_shape="b11k",
        k=ValueRecipe("cancellation", scale=0.5, offset=1000.0),
        v=ValueRecipe("full-range", scale=0.0),
        layouts=("bnhd", "contiguous", "strided-seq"),
        seed=11,
    )
    x = spec.build()
    assert tuple(x.mask.shape) == (2, 1, 1, 17) and x.q.stride() == (800, 40, 160, 1)
    assert _hash(x.q, x.k, x.v, x.mask) == "7c2dedc53ace8b4747be22c3b007935bb06a617a542b87b7704b4e837c135d66"
    # Key padding per batch entry: the last 3 keys of batch 0 masked, nothing in batch 1.
    assert x.mask[0, 0, 0].tolist() == [True] * 14 + [False] * 3 and bool(x.mask[1].all())


def test_noncontiguous_layouts_are_poisoned_and_keep_values() -> None:
    base = SoftmaxSpec(dtype="float32", rows=4, length=9, seed=3)
    reference = base.build()
    for layout in ("row-padded", "transposed", "strided", "misaligned"):
        t = dataclasses.replace(base, layout=layout).build()
        assert torch.equal(t, reference), layout
        if layout != "misaligned":
            assert not t.is_contiguous()
        else:
            assert t.is_contiguous() and t.storage_offset() == 1
    padded = dataclasses.replace(base, layout="row-padded").build()
    storage = torch.as_strided(padded, (padded.untyped_storage().nbytes() // 4,), (1,), 0)
    assert torch.isnan(storage).sum() == 3 * 4  # the gaps hold NaN


# ---- capabilities and finiteness ----------------------------------------------------------


@checks(60)
@given(softmax_cases(dtypes=ALL_DTYPES, caps=CAPS_ALL))
def test_softmax_values_are_finite_apart_from_masks_and_specials(case: SoftmaxCase) -> None:
    clean = dataclasses.replace(case.spec, mask=MaskSpec(), specials=())
    t = clean.build().double()
    assert torch.isfinite(t).all()
    fmt = get_format(case.spec.dtype)
    assert t.abs().max() <= fmt.max_finite
    if not fmt.has_inf:
        assert not torch.isinf(case.build().double()).any()


@checks(50)
@given(softmax_cases(dtypes=ALL_DTYPES, caps=CAPS_ALL.with_(neg_inf=False)))
def test_softmax_no_neg_inf_without_the_capability(case: SoftmaxCase) -> None:
    assert case.spec.mask.kind == "none"
    assert not (case.build().double() == -math.inf).any()


@checks(50)
@given(softmax_cases(dtypes=ALL_DTYPES, caps=CAPS_ALL.with_(neg_inf=False, special_values=False)))
def test_softmax_all_finite_without_masks_and_specials(case: SoftmaxCase) -> None:
    assert torch.isfinite(case.build().double()).all()
    assert not {"special:nan", "special:+inf"} & set(case.features)


@checks(30)
@given(softmax_cases(dtypes=ALL_DTYPES, masks=False, special_values=False))
def test_softmax_switches_turn_features_off(case: SoftmaxCase) -> None:
    assert torch.isfinite(case.build().double()).all()


@checks(30)
@given(
    softmax_cases(
        dtypes=("float32", "bfloat16", "float16"),
        caps=Capabilities(dtypes=("bfloat16", "float16"), min_length=5, max_length=40, noncontiguous=False),
    )
)
def test_softmax_respects_dtypes_lengths_and_layout(case: SoftmaxCase) -> None:
    assert case.spec.dtype in ("bfloat16", "float16")
    assert 5 <= case.spec.length <= 40
    t = case.build()
    assert t.is_contiguous() and t.storage_offset() == 0


@checks(25)
@given(softmax_cases(dtypes=ALL_DTYPES, caps=CAPS_ALL, elementwise=True))
def test_softmax_elementwise_values_are_stored_exactly(case: SoftmaxCase) -> None:
    spec = case.spec
    assert "values:explicit" in case.features and spec.rows * spec.length <= 64
    clean = dataclasses.replace(spec, mask=MaskSpec(), specials=())
    # rows x length, whether built 2-D or, one row, 1-D
    assert clean.build().double().reshape(spec.rows, spec.length).tolist() == [list(r) for r in spec.explicit]


@checks(40)
@given(attention_cases(dtypes=ALL_DTYPES, caps=CAPS_ALL, max_seq=48, index_widths=False, probes=False))
def test_attention_shapes_bounds_and_mask_broadcast(case: AttentionCase) -> None:
    s = case.spec
    x = case.build()
    assert s.heads_q % s.heads_kv == 0
    assert 1 <= s.batch <= 2 and 1 <= s.heads_q <= 4 and 1 <= s.seq_q <= 48 and 1 <= s.seq_k <= 48
    dtype = get_format(s.dtype).torch_dtype
    assert x.q.dtype == x.k.dtype == x.v.dtype == dtype
    if x.mask is not None:
        full = (s.batch, s.heads_q, s.seq_q, s.seq_k)
        assert torch.broadcast_shapes(tuple(x.mask.shape), full) == full
    assert x.scale == (1 / math.sqrt(s.head_dim) if s.scale is None else s.scale)

    clean = dataclasses.replace(s, specials=()).build()
    q, k, v = (t.double() for t in (clean.q, clean.k, clean.v))
    assert torch.isfinite(q).all() and torch.isfinite(k).all() and torch.isfinite(v).all()
    # V within half the format's range, and an unnormalised sum over the keys finite in the
    # compute format (float32, or float64 for float64 inputs).
    assert v.abs().max() <= get_format(s.dtype).max_finite / 2
    assert v.abs().max() * s.seq_k <= FORMATS["float64" if s.dtype == "float64" else "float32"].max_finite / 2
    # Scores fit the compute format whichever way the kernel orders the product.
    group = s.heads_q // s.heads_kv
    kk = k.repeat_interleave(group, dim=1)
    compute_max = torch.finfo(torch.float64 if s.dtype == "float64" else torch.float32).max
    raw = (q @ kk.transpose(-1, -2)).abs().max()
    assert raw <= compute_max and raw * abs(x.scale) <= compute_max


@checks(40)
@given(
    attention_cases(
        caps=Capabilities(
            head_dim_min=16, head_dim_max=128, head_dim_multiple=8, gqa=False, noncontiguous=False,
            special_values=False, neg_inf=False, min_length=3, max_length=20,
        )
    )
)
def test_attention_respects_restrictive_caps(case: AttentionCase) -> None:
    s = case.spec
    assert 16 <= s.head_dim <= 128 and s.head_dim % 8 == 0
    assert s.heads_q == s.heads_kv
    assert 3 <= s.seq_q <= 20 and 3 <= s.seq_k <= 20
    assert s.mask is None and not s.causal
    x = case.build()
    for t in (x.q, x.k, x.v):
        assert t.is_contiguous() and t.storage_offset() == 0
        assert torch.isfinite(t.double()).all()


@checks(40)
@given(attention_cases(caps=Capabilities(causal_with_mask=False)))
def test_attention_causal_and_mask_exclusive_when_required(case: AttentionCase) -> None:
    assert not (case.spec.causal and case.spec.mask is not None)


@checks(40)
@given(attention_cases(caps=Capabilities(causal_square_only=True)))
def test_attention_causal_square_only(case: AttentionCase) -> None:
    assert not case.spec.causal or case.spec.seq_q == case.spec.seq_k


@checks(60)
@given(attention_cases(caps=Capabilities(mask_unit_stride=True), max_seq=16, index_widths=False, probes=False))
def test_attention_mask_unit_stride(case: AttentionCase) -> None:
    assert case.spec.mask_layout != "transposed"
    mask = case.build().mask
    if mask is not None and mask.shape[-1] > 1:
        assert mask.stride(-1) == 1, case.spec.mask_layout


def test_attention_mask_unit_stride_keeps_other_layouts() -> None:
    strategy = attention_cases(caps=Capabilities(mask_unit_stride=True))
    quick = settings(max_examples=800, phases=[Phase.generate], **_QUIET)
    for layout in ("sliced", "expanded"):
        find(strategy, lambda c, layout=layout: c.spec.mask_layout == layout, settings=quick)


def test_attention_causal_square_only_keeps_ragged_and_causal_cases() -> None:
    strategy = attention_cases(caps=Capabilities(causal_square_only=True))
    quick = settings(max_examples=500, phases=[Phase.generate], **_QUIET)
    find(strategy, lambda c: not c.spec.causal and c.spec.seq_q != c.spec.seq_k, settings=quick)
    find(strategy, lambda c: c.spec.causal and c.spec.seq_q > 1, settings=quick)


@checks(30)
@given(attention_cases(caps=Capabilities(causal=False, bool_mask=False)))
def test_attention_no_causal_no_mask(case: AttentionCase) -> None:
    assert not case.spec.causal and case.spec.mask is None


@checks(30)
@given(attention_cases(head_dims=(40, 72)))
def test_attention_explicit_head_dims(case: AttentionCase) -> None:
    assert case.spec.head_dim in (40, 72)


def test_default_head_dims_cover_small_and_non_power_of_two() -> None:
    dims = S.INTERESTING_HEAD_DIMS
    assert {1, 2, 3, 8, 40, 72, 80, 96, 120, 256} <= set(dims)
    assert list(dims) == sorted(dims)  # smallest first: shrinking goes to small D


# ---- recipes do what they say --------------------------------------------------------------


def _rows(recipe: ValueRecipe, dtype: str, length: int = 200, seed: int = 0) -> np.ndarray:
    spec = SoftmaxSpec(dtype=dtype, rows=4, length=length, recipes=(recipe,), seed=seed)
    return spec.build().double().numpy()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "float8_e5m2"])
def test_very_negative_rows_stay_below_minus_1e4(dtype: str) -> None:
    x = _rows(ValueRecipe("very-negative", scale=100.0, offset=-1.25e4), dtype)
    assert (x < -1e4).all()


def test_very_negative_not_offered_where_unrepresentable() -> None:
    from strategies.values import available_kinds

    assert "very-negative" not in available_kinds(FORMATS["float8_e4m3fn"], ("very-negative",), 448.0)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_full_range_rows_reach_both_ends(dtype: str) -> None:
    x = _rows(ValueRecipe("full-range", scale=0.0), dtype)
    top = FORMATS[dtype].max_finite
    assert (x.max(axis=1) == top).all() and (x.min(axis=1) == -top).all()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_near_underflow_values_are_mostly_subnormal_in_the_input_format(dtype: str) -> None:
    """The V kind near-underflow, as value_recipes draws it for the dtype: most entries below the
    format's smallest normal (stored as such, none rounded to 0), some normal, none above 8
    smallest normals, with the signs its count picks; a recipe with no range is refused."""
    from strategies.values import UNDERFLOW_SIGNS, _interpret

    fmt = FORMATS[dtype]
    for count, sign in enumerate(UNDERFLOW_SIGNS):
        recipe = _interpret(fmt, fmt.max_finite, "near-underflow", 1.0, 0.0, 4 * count + 3)
        assert recipe.count == count and recipe.scale == 8 * fmt.smallest_normal
        x = _rows(recipe, dtype, length=512)
        nonzero = x[x != 0]
        assert nonzero.size == x.size  # twice the smallest subnormal and up: nothing rounds to 0
        subnormal = (np.abs(x) < fmt.smallest_normal).mean()
        assert 0.6 <= subnormal < 1 and (np.abs(x) <= 8 * fmt.smallest_normal).all()
        assert {"mixed": (x < 0).any() and (x > 0).any(), "positive": (x > 0).all(),
                "negative": (x < 0).all()}[sign]
        assert recipe.describe().startswith("near-underflow(") and f"signs={sign}" in recipe.describe()
    with pytest.raises(ValueError, match="near-underflow needs 0 < gap"):
        ValueRecipe("near-underflow", scale=1e-38)


def test_ties_and_dominant_and_outliers() -> None:
    ties = _rows(ValueRecipe("ties", scale=1.0, count=5), "float32")
    assert ((ties == ties.max(axis=1, keepdims=True)).sum(axis=1) >= 5).all()
    dom = np.sort(_rows(ValueRecipe("dominant", scale=1.0, gap=100.0), "float32"), axis=1)
    assert (dom[:, -1] - dom[:, -2] >= 99.0).all()
    out = _rows(ValueRecipe("outliers", scale=1.0, gap=100.0, rate=0.001), "float32", length=16)
    assert np.abs(out).max() >= 100.0


def test_dominant_margins_leave_no_wide_hole_between_2_and_110() -> None:
    """A kernel that drops terms below a fixed cut-off is wrong where many sit just under it:
    the margins a dominant recipe can take must not step over any cut-off by much."""
    from strategies.values import _interpret

    gaps = sorted({_interpret(FORMATS["float32"], 1e30, "dominant", 1.0, 0.0, p).gap for p in range(256)})
    band = [g for g in gaps if 2.0 <= g <= 110.0]
    assert band[0] == 2.0 and band[-1] > 105.0
    assert max(b / a for a, b in zip(band, band[1:])) < 1.37
    assert max(b / a for a, b in zip(band, band[1:]) if a >= 5.0) < 1.1
    assert _interpret(FORMATS["float32"], 1e30, "dominant", 1.0, 0.0, 0).gap == 20.0  # shrinks to a rung


def test_seq_drift_rises_along_the_sequence_axis() -> None:
    rng = np.random.default_rng(0)
    x = ValueRecipe("seq-drift", scale=0.0, offset=1.0, gap=10.0).sample(rng, (5, 3), FORMATS["float32"], 1e30)
    assert x.tolist() == [[1.0 + 2.5 * i] * 3 for i in range(5)]
    falling = ValueRecipe("seq-drift", scale=0.0, gap=-4.0).sample(rng, (2, 1, 3, 2), FORMATS["float32"], 1e30)
    assert falling[1, 0, :, 0].tolist() == [0.0, -2.0, -4.0]
    with pytest.raises(AssertionError, match="seq-drift draws a Q, K or V tensor"):
        ValueRecipe("seq-drift", gap=1.0).sample(rng, (4,), FORMATS["float32"], 1e30)


def test_seq_drift_geometric_rises_by_whole_octaves() -> None:
    # rate > 0: position i gains gap * 2**-floor(rate * (n - 1 - i)), exact powers of two
    rng = np.random.default_rng(0)
    x = ValueRecipe("seq-drift", scale=0.0, offset=0.5, gap=8.0, rate=0.8).sample(rng, (6, 2), FORMATS["float32"], 1e30)
    assert x[:, 0].tolist() == [0.5 + 8.0 * 2.0**-e for e in (4, 3, 2, 1, 0, 0)]  # floor(0.8 * (5 .. 0))
    assert (x[:, 0] == x[:, 1]).all()
    assert ValueRecipe("seq-drift", gap=1.0, rate=0.8).describe() == "seq-drift(scale=1, rise=1, octaves=0.8)"


def test_slab_levels_put_each_slab_at_its_own_magnitude() -> None:
    recipe = ValueRecipe("slab-levels", scale=1.0, gap=3.0)
    peaks = [np.abs(recipe.sample(np.random.default_rng(i), (64, 4), FORMATS["float32"], 1e30)).max() for i in range(64)]
    assert max(peaks) / min(peaks) > 100


def test_cancellation_is_a_few_ulps_around_a_large_offset() -> None:
    x = _rows(ValueRecipe("cancellation", scale=1e-2, offset=3e4), "float32")
    assert (np.abs(x - 3e4) < 0.1).all() and len(np.unique(x)) > 4


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_subnormal_output_rows_reach_the_subnormal_range(dtype: str) -> None:
    fmt = FORMATS[dtype]
    width = -math.log(fmt.smallest_subnormal) * 1.05
    x = _rows(ValueRecipe("subnormal-output", scale=width), dtype)
    p = np.exp(x - x.max(axis=1, keepdims=True))
    assert ((p >= fmt.smallest_subnormal) & (p < fmt.smallest_normal)).any(axis=1).all()


def test_mixed_ranges_use_each_recipe() -> None:
    spec = SoftmaxSpec(
        dtype="float32", rows=3, length=50, recipes=(ValueRecipe("normal", scale=1e-3), ValueRecipe("normal", scale=1e4))
    )
    x = spec.build().double()
    assert x[0].abs().max() < 1 and x[1].abs().max() > 100 and x[2].abs().max() < 1
    assert "rows:mixed-ranges" in SoftmaxCase(spec).features


def test_staggered_masks_move_from_one_group_to_the_next() -> None:
    rng = np.random.default_rng(0)
    lead = MaskSpec("leading-block", block=16, stagger=1)
    assert lead.keep(2, 20, rng)[:, :16].sum() == 0 and lead.keep(2, 20, rng)[:, 16:].all()  # group 0: as drawn
    assert lead.keep(1, 20, rng, group=3)[0].tolist() == [False] * 19 + [True]
    causal = MaskSpec("causal", offset=0, stagger=2)
    assert causal.keep(3, 6, rng, group=1).sum(axis=1).tolist() == [3, 4, 5]
    window = MaskSpec("sliding-window", window=2, offset=0, stagger=1)
    assert window.keep(2, 4, rng, group=1).tolist() == [[True, True, False, False], [False, True, True, False]]
    assert "stagger" not in MaskSpec("causal", offset=1).to_dict()  # cases saved before it replay as they were
    assert MaskSpec.from_dict(causal.to_dict()) == causal and causal.describe().endswith("-staggered-2")
    with pytest.raises(ValueError, match="stagger applies to the kinds"):
        MaskSpec("random", density=0.5, stagger=1)


def test_dead_rows_lie_over_any_mask_kind_and_move_from_one_group_to_the_next() -> None:
    rng = np.random.default_rng(0)
    pads = MaskSpec("key-padding", pads=(2,), dead_rows=(3,))
    keep = pads.keep(4, 6, rng)
    assert keep.sum(axis=1).tolist() == [4, 4, 4, 0]
    assert pads.keep(4, 6, rng, group=1).sum(axis=1).tolist() == [0, 4, 4, 4]  # row 3 + 1, modulo 4
    assert not MaskSpec("random", density=0.0, dead_rows=(1,)).keep(3, 5, rng)[1].any()
    assert MaskSpec.from_dict(pads.to_dict()) == pads and pads.describe() == "key-padding[2]+dead-rows[3]"
    assert "dead_rows" not in MaskSpec("key-padding", pads=(2,)).to_dict()  # cases saved before it replay
    with pytest.raises(ValueError, match="non-negative"):
        MaskSpec("causal", dead_rows=(-1,))


def test_attention_cases_lay_dead_rows_over_drawn_masks() -> None:
    def dead_over_kind(case: AttentionCase) -> bool:
        m = case.spec.mask
        return m is not None and bool(m.dead_rows) and m.kind not in ("fully-masked-row", "random")

    found = find(attention_cases(dtypes=("float32",), max_seq=40), dead_over_kind,
                 settings=settings(max_examples=1000, database=None, phases=[Phase.generate], derandomize=True))
    s = found.spec
    visible = found.build().mask.expand(s.batch, s.heads_q, s.seq_q, s.seq_k).any(-1)
    assert not visible.all() and s.seq_q >= 2
    assert "mask:fully-masked-row" in found.features


def test_a_flip_inverts_one_entry_after_the_kind_and_replays() -> None:
    rng = np.random.default_rng(0)
    holed = MaskSpec("causal", flips=((3, 1),))  # a hole below the diagonal
    keep, causal = holed.keep(5, 5, rng), MaskSpec("causal").keep(5, 5, rng)
    assert (keep != causal).sum() == 1 and not keep[3, 1] and causal[3, 1]
    assert MaskSpec("causal", flips=((1, 3),)).keep(5, 5, rng)[1, 3]  # a key past the diagonal
    assert MaskSpec("causal", flips=((6, 8),)).keep(5, 5, rng)[1, 3]  # modulo the size
    both = MaskSpec("key-padding", pads=(2,), flips=((1, 4),), dead_rows=(1,))
    assert not both.keep(3, 5, rng)[1].any()  # the dead row lies over the flip
    assert MaskSpec.from_dict(json.loads(json.dumps(holed.to_dict()))) == holed
    assert holed.describe() == "causal(offset=0)+flips[[3, 1]]" and "mask:flipped" in holed.kind_features()
    assert "flips" not in MaskSpec("causal").to_dict()  # cases saved before it replay
    with pytest.raises(ValueError, match="non-negative"):
        MaskSpec("causal", flips=((1, -1),))


def test_attention_cases_hold_masks_a_test_of_their_first_row_and_diagonal_takes_for_causal() -> None:
    """A mask taken for causal by its first row and diagonal (the cheap test of a dispatcher) and
    run as the causal flag is wrong on a sliding window or a causal mask with a hole: the drawn
    cases hold such masks (SELF_ATTENTION_ODDS), and flipped entries lie inside the mask."""
    def looks_causal_but_is_not(case: AttentionCase) -> bool:
        s = case.spec
        if s.mask is None or s.seq_q != s.seq_k or s.seq_q < 3:
            return False
        keep = s.build().mask.expand(s.batch, s.heads_q, s.seq_q, s.seq_k)
        tri = torch.ones(s.seq_q, s.seq_k, dtype=torch.bool).tril()
        first_row, diagonal = keep[..., 0, :] == tri[0], keep.diagonal(dim1=-2, dim2=-1).all()
        return bool(first_row.all() and diagonal and not (keep == tri).all())

    def broadcast_axis_confusable(case: AttentionCase) -> bool:
        """A mask broadcast over one axis, on square lengths, that differs from itself read
        along the other: what a kernel that tells the axes by their sizes gets wrong."""
        s = case.spec
        if s.mask is None or s.mask_shape not in KEY_BROADCAST_SHAPES + QUERY_BROADCAST_SHAPES or s.seq_q != s.seq_k:
            return False
        keep = s.build().mask.expand(s.batch, s.heads_q, s.seq_q, s.seq_k)
        return not torch.equal(keep, keep.transpose(-1, -2))

    strategy = attention_cases(dtypes=("float32",), max_seq=40)
    found: list = []
    flipped: list = []
    confusable: list = []

    @settings(max_examples=600, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(case: AttentionCase) -> None:
        if looks_causal_but_is_not(case):
            found.append(case.spec.mask)
        if case.spec.mask is not None and case.spec.mask.flips:
            flipped.append(case)
        if broadcast_axis_confusable(case):
            confusable.append(case.spec.mask_shape)

    # Six seeds: one seed's count swings from 0 to 6 with any change to the draws, and with the
    # modules loaded (Hypothesis mixes every loaded local module's constants into its draws;
    # conftest loads them all first).  8 over these seeds at 7326d66 (0, 0, 2, 0, 6, 0), 2026-12-06.
    for s in range(1, 7):
        hypothesis.seed(s)(draw)()
    assert len(found) >= 4 and all(m.kind in ("causal", "sliding-window") and m.offset == 0 for m in found), found
    assert flipped
    # broadcast masks on square lengths that read differently along the other axis, over both
    # axes (SQUARE_BROADCAST_ODDS): 142 at these seeds (2026-12-06)
    assert len(confusable) >= 4 and {shape[-1] for shape in confusable} == {"1", "k"}, confusable
    for case in flipped:
        (row, col), = case.spec.mask.flips
        assert 1 <= row <= case.spec.seq_q - 2 and 1 <= col <= case.spec.seq_k - 2
        assert "mask:flipped" in case.features


def test_a_per_head_staggered_mask_differs_within_a_gqa_group() -> None:
    # A kernel that loads one head's mask for its whole group (a packed GQA tile) must go wrong.
    spec = AttentionSpec(dtype="float32", batch=1, heads_q=4, heads_kv=2, seq_q=3, seq_k=40, head_dim=8,
                         mask=MaskSpec("leading-block", block=16, stagger=1), mask_shape="1hqk")
    keep = spec.build().mask
    assert tuple(keep.shape) == (1, 4, 3, 40)
    assert [int((~keep[0, h, 0]).sum()) for h in range(4)] == [16, 17, 18, 19]


def test_gqa_cases_draw_per_head_masks_that_differ_within_a_group() -> None:
    def differs(case: AttentionCase) -> bool:
        s = case.spec
        group = s.heads_q // s.heads_kv
        if group == 1 or s.mask is None:
            return False
        full = case.build().mask.expand(s.batch, s.heads_q, s.seq_q, s.seq_k)
        return not torch.equal(full, full[:, torch.arange(s.heads_q) // group * group])

    found = find(attention_cases(dtypes=("float32",), max_seq=40), differs,
                 settings=settings(max_examples=1000, database=None, phases=[Phase.generate], derandomize=True))
    assert found.spec.heads_q > found.spec.heads_kv


def test_masks_shapes() -> None:
    rng = np.random.default_rng(0)
    assert MaskSpec("leading-block", block=16).keep(2, 20, rng)[:, :16].sum() == 0
    causal = MaskSpec("causal", offset=2).keep(3, 6, rng)  # bottom-right for 3 x 5 would be offset 2
    assert causal.sum(axis=1).tolist() == [3, 4, 5]
    window = MaskSpec("sliding-window", window=2, offset=0).keep(4, 4, rng)
    assert window.sum(axis=1).tolist() == [1, 2, 2, 2]
    one = MaskSpec("single-unmasked").keep(5, 7, rng)
    assert one.sum(axis=1).tolist() == [1] * 5
    pads = MaskSpec("key-padding", pads=(2, 7)).keep(2, 7, rng, per_row=True)
    assert pads.sum(axis=1).tolist() == [5, 0]
    left = MaskSpec("key-padding", pads=(3,), side="start")
    assert left.keep(2, 7, rng).tolist() == [[False] * 3 + [True] * 4] * 2
    assert MaskSpec.from_dict(left.to_dict()) == left and "side" not in MaskSpec("key-padding", pads=(3,)).to_dict()
    assert "mask:left-padding" in left.kind_features()
    with pytest.raises(ValueError, match="side must be one of"):
        MaskSpec("key-padding", pads=(1,), side="left")


def test_key_padding_sorted_longest_first_leaves_the_first_group_unpadded() -> None:
    """PAD_ORDERS: in a batch sorted longest first, the first row (or batch entry) hides nothing
    and the next one hides some keys, whatever pads were drawn."""
    from strategies.masks import _interpret

    rng = np.random.default_rng(0)
    for pad_b in (0, 3, 7):
        spec = _interpret(4, 7, "key-padding", 0.5, 1, 16, 1, "top-left", 0, 5, pad_b, "end", 0, "longest-first")
        keep = spec.keep(4, 7, rng, per_row=True)
        assert keep[0].all() and not keep[1].all() and spec.pads[0] == 0
    drawn = _interpret(4, 7, "key-padding", 0.5, 1, 16, 1, "top-left", 0, 5, 3, "end", 0, "as-drawn")
    assert drawn.pads == (5, 3)
    seen = find(mask_specs(4, 7, kinds=("key-padding",)), lambda m: m.pads[0] == 0 and len(m.pads) == 2,
                settings=settings(max_examples=200, database=None, derandomize=True))
    assert not seen.keep(4, 7, rng, per_row=True)[1].all()
    spec = SoftmaxSpec(dtype="float32", rows=3, length=8, mask=MaskSpec("fully-masked-row", rows=(4,)))
    t = spec.build()
    assert (t[1] == -math.inf).all() and torch.isfinite(t[0]).all()
    assert "mask:fully-masked-row" in SoftmaxCase(spec).features


# ---- lengths and shrinking -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "expected", "absent"),
    [
        (1, {"len:1"}, {"len:prime"}),
        (127, {"len:prime", "len:2^k-1", "len:mult128-1", "len:mult64-1"}, {"len:mult128"}),
        (128, {"len:2^k", "len:mult128", "len:mult16"}, {"len:2^k+1"}),
        (129, {"len:2^k+1", "len:mult128+1", "len:mult16+1"}, {"len:prime"}),
        (47, {"len:prime", "len:mult16-1"}, {"len:mult32-1"}),
        (17, {"len:prime", "len:2^k+1", "len:mult16+1"}, set()),
        (97, {"len:prime", "len:odd-tile-edge", "len:mult16+1", "len:mult32+1"}, {"len:tail2-3"}),
        (202, {"len:tail2-3"}, {"len:prime", "len:odd-tile-edge"}),  # 2 * 100 + 2
        (99, {"len:tail2-3", "len:odd-tile-edge"}, set()),  # 96 + 3, and 100 - 1
        (47, {"len:odd-tile-edge"}, {"len:tail2-3"}),
        (239, {"len:multi-tile-edge", "len:mult16-1"}, set()),  # 240 fills tiles of 16, 48 and 80
        (300, set(), {"len:multi-tile-edge"}),  # a multiple of 100 alone of the tile widths
        (64, set(), {"len:multi-tile-edge"}),  # powers of two alone
    ],
)
def test_length_features(n: int, expected: set[str], absent: set[str]) -> None:
    found = set(length_features(n))
    assert expected <= found and not absent & found


def test_lengths_reach_every_kind_and_stay_in_range() -> None:
    seen: set[int] = set()

    @settings(max_examples=300, phases=[Phase.generate], **_QUIET)
    @given(lengths(3, 300))
    def run(n: int) -> None:
        assert 3 <= n <= 300
        seen.add(n)

    run()
    assert {300, 3} <= seen
    assert any(n in (127, 255) for n in seen) and any(n in (129, 257) for n in seen)
    assert any(length_features(n) and "len:prime" in length_features(n) and n > 100 for n in seen)
    # tails relative to tiles that are not powers of two, and tails of two or three
    assert any(n > 96 and n % 96 in (1, 95) or n > 100 and n % 100 in (1, 99) for n in seen)
    assert any(n > 16 and n % 16 in (2, 3) for n in seen)
    # lengths that fill the last tile of several tilings at once (240: 16, 48 and 80)
    assert any(n in common_multiples(n, n) and n % 80 == 0 for n in seen)


def test_common_multiples() -> None:
    assert common_multiples(1, 300) == (48, 80, 96, 112, 144, 160, 176, 192, 208, 224, 240, 288)
    assert common_multiples(81, 200) == (96, 112, 144, 160, 176, 192)
    assert common_multiples(1, 47) == ()
    assert common_multiples(1, 1000, LONG_BLOCKS) == ()  # powers of two alone: the power-of-two kinds


def test_special_positions_reach_the_ragged_tail() -> None:
    # The last column lies in the ragged tail of every tiling of a row of 65: a kernel whose
    # tail loop drops NaN shows only there, and uniform positions put one there 1 time in 65.
    assert edge_positions(65) == (15, 16, 31, 32, 47, 48, 63, 64)
    assert edge_positions(1) == (0,) and edge_positions(2) == (1,)
    cols: list[int] = []

    @settings(max_examples=200, phases=[Phase.generate], **_QUIET)
    @given(special_specs(("nan",), (("x", (1000, 65)),)))  # many rows: few repeated examples
    def run(spec: SpecialSpec) -> None:
        assert 0 <= spec.index[0] < 1000 and 0 <= spec.index[1] < 65
        cols.append(spec.index[1])

    run()
    assert cols.count(64) >= len(cols) // 6 and len(set(cols)) > 20


def test_lengths_narrow_range() -> None:
    assert find(lengths(5, 5), lambda n: True, settings=settings(phases=[Phase.generate], **_QUIET)) == 5


def test_shrinking_goes_to_simple_cases() -> None:
    # No explain phase: it re-runs many variations of the result and dominates the time.
    fast = settings(max_examples=200, phases=[Phase.generate, Phase.shrink], **_QUIET)
    assert find(lengths(1, 300), lambda n: n > 40, settings=fast) <= 64
    simplest = find(softmax_cases(), lambda c: True, settings=fast)
    assert simplest.describe() == "rows=1 len=1 fp32 normal(scale=1) seed=0"
    simplest = find(attention_cases(), lambda c: True, settings=fast)
    assert simplest.describe() == (
        "B=1 Hq=1 Hkv=1 Nq=1 Nk=1 D=1 fp32 scale=1/sqrt(D) q=normal(scale=1) k=normal(scale=1) v=normal(scale=1) seed=0"
    )
    masked = find(softmax_cases(), lambda c: "mask:fully-masked-row" in c.features, settings=fast)
    assert masked.spec.rows == 1 and masked.spec.length == 1 and masked.spec.recipes == (ValueRecipe(),)


# ---- argument validation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: softmax_cases(dtypes="float32"), "sequence of dtype names"),
        (lambda: softmax_cases(dtypes=()), "non-empty"),
        (lambda: softmax_cases(dtypes=("float13",)), "unknown dtype"),
        (lambda: softmax_cases(dtypes=("tfloat32",)), "compute precision"),
        (lambda: softmax_cases(dtypes=("float32",), caps=Capabilities(dtypes=("bfloat16",))), "caps.dtypes"),
        (lambda: softmax_cases(dtypes=("float8_e4m3fn",)), "caps.dtypes"),
        (lambda: softmax_cases(max_length=0), "at least 1"),
        (lambda: softmax_cases(max_length=3, caps=Capabilities(min_length=5)), "caps.min_length=5"),
        (lambda: softmax_cases(max_rows="8"), "max_rows must be int"),
        (lambda: softmax_cases(max_rows=True), "bool"),
        (lambda: softmax_cases(special_values="yes"), "True, False or None"),
        (lambda: softmax_cases(special_values=True, caps=Capabilities(special_values=False)), "special_values=False"),
        (lambda: softmax_cases(masks=True, caps=Capabilities(neg_inf=False)), "caps.neg_inf=False"),
        (lambda: softmax_cases(dtypes=("float8_e4m3fn",), caps=CAPS_ALL, masks=True), "-inf"),
        (lambda: softmax_cases(elementwise=True, caps=Capabilities(min_length=100)), "elementwise"),
        (lambda: softmax_cases(caps={"neg_inf": False}), "Capabilities"),
        (lambda: attention_cases(max_heads=0), "max_heads must be at least 1"),
        (lambda: attention_cases(max_seq=2, caps=Capabilities(min_length=4)), "max_seq"),
        (lambda: attention_cases(head_dims=64), "sequence of ints"),
        (lambda: attention_cases(head_dims=()), "must not be empty"),
        (lambda: attention_cases(head_dims=(64, 100), caps=Capabilities(head_dim_multiple=8)), "contains 100"),
        (lambda: attention_cases(caps=Capabilities(head_dim_min=300, head_dim_max=310, head_dim_multiple=400)), "no head dim"),
        (lambda: lengths(5, 3), "must not exceed"),
        (lambda: S.value_recipes("float32", ("gaussian",)), "unknown value kinds"),
    ],
)
def test_invalid_arguments_explain_themselves(make, message: str) -> None:
    with pytest.raises(InvalidArgument, match=None) as info:
        strategy = make()
        assert isinstance(strategy, SearchStrategy)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "bad",
    [
        {"op": "conv"},
        {"op": "softmax", "dtype": "float32", "rows": 1, "length": 4, "colour": "red"},
        {"op": "softmax", "dtype": "float32", "rows": -1, "length": 4},  # rows = 0: the no-rows probe
        {"op": "softmax", "dtype": "float32", "rows": 1, "length": 0},
        {"op": "softmax", "dtype": "float8_e4m3fn", "rows": 1, "length": 4, "mask": {"kind": "causal"}},
        {"op": "softmax", "dtype": "float32", "rows": 1, "length": 4, "layout": "diagonal"},
        {"op": "softmax", "dtype": "float32", "rows": 1, "length": 4, "row_shift": -1.0},
        {"op": "softmax", "dtype": "float32", "rows": 1, "length": 4, "recipes": [{"kind": "dominant", "count": 4}]},
        {"op": "attention", "dtype": "float32", "batch": 1, "heads_q": 3, "heads_kv": 2, "seq_q": 1, "seq_k": 1, "head_dim": 4},
        {"op": "attention", "dtype": "float32", "batch": 1, "heads_q": 1, "heads_kv": 1, "seq_q": 1, "seq_k": 1},
        # batch = 0 is the empty-batch probe; no other size may be 0
        {"op": "attention", "dtype": "float32", "batch": -1, "heads_q": 1, "heads_kv": 1, "seq_q": 1, "seq_k": 1, "head_dim": 4},
        {"op": "attention", "dtype": "float32", "batch": 0, "heads_q": 1, "heads_kv": 1, "seq_q": 0, "seq_k": 1, "head_dim": 4},
    ],
)
def test_bad_specs_are_rejected(bad: dict) -> None:
    with pytest.raises(ValueError, match="invalid"):
        case_from_dict(bad)


@checks(60)
@given(attention_cases(dtypes=("float16", "bfloat16", "float32"), max_seq=20,
                       caps=Capabilities(layout_alignment=16)))
def test_attention_layouts_meet_a_declared_alignment(case: AttentionCase) -> None:
    x = case.build()
    for t, layout in zip((x.q, x.k, x.v), case.spec.layouts):
        if layout == "contiguous":  # always allowed: every kernel must accept it
            continue
        size = t.element_size()
        assert (t.storage_offset() * size) % 16 == 0 and t.stride(-1) == 1
        assert all((st * size) % 16 == 0 for n, st in zip(t.shape[:-1], t.stride()[:-1]) if n > 1)


@checks(60)
@given(attention_cases(dtypes=("float16", "float32"), max_seq=20, caps=Capabilities(unit_last_stride=True)))
def test_attention_layouts_keep_a_unit_head_dim_stride_where_declared(case: AttentionCase) -> None:
    x = case.build()
    for t, layout in zip((x.q, x.k, x.v), case.spec.layouts):
        # dim-major only where it is moot: one column, or one row (the head dim's stride is then Nk = 1)
        assert layout != "dim-major" or t.shape[-1] == 1 or t.shape[-2] == 1
    assert all(t.stride(-1) == 1 for t in (x.q, x.k, x.v) if t.shape[-1] > 1)


def test_masks_over_the_queries_alone_and_a_target_that_refuses_them() -> None:
    # One key-broadcast shape of nine, after a mask kind over keys: 1000 random examples missed it
    # once in CI (2026-12-03), so the search for it may take 3000.
    cfg = settings(max_examples=1000, database=None, phases=[Phase.generate])
    found = find(attention_cases(dtypes=("float16",), max_seq=8),
                 lambda c: c.spec.mask_shape == "b1q1" and c.spec.seq_k > 1,
                 settings=settings(cfg, max_examples=3000))
    mask = found.build().mask
    assert mask.shape[-1] == 1 and mask.shape[-2] == found.spec.seq_q and "mask-shape:b1q1" in found.features
    refusing = attention_cases(dtypes=("float16",), max_seq=8, caps=Capabilities(mask_key_broadcast=False))
    with pytest.raises(NoSuchExample):
        find(refusing, lambda c: c.spec.mask_shape in attention_module.KEY_BROADCAST_SHAPES, settings=cfg)


def test_a_dim_major_layout_strides_the_head_dim_by_the_sequence() -> None:
    found = find(attention_cases(dtypes=("float16",), max_seq=8),
                 lambda c: c.spec.layouts[2] == "dim-major" and c.spec.seq_k > 1 and c.spec.head_dim > 1,
                 settings=settings(max_examples=500, database=None, phases=[Phase.generate]))
    v = found.build().v
    assert v.stride(-1) == found.spec.seq_k and v.stride(-2) == 1 and "layout:dim-major" in found.features


def test_attention_layouts_without_alignment_include_a_misaligned_pointer() -> None:
    # The misaligned layout's tensors start off 16-byte boundaries (so does kv-packed's V, H x D
    # elements into the shared buffer, which find() met first once the draws moved, 2026-12-06).
    def misaligned(c) -> bool:
        built = c.build()
        return any(layout == "misaligned" and t.storage_offset() % 8
                   for t, layout in zip((built.q, built.k, built.v), c.spec.layouts, strict=True))

    found = find(attention_cases(dtypes=("float16",), max_seq=8), misaligned,
                 settings=settings(max_examples=300, database=None, phases=[Phase.generate]))
    built = found.build()
    assert any(layout == "misaligned" and t.data_ptr() % 16
               for t, layout in zip((built.q, built.k, built.v), found.spec.layouts, strict=True))


def test_index_width_rows_make_a_misaddressing_visible() -> None:
    """A row drawn at a 16-bit index width exists to show a read from the wrong position.

    Its length comes from the example's seed and spreads over all six lengths (some alias a
    wrap: at 65536 a wrapped int16 offset reads its own element back), and reading each
    element's neighbour instead must change many outputs in the dtype: no mask, no NaN/inf,
    neighbours that differ, and no mass underflow.  Before 2026-11-29 a whole 720-example
    run could draw only 32767 and 32768, often constant or fully masked rows, and an
    int16-index mutant survived.
    """
    # Which lengths a run reaches depends on the seeds Hypothesis happens to draw (a CI run
    # reached 5 of 6 in 1,000 examples, a local one 6): check the seed -> length map itself.
    assert {index_width_length(INDEX_WIDTH_LENGTHS, seed) for seed in range(64)} == set(INDEX_WIDTH_LENGTHS)
    wide_rows = []

    @settings(max_examples=1000, database=None, phases=[Phase.generate], derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(softmax_cases(dtypes=("float16", "bfloat16", "float32"), max_length=40, long_rows=False))
    def probe(case: SoftmaxCase) -> None:
        if case.spec.length <= 40:
            return
        wide_rows.append(case.spec.length)
        assert case.spec.length == index_width_length(INDEX_WIDTH_LENGTHS, case.spec.seed)
        x = case.build()
        assert x.shape in ((1, case.spec.length), (case.spec.length,)) and torch.isfinite(x).all()  # 2-D or 1-D
        y = torch.softmax(x.double(), -1).to(x.dtype)
        misread = torch.softmax(torch.roll(x.double(), 1, -1), -1).to(x.dtype)
        # Most of them; in float16 a row of 65535 has outputs near 1/65535, subnormal there
        # (below 6.1e-5), where neighbours round alike more often: 43% changed in one (2026-12-02).
        assert (y != misread).double().mean() > 0.3, case

    probe()
    assert len(set(wide_rows)) >= 3, sorted(wide_rows)


def test_long_key_probes_make_a_misread_key_visible() -> None:
    """An attention case drawn at a 16-bit index width exists to show a kernel that reads
    the wrong key or value row.  The output is a weighted sum over all (key, value) pairs,
    so it shows a misread only where the misread rows differ and carry weight: two K/V
    heads (a wrapped offset lands in the other head's rows), peaked scores, centred values.
    Reading the second half of each head's keys and values from the other head must move
    the output by many units of u * sum_j p_j |v_j| (the suite's error unit).
    """
    seen = []

    @settings(max_examples=600, database=None, phases=[Phase.generate], derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(attention_cases(dtypes=("float16", "bfloat16", "float32"), max_seq=16, probes=False))
    def probe(case: AttentionCase) -> None:
        s = case.spec
        if s.seq_k <= 16:
            return
        assert s.seq_k == index_width_length(INDEX_WIDTH_LENGTHS, s.seed)
        assert (s.batch, s.heads_kv) == (1, 2) and s.heads_q in (2, 4) and s.seq_q <= 4 and s.head_dim <= 16
        assert s.mask is None and not s.causal and not s.specials and s.scale is None
        x = case.build()
        q, k, v = (t.double() for t in (x.q, x.k, x.v))
        k, v = (t.repeat_interleave(s.heads_q // 2, 1) for t in (k, v))
        half = s.seq_k // 2
        k2, v2 = k.clone(), v.clone()
        k2[:, :, half:], v2[:, :, half:] = k.flip(1)[:, :, half:], v.flip(1)[:, :, half:]

        def attend(kk, vv):
            p = torch.softmax(x.scale * q @ kk.transpose(-1, -2), -1)
            return p @ vv, p @ vv.abs()

        o, weight = attend(k, v)
        o2, _ = attend(k2, v2)
        units = ((o - o2).abs() / (get_format(s.dtype).eps * weight)).max()
        seen.append(float(units))

    probe()
    assert len(seen) >= 10, seen
    # Units of the dtype's eps: bfloat16's is 2**-7, and with the narrowest spreads a misread
    # moved some bfloat16 outputs by only 43-118 units (random seeds, 2026-11-30), and by 10.5
    # in a case of one query (2026-12-03, the draws Hypothesis makes once verify.search is
    # imported): 4x and more the ~2 units the suite's bfloat16 tolerance allows.
    assert min(seen) > 8, sorted(seen)[:5]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_far_tail_cases_put_the_whole_output_in_the_tail(dtype: str) -> None:
    """strategies.attention.FAR_TAIL_GAPS: in each (batch, head) the spike key (the first or the
    last, the same in K and V) outscores every other key by G and has V = 0, so the exact output
    is the far tail's alone, a normal number of the format, and each tail weight e^-G is a normal
    number of P's format.  A kernel that drops weights below e^-(G - 1) relative to the maximum
    then gives 0: an error of the whole output."""
    from strategies.attention import FAR_TAIL_GAPS, far_tail_gaps
    fmt = get_format(dtype)
    p_format = fmt if fmt.precision < 24 else get_format("float64" if fmt.precision > 24 else "float32")

    @settings(max_examples=12, database=None, phases=[Phase.generate], derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(attention_cases(dtypes=(dtype,), max_seq=64, probe="far-tail"))
    def probe(case: AttentionCase) -> None:
        s = case.spec
        assert s.mask is None and not s.causal and not s.specials and s.scale is None
        x = case.build()
        scores = x.scale * x.q.double()[:, :, :1] @ x.k.double().transpose(-1, -2)  # (B, H, 1, Nk)
        top = scores.amax(-1, keepdim=True)
        spike = 0 if s.k.count == 0 else s.seq_k - 1
        assert (scores.argmax(-1) == spike).all()
        gap = float((top - scores).flatten(0, -2)[:, 1 if spike == 0 else 0].max())
        wanted = far_tail_gaps(fmt, s.seq_k)[0]
        assert wanted in FAR_TAIL_GAPS and abs(gap - wanted) <= 2 ** -6 * wanted, (gap, wanted)
        assert math.exp(-gap) >= p_format.smallest_normal
        v = x.v.double()
        assert (v[:, :, spike] == 0).all()
        assert (torch.cat([v[:, :, :spike], v[:, :, spike + 1:]], 2) != 0).all()
        out = torch.softmax(scores, -1) @ v.repeat_interleave(s.heads_q // s.heads_kv, 1)
        assert out.abs().amin() >= 64 * fmt.smallest_normal
        flushed = torch.where(scores - top < -(gap - 1.0), 0.0, torch.exp(scores - top))
        assert (flushed @ v.repeat_interleave(s.heads_q // s.heads_kv, 1) == 0).all()

    probe()


def test_absorption_probes_lose_many_roundings_to_a_low_precision_running_sum() -> None:
    """The absorption probe exists to show a kernel whose running sum (or accumulator) is
    kept in the input format between key blocks.  In each (batch, head) one key, the first
    or the last, outscores all others by one margin, and the others are weighted so that a
    block of B of them adds just under half an ulp.  Walking the keys from the spike in
    blocks of B and rounding the running sum to the input format after each block must lose
    more than 2.25 units of u (past the policy's fp16 attention tolerance, about 2) of the exact sum:
    every block after the spike is dropped."""
    seen = []

    @settings(max_examples=1500, database=None, phases=[Phase.generate], derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(attention_cases(dtypes=("float16", "bfloat16"), max_seq=64, index_widths=False))
    def probe(case: AttentionCase) -> None:
        s = case.spec
        if s.k.kind != "key-spike" or s.v.kind != "ends-opposed":
            return  # not absorption (a far-tail case has a key-spike V)
        assert s.q.kind == "constant" and s.scale is None and s.mask is None and not s.causal and not s.specials
        assert s.seq_k >= 17 and s.batch * s.heads_kv >= 2 and "k:key-spike" in case.features
        x = case.build()
        u = get_format(s.dtype).unit_roundoff
        scores = x.scale * x.q.double()[:, :, :1] @ x.k.double().transpose(-1, -2)  # (B, H, 1, Nk)
        top = scores.argmax(-1)
        assert set(top.flatten().tolist()) <= {0, s.seq_k - 1}
        weights = torch.softmax(scores, -1)[..., 0, :]
        for row, spike in zip(weights.reshape(-1, s.seq_k), top.flatten().tolist()):
            walk = row if spike == 0 else row.flip(0)
            tail = walk[1:] / walk[0]
            assert torch.allclose(tail, tail[0].expand_as(tail), rtol=1e-2)  # one margin for all
            block = [b for b in (8, 16, 32, 64, 128, 256) if b * float(tail[0]) <= u][-1]
            running = torch.tensor(1.0, dtype=x.q.dtype)
            for start in range(1, s.seq_k, block):
                running = (running.double() + tail[start:start + block].sum()).to(x.q.dtype)
            lost = (1.0 + float(tail.sum()) - float(running)) / u
            seen.append(lost)

    probe()
    assert len(seen) >= 20, len(seen)
    assert np.median(seen) > 2.25, sorted(seen)


def test_attention_probes_reach_many_keys_and_many_heads_within_the_caps() -> None:
    """Past the size profile: a few thousand keys (many key blocks) with every other feature
    still drawn, a thousand queries and more (many query tiles), many (batch, head) pairs, and decode steps (one query, up to
    ``DECODE_KEYS_FACTOR`` times max_seq keys, the last 64 masked); never past
    ``caps.max_length``, nor past max_seq with ``probes=False``."""
    cfg = settings(max_examples=2000, database=None, phases=[Phase.generate], derandomize=True)
    masked = find(attention_cases(dtypes=("float16",), max_seq=16, index_widths=False),
                  lambda c: 1024 < c.spec.seq_k <= 4097 and c.spec.mask is not None, settings=cfg)
    assert "attn:long-keys" in masked.features and masked.spec.seq_q <= 16
    many = find(attention_cases(dtypes=("float16",), max_seq=16, index_widths=False),
                lambda c: c.spec.batch * c.spec.heads_q >= 64 and c.spec.heads_q > c.spec.heads_kv, settings=cfg)
    assert "attn:many-heads" in many.features and max(many.spec.seq_q, many.spec.seq_k) <= 16
    # Many query tiles, causal: the queries past Nk see every key.
    queries = find(attention_cases(dtypes=("float16",), max_seq=16, index_widths=False),
                   lambda c: c.spec.seq_q >= 512 and c.spec.causal, settings=cfg)
    assert "attn:long-queries" in queries.features and queries.spec.seq_k <= attention_module.MID_QUERIES_MAX_KEYS

    # A decode step past 128 keys, and a mask for its one query that hides a whole trailing
    # split of keys while others stay visible.  Two find()s, not one over the conjunction: in
    # CI's worker processes that conjunction was missed in 2,000 examples (2026-11-30), as the
    # draws depend on what else the process has loaded.
    decode = find(attention_cases(dtypes=("float16",), max_seq=16, index_widths=False),
                  lambda c: c.spec.seq_q == 1 and 100 < c.spec.seq_k <= 16 * DECODE_KEYS_FACTOR, settings=cfg)
    assert "attn:decode" in decode.features
    n = decode.spec.seq_k

    def split_masked(m: MaskSpec) -> bool:  # visible keys, but none of the last 64
        keep = m.keep(1, n, np.random.default_rng(0))[0]
        return bool(keep.any() and not keep[-64:].any())

    find(mask_specs(1, n), split_masked, settings=cfg)

    @settings(max_examples=300, database=None, suppress_health_check=list(HealthCheck))
    @given(attention_cases(dtypes=("float16",), max_seq=16, caps=Capabilities(max_length=100)),
           attention_cases(dtypes=("float16",), max_seq=16, probes=False, index_widths=False))
    def within(capped: AttentionCase, plain: AttentionCase) -> None:
        assert capped.spec.seq_k <= 100 and capped.spec.seq_q <= 100
        assert plain.spec.seq_k <= 16 and plain.spec.batch <= 2 and plain.spec.heads_q <= 4

    within()


def test_kv_packed_k_and_v_share_one_buffer_and_hold_the_same_values() -> None:
    """``kv-packed``: K and V are views of one (B, Nk, 2, Hkv, D) buffer, V Hkv x D elements in,
    with the values they hold in any other layout; never Q's, never K's without V's."""
    plain = AttentionSpec(dtype="float16", batch=2, heads_q=4, heads_kv=2, seq_q=3, seq_k=5, head_dim=8)
    packed = dataclasses.replace(plain, layouts=("contiguous", "kv-packed", "kv-packed"))
    a, b = plain.build(), packed.build()
    assert torch.equal(a.k, b.k) and torch.equal(a.v, b.v) and torch.equal(a.q, b.q)
    assert b.k.untyped_storage().data_ptr() == b.v.untyped_storage().data_ptr()
    assert b.v.storage_offset() - b.k.storage_offset() == 2 * 8 and b.k.stride() == (5 * 2 * 2 * 8, 8, 2 * 2 * 8, 1)
    assert "layout:kv-packed" in AttentionCase(packed).features
    for bad in (("kv-packed", "kv-packed", "kv-packed"), ("contiguous", "kv-packed", "contiguous")):
        with pytest.raises(ValueError, match="K's and V's together"):
            dataclasses.replace(plain, layouts=bad)
    # the first found (no shrink: it took CI 81 s, 2026-12-08)
    found = find(attention_cases(dtypes=("float32",), max_seq=8), lambda c: c.spec.layouts[1] == "kv-packed",
                 settings=settings(max_examples=2000, database=None, derandomize=True, phases=[Phase.generate]))
    assert found.spec.layouts[2] == "kv-packed"


@checks(60)
@given(attention_cases(dtypes=("float16", "float32"), max_seq=12, probes=False, index_widths=False))
def test_attention_mask_layouts_hold_the_same_mask(case: AttentionCase) -> None:
    """Every mask layout holds the values of the contiguous one; only the memory differs."""
    s = case.spec
    assume(s.mask is not None)
    mask = case.build().mask
    plain = torch.from_numpy(np.ascontiguousarray(s.keep()))
    full = (s.batch, s.heads_q, s.seq_q, s.seq_k)
    assert torch.equal(mask.cpu().expand(full), plain.expand(full))
    if s.mask_layout == "expanded":
        assert mask.shape[:2] == (s.batch, s.heads_q)
        # zero strides wherever the drawn shape broadcasts (none left when it is full already)
        lead = ((1, 1) + tuple(plain.shape))[-4:-2]
        assert lead == (s.batch, s.heads_q) or 0 in mask.stride()[:2]
    elif s.mask_layout == "transposed" and plain.shape[-2] > 1 and plain.shape[-1] > 1:
        # (a size-1 axis's stride means nothing: numpy and torch may give it any value)
        assert mask.stride(-1) != 1
    elif s.mask_layout == "sliced":
        # one row and one column into the buffer: a storage offset (a kernel must read from it)
        assert mask.storage_offset() == plain.shape[-1] + 3 + 1
        if plain.shape[-2] > 1:
            assert mask.stride(-2) == plain.shape[-1] + 3  # (torch calls a 1 x 1 view contiguous all the same)


def test_attention_reaches_scale_zero_mask_layouts_and_head_dims_past_256() -> None:
    cfg = settings(max_examples=3000, database=None, phases=[Phase.generate], derandomize=True)
    strat = attention_cases(dtypes=("float32",), max_seq=8, caps=CAPS_ALL)
    assert find(strat, lambda c: c.spec.scale == 0.0, settings=cfg).build().scale == 0.0
    assert find(strat, lambda c: c.spec.head_dim > 256, settings=cfg).spec.head_dim in (257, 512)
    for layout in ("sliced", "transposed", "expanded"):
        found = find(strat, lambda c, layout=layout: c.spec.mask_layout == layout, settings=cfg)
        assert f"mask-layout:{layout}" in found.features
    mask = find(strat, lambda c: c.spec.mask_shape == "1hqk", settings=cfg).build().mask
    assert mask.shape[0] == 1 or mask.stride(0) == 0  # the "expanded" layout: the batch by stride 0
    contiguous_only = attention_cases(dtypes=("float32",), max_seq=8, caps=Capabilities(noncontiguous=False))
    with pytest.raises(NoSuchExample):
        find(contiguous_only, lambda c: c.spec.mask_layout != "contiguous",
             settings=settings(max_examples=300, database=None, phases=[Phase.generate]))


def _share_beyond_judgement(seed: int) -> float:
    """The share of 150 float32 cases in which every row has a score whose rounding-error bound
    (the tolerance policy's, with float32 compute) passes ILL_CONDITIONED_ARGUMENT_ERROR."""
    hits: list[bool] = []

    @hypothesis.seed(seed)
    @settings(max_examples=150, phases=[Phase.generate], deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(attention_cases(dtypes=("float32",), max_seq=32, index_widths=False))
    def draw(case: AttentionCase) -> None:
        x = case.build()
        # +inf and NaN entries (specials) make rows whose result is NaN: not counted
        q, k = (torch.nan_to_num(t.double(), nan=0.0, posinf=0.0, neginf=0.0) for t in (x.q, x.k))
        k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
        bound = abs(x.scale) * (q.abs() @ k.abs().transpose(-1, -2)) * (q.shape[-1] + 3) * 2.0**-24
        hits.append(bool((bound.amax(-1) > ILL_CONDITIONED_ARGUMENT_ERROR).all()))

    draw()
    return sum(hits) / len(hits)


@checks(200)
@given(st.data())
def test_decode_steps_have_few_queries_and_many_keys(data: st.DataObject) -> None:
    seq_q, seq_k, decode = data.draw(st.composite(lambda draw: attention_module._sequence_lengths(draw, 1, 16, 128))())
    if decode:
        assert seq_q <= attention_module.DECODE_MAX_QUERIES and seq_k <= 128
    else:
        assert max(seq_q, seq_k) <= 16


_COINCIDENCE_CONFIG = attention_module._attention_config(("float16",), None, 160, 2, 4, None, None, True, True, None)


@st.composite
def _coincidences(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, int]]:
    sizes = (draw(st.integers(1, 160)), draw(st.integers(1, 160)), draw(st.integers(1, 2)), draw(st.integers(1, 8)),
             draw(st.sampled_from((1, 16, 40, 256))))
    return sizes, attention_module._coincident_lengths(draw, *sizes, _COINCIDENCE_CONFIG)


@checks(200)
@given(_coincidences())
def test_a_coincident_length_is_another_dim_within_the_bounds(drawn) -> None:
    (seq_q, seq_k, batch, heads, head_dim), (q, k) = drawn
    dims = {batch, heads, head_dim}
    assert (q == seq_q or (q in dims and 2 <= q <= 160)) and (k == seq_k or (k in dims and 2 <= k <= 160))
    assert q == seq_q or k == seq_k  # one length at most


@pytest.mark.parametrize(("side", "dim"), attention_module.COINCIDENCES)
def test_every_coincidence_is_drawn(side: str, dim: str) -> None:
    index = {"q": 0, "k": 1}[side]
    position = {"batch": 2, "heads": 3, "head_dim": 4}[dim]

    def coincides(drawn) -> bool:
        sizes, lengths = drawn
        return sizes[index] != sizes[position] == lengths[index] and lengths[1 - index] == sizes[1 - index]

    # derandomized: a run of 2000 random draws missed q-head_dim once (2026-12-03)
    find(_coincidences(), coincides,
         settings=settings(max_examples=2000, database=None, phases=[Phase.generate], derandomize=True))


@checks(200)
@given(data=st.data())
def test_batch_as_heads_stays_within_the_caps(data) -> None:
    c = _COINCIDENCE_CONFIG
    drawn = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 2)))
    assume(drawn[1] * drawn[2] <= 4)
    batch, heads_kv, group = data.draw(st.composite(lambda draw: attention_module._batch_as_heads(draw, *drawn, c))())
    assert (batch, heads_kv, group) == drawn or (batch == heads_kv * group >= 2 and batch <= 2)


def test_cases_with_as_many_batches_as_heads_draw_a_mask_per_head_that_a_batch_reading_would_misplace() -> None:
    """A 3-d mask (Hq, Nq, Nk) with B = Hq is what a kernel reading 3-d masks as (B, Nq, Nk)
    gets wrong; such cases come (not as drawn sizes happen to meet: none in 1,500), keep their
    rank (no mask expanded to 4-d) and a V that shows which keys each query saw."""
    strategy = S.attention_cases(dtypes=("float16",), max_seq=160, max_batch=2, max_heads=4)
    quiet = dict(database=None, phases=[Phase.generate], derandomize=True, deadline=None,
                 suppress_health_check=list(HealthCheck))

    def by_head(case) -> bool:
        s = case.spec
        return s.mask is not None and s.mask_shape == "hqk" and s.batch == s.heads_q >= 2

    @settings(max_examples=300, **quiet)
    @given(strategy)
    def run(case) -> None:
        if by_head(case):
            assert case.build().mask.dim() == 3 and case.spec.v.kind in attention_module.MISREAD_MASK_V_KINDS

    run()

    def differs(case) -> bool:
        keep = case.spec.keep()
        return by_head(case) and not (keep == keep[:1]).all()

    find(strategy, differs, settings=settings(max_examples=300, **quiet))


@pytest.mark.parametrize("max_heads", [1, 3, 4, 8])
@checks(100)
@given(data=st.data())
def test_head_counts_stay_within_the_query_heads(max_heads: int, data) -> None:
    c = attention_module._attention_config(("float16",), None, 160, 2, max_heads, None, None, True, True, None)
    heads_kv, group = data.draw(st.composite(lambda draw: attention_module._head_counts(draw, c))())
    assert heads_kv >= 1 and group >= 1 and heads_kv * group <= max_heads


def _grouped_share() -> float:
    grouped = []
    for fixed in range(4):  # one run's share moves a lot: seeds 0..11 gave 0.32..0.58 with the odds

        @hypothesis.seed(fixed)
        @settings(max_examples=300, database=None, phases=[Phase.generate], deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(S.attention_cases(dtypes=("float16",), max_seq=160, max_batch=2, max_heads=4))
        def run(case) -> None:
            grouped.append(case.spec.heads_kv >= 2 and case.spec.heads_q // case.spec.heads_kv >= 2)

        run()
    return sum(grouped) / len(grouped)


@pytest.mark.nightly  # 40-55 s of CI's 15 minutes to measure one odds constant (GQA shapes: the tests above)
def test_grouped_odds_raise_the_share_of_several_query_heads_over_several_kv_heads(monkeypatch) -> None:
    """Hkv >= 2 and a group >= 2 (the only mapping where h // group and h % Hkv differ) under
    four query heads: 400 of 2000 cases without GROUPED_ODDS, 827 with it (run alone,
    2026-12-01).  Both shares depend on what else the process has loaded (Hypothesis draws
    constants it finds in loaded modules): with every test module loaded, 81 of 300 with it.
    So both are measured here, in the same process, pooled over four seeds: a single
    unseeded run of 300 met 0.34 against 0.33 (2026-12-02); seeds 0..3 pooled give 0.42
    against 0.27, 4..7 0.42 against 0.20, 8..11 0.43 against 0.30."""
    with_odds = _grouped_share()
    monkeypatch.setattr(attention_module, "GROUPED_ODDS", 10**9)
    without = _grouped_share()
    assert with_odds > without + 0.05 and with_odds > 0.2, (with_odds, without)


def test_float16_v_reaches_past_what_an_unnormalised_float16_sum_holds() -> None:
    """An unnormalised sum over the keys (sum_j exp(s_j - m) v_j, up to Nk max|V|) held in
    float16 overflows; one held in float32, as correct kernels hold it, cannot."""
    cfg = settings(max_examples=1000, database=None, phases=[Phase.generate], deadline=None,
                   suppress_health_check=list(HealthCheck))
    big = find(S.attention_cases(dtypes=("float16",), max_seq=160, special_values=False),
               lambda c: float(c.build().v.abs().max()) * c.spec.seq_k > 65504, settings=cfg)
    assert big.spec.v_max == 32752.0 and float(big.build().v.abs().max()) <= 32752
    # Specs saved before v_max existed replay with the bound they were drawn under.
    old = dataclasses.replace(big.spec, v_max=None)
    assert "v_max" not in old.to_dict()
    assert float(old.build().v.abs().max()) <= 65504 / (2 * old.seq_k) * (1 + 2.0**-11)  # clipped, then rounded
    assert case_from_dict(json.loads(json.dumps(big.spec.to_dict()))).spec == big.spec
    with pytest.raises(ValueError, match="v_max must be None or a positive finite number"):
        dataclasses.replace(big.spec, v_max=float("inf"))


def test_most_attention_cases_keep_their_scores_within_judgement(monkeypatch) -> None:
    """Three cases in four are tamed (``WILD_ODDS``).  The shares depend on what else the
    process has imported (Hypothesis also draws constants it finds in loaded modules) and on
    how often Hypothesis repeats a wild case with small changes.  Measured 2026-11-30: tamed
    4.7% against 40% all wild, run alone; 11.3% against 36% with every test module loaded, as
    CI runs it.  One seed's 150 cases are few for that: Hypothesis mutates earlier cases, so one
    wild case comes back with small changes.  A choice added to decode steps moved seed 1 from
    3% to 17-21% and seeds 2 and 3 from 4-11% to 1-14% (2026-12-03): three seeds are averaged."""
    seeds = (1, 2, 3)
    tamed = sum(_share_beyond_judgement(s) for s in seeds) / len(seeds)
    monkeypatch.setattr(attention_module, "WILD_ODDS", 1)
    wild = sum(_share_beyond_judgement(s) for s in seeds) / len(seeds)
    assert tamed < 0.2 and tamed < wild / 2, (tamed, wild)


def test_a_tamed_scale_follows_the_targets_dot_and_compute_precision() -> None:
    q = k = ValueRecipe("normal", scale=10.0)
    ieee = attention_module._score_roundoffs(FORMATS["float32"], Capabilities())
    tf32 = attention_module._score_roundoffs(FORMATS["float32"], Capabilities(dot_precision="tfloat32"))
    assert ieee == (0.0, 2.0**-24) and tf32 == (get_format("tfloat32").unit_roundoff, 2.0**-24)
    assert attention_module._score_roundoffs(FORMATS["float16"], Capabilities(dot_precision="tfloat32"))[0] == 0.0
    scale_ieee = attention_module._tamed_scale(1.0, q, k, 64, 1e30, ieee)
    scale_tf32 = attention_module._tamed_scale(1.0, q, k, 64, 1e30, tf32)
    assert scale_tf32 < scale_ieee < 1.0
    assert attention_module._tamed_scale(scale_ieee, q, k, 64, 1e30, ieee) is None  # tamed stays tamed
    assert attention_module._tamed_scale(-1.0, q, k, 64, 1e30, ieee) == -scale_ieee  # the sign is kept


def test_attention_head_dims_are_spread_over_the_tiers() -> None:
    """Every head-dim tier (up to 16, 64, 128, 256, past 256) gets a fair share of a search.

    One sampled_from over all 24 dims drew 257 or 512 in none of 300 examples in one run
    (Hypothesis favours early choices and copies choices between examples), and a kernel
    wrong only for D > 256 survived.  In this test (four seeds of 300 examples, measured
    2026-11-30) the flat draw gave the tiers 50/22/13/6/8%; drawing a tier first gives
    36/19/16/14/16%.  The shares move with what else the process has imported (Hypothesis also
    draws constants it finds in loaded modules): with every test module loaded, as CI runs it,
    and the decode steps added since, 39/25/15/13/7%.
    """
    seen: list[int] = []
    for seed in range(1, 5):
        @hypothesis.seed(seed)
        @settings(max_examples=300, phases=[Phase.generate], deadline=None, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck))
        @given(attention_cases(dtypes=("float16",), max_seq=160))
        def draw(case: AttentionCase) -> None:
            seen.append(case.spec.head_dim)

        draw()
    tiers = [(1, 16), (17, 64), (65, 128), (129, 256), (257, 512)]
    shares = {t: sum(t[0] <= d <= t[1] for d in seen) / len(seen) for t in tiers}
    assert min(shares.values()) >= 0.06, shares


def test_softmax_reaches_16_bit_index_widths_within_the_caps() -> None:
    # find() stops at the first hit; Hypothesis draws rare switches in clumps, so 400 examples
    # missed one run in ten (2026-11-30): the cap only bounds an unlucky run.
    wide = find(softmax_cases(dtypes=("float16",), max_length=40), lambda c: c.spec.length > 32768,
                settings=settings(max_examples=3000, database=None, phases=[Phase.generate]))
    assert wide.spec.length in INDEX_WIDTH_LENGTHS and wide.spec.rows == 1
    capped = softmax_cases(dtypes=("float16",), max_length=40, caps=Capabilities(max_length=32768))

    @settings(max_examples=150, database=None)
    @given(capped, softmax_cases(dtypes=("float16",), max_length=40, index_widths=False, long_rows=False))
    def within(a: SoftmaxCase, b: SoftmaxCase) -> None:
        assert a.spec.length <= 32768 and b.spec.length <= 40

    within()


def test_attention_draws_3d_masks_and_lengths_a_tile_apart() -> None:
    # A 3-d mask aligns as (Hq, Nq, Nk): a kernel that takes its leading dim for the batch
    # is wrong only there.  And whole query tiles past the keys (top-left causal: they see
    # every key) or before them, which two independent lengths rarely give.
    cfg = settings(max_examples=3000, phases=[Phase.generate], **_QUIET)
    strat = attention_cases(dtypes=("float16",), max_seq=160)
    case = find(strat, lambda c: c.spec.mask_shape == "hqk" and c.spec.heads_q > 1
                and c.spec.mask_layout != "expanded", settings=cfg)
    assert case.build().mask.shape == (case.spec.heads_q, case.spec.seq_q, case.spec.seq_k)
    assert find(strat, lambda c: c.spec.causal and c.spec.seq_q >= c.spec.seq_k + 64, settings=cfg)
    assert find(strat, lambda c: c.spec.seq_k >= c.spec.seq_q + 64, settings=cfg)



# ---------------------------------------------------------------------------------- near ties


def test_near_ties_lie_within_their_jitter_below_the_maximum_and_exact_ties_draw_as_before() -> None:
    fmt = get_format("float32")
    near = ValueRecipe("ties", scale=1.0, count=4, gap=2.0**-9)
    rows = near.sample(np.random.default_rng(3), (6, 80), fmt, 1e4)
    for row in rows:
        near_top = row[row >= row.max() - 2.0**-9]  # the 4 placed within the jitter of the maximum
        assert near_top.size >= 4 and len(set(near_top.tolist())) > 1
    assert near.describe() == "ties(scale=1, count=4, jitter=0.00195)"
    # exact ties (gap 0, every recipe saved before the jitter) consume the generator as before
    exact = ValueRecipe("ties", scale=1.0, count=4)
    x = exact.sample(np.random.default_rng(3), (6, 80), fmt, 1e4)
    rng = np.random.default_rng(3)
    expected = rng.standard_normal((6, 80))
    for row in expected:
        row[rng.choice(80, size=4, replace=False)] = row.max()
    assert np.array_equal(x, expected) and "jitter" not in exact.describe()


def test_key_ties_copy_one_key_so_that_a_querys_scores_nearly_tie() -> None:
    fmt = get_format("float32")
    recipe = ValueRecipe("key-ties", scale=1.0, offset=0.25, count=3, gap=2.0**-11)
    k = recipe.sample(np.random.default_rng(5), (2, 3, 70, 16), fmt, 1e4)
    q = np.random.default_rng(6).standard_normal(16)
    for slab in k.reshape(-1, 70, 16):
        away = slab - 0.25
        norms = np.sqrt((away * away).sum(-1))
        copies = np.argsort(norms)[-3:]  # the copies lie KEY_TIE_BOOST times past the rest
        assert norms[copies].min() > 1.5 * np.sort(norms)[-4]
        scores = slab[copies] @ q - 0.25 * q.sum()
        assert np.ptp(scores) <= 2 * 2.0**-11 * np.abs(scores).max() + 1e-12
    assert recipe.describe() == "key-ties(scale=1, offset=0.25, copies=3, jitter=0.000488)"


def test_drawn_cases_hold_near_ties_in_softmax_rows_and_in_keys() -> None:
    found_k = find(attention_cases(dtypes=("float32",), max_seq=40),
                   lambda c: c.spec.k.kind == "key-ties" and c.spec.k.gap > 0,
                   settings=settings(max_examples=1000, database=None, phases=[Phase.generate], derandomize=True))
    assert "k:key-ties" in found_k.features and "k:key-ties" in ATTENTION_FEATURES
    found_s = find(softmax_cases(dtypes=("float32",)),
                   lambda c: any(r.kind == "ties" and r.gap > 0 for r in c.spec.recipes),
                   settings=settings(max_examples=1000, database=None, phases=[Phase.generate], derandomize=True))
    assert "mag:ties" in found_s.features
