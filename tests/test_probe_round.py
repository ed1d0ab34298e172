"""The rare probes on demand: ``probe=`` in the strategies, and the search's probe round.

Hypothesis draws the strategies' rare probes (long rows, 16-bit index widths, many heads,
absorption, ...) far from independently, so a short search can miss one altogether.  The
strategies can force each probe, and ``verify.search`` tries every probe after a tenth of a
cell's search (``PROBE_ROUND_AT``).  CPU only, a few seconds.
"""

from __future__ import annotations

import math

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis.errors import InvalidArgument

from kernels.registry import get_target
from strategies import (
    ATTENTION_PROBES,
    SOFTMAX_PROBES,
    ValueRecipe,
    attention_cases,
    attention_probes,
    softmax_cases,
    softmax_probes,
)
from strategies import attention as A
from strategies import softmax as S
from strategies.features import ATTENTION_LAYOUTS, SOFTMAX_LAYOUTS
from strategies.lengths import GRID_AXIS_LIMIT, GRID_COUNTS, INDEX_WIDTH_LENGTHS, full_tiles_lengths
from strategies.values import block_end_keys
from verify import search
from verify.capabilities import Capabilities
from verify.dtypes import get_format

_QUIET = dict(deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
MAX_LENGTH, MAX_ROWS, MAX_SEQ = 300, 8, 96
#: The grid probes' sizes, as the search passes them for a fast target (grid_count).
GRID = {"softmax": dict(grid_rows=GRID_COUNTS[-1]), "attention": dict(grid_pairs=GRID_COUNTS[2])}
#: The many-tiles probe's first rung, as the search passes it (climb_tiles).
TILES = dict(tiles_seq=A.TILES_RUNGS[0][0])


def _softmax_probe_holds(probe: str, case) -> bool:
    s = case.spec
    total_rows = max(s.batch, 1) * max(s.heads, 1) * s.rows
    return {
        "no-rows": s.rows == 0 and not s.specials and case.build().numel() == 0,
        "index-width": s.length in INDEX_WIDTH_LENGTHS and total_rows == 1,
        "long-row": MAX_LENGTH < s.length <= 16385 and total_rows <= 2,
        "plateau-row": MAX_LENGTH < s.length <= 16385 and total_rows <= 2 and s.recipes[0].kind == "plateau",
        "mixed-row": (S.MIXED_MIN_LENGTH <= s.length <= S.MIXED_PROBE_MAX_LENGTH and total_rows <= 2
                      and all(r.kind == "uniform" for r in s.recipes) and not s.specials),
        # up to MANY_ROWS_SIZED_MAX where the search sizes it from the speed (fast machines)
        "many-rows": MAX_ROWS < total_rows <= S.MANY_ROWS_SIZED_MAX and s.length <= MAX_LENGTH,
        "floor-row": (s.length == S.floor_row_length(1, MAX_LENGTH) and total_rows == 2 and not s.specials
                      and s.mask.kind == "none" and [r.kind for r in s.recipes] == ["constant", "near-max"]
                      and s.recipes[0].offset == -get_format(s.dtype).max_finite),
        "spread-ladder": (s.length == MAX_LENGTH and total_rows == S.NEAR_UNIFORM_STEPS and not s.specials
                          and s.mask.kind == "none" and "values:spread-ladder" in case.features),
        "one-entry": (s.length == 1 and total_rows == min(MAX_ROWS, S.ONE_ENTRY_ROWS) and s.mask.kind == "fully-masked-row"
                      and {sp.kind for sp in s.specials} == {"nan", "+inf", "neg-zero"}),
        "narrow-values": s.narrow == S.NARROWER.get(s.dtype, "none") and "values:narrow" in case.features,
        "edge-spike": (s.length == 16385 and total_rows == 2 and not s.specials and s.mask.kind == "none"
                       and [(r.kind, r.count) for r in s.recipes] == [("dominant", 1), ("dominant", 2)]),
        "aligned-specials": (s.length >= 32 and s.length & (s.length - 1) == 0 and s.mask.kind == "none"
                             and total_rows == min(MAX_ROWS, S.ALIGNED_SPECIAL_ROWS)
                             and {sp.kind for sp in s.specials} <= {"nan", "+inf"}
                             and (s.specials[0].kind, s.specials[0].index[0]) == ("nan", 0)),
        "block-ends": (s.length in full_tiles_lengths(16385) and total_rows == 2 and not s.specials and s.mask.kind == "none"
                       and [(r.kind, r.count) for r in s.recipes] == [("dominant", 3), ("dominant", 3)]),
        "masked-long": (s.length == 16385 and total_rows == 2 and not s.specials
                        and s.mask.kind in ("leading-block", "key-padding")),
        "four-d": s.heads >= 1 and s.batch >= 1 and "shape:4d" in case.features,
        "grid-rows": total_rows > GRID_AXIS_LIMIT and s.length <= S.GRID_ROWS_MAX_LENGTH and "rows:grid" in case.features,
    }[probe]


def _attention_probe_holds(probe: str, case) -> bool:
    s = case.spec
    return {
        "empty-batch": s.batch == 0 and not s.specials and case.build().q.shape[0] == 0,
        "coincident-heads": (s.mask is not None and s.mask.kind == "random" and s.mask.density == 0.5
                             and s.mask_shape == "bhqk" and not s.causal
                             and s.batch == s.heads_q == s.heads_kv >= 2
                             and s.seq_k >= min(MAX_SEQ, 16) and s.mask_layout != "expanded"),
        "coincident-heads-3d": (s.mask is not None and s.mask.kind == "random" and s.mask.density == 0.5
                                and s.mask_shape == "hqk" and not s.causal and s.batch == s.heads_q == s.heads_kv >= 2
                                and s.seq_k >= min(MAX_SEQ, 16) and s.mask_layout != "expanded"),
        "block-ends": (s.k.kind == "key-spike" and s.k.count == 5 and s.q.kind == "constant" and s.mask is None
                       and not s.causal and not s.specials and s.batch == 1
                       and s.seq_k in full_tiles_lengths(4097)),  # 3840, 4032, 2288: see the dtype's below
        "aligned-specials": (s.seq_q == s.seq_k >= 16 and s.seq_k & (s.seq_k - 1) == 0
                             and s.batch == 1 and s.heads_q == s.heads_kv == 3
                             and s.mask is None and not s.causal
                             and [(sp.kind, sp.tensor) for sp in s.specials] == [("nan", "q"), ("nan", "k")]),
        "zero-scale": s.scale == 0.0 and "scale:zero" in case.features,
        "single-key": (s.seq_k == 1 and s.seq_q >= 2 and s.mask is None and not s.causal
                       and [(x.kind, x.tensor) for x in s.specials][:1] == [("nan", "q")]
                       and s.v.kind == "uniform" and s.v.offset == 2 * s.v.scale > 0),
        "coincident-mask": (s.mask is not None and s.mask.kind == "random" and s.mask.density == 0.5 and not s.causal
                            and s.mask_shape == "qk" and s.batch == s.seq_q >= 2 and s.seq_k >= min(MAX_SEQ, 16)),
        "wider-head": (s.head_dim > 256 and s.causal and s.scale == A.WIDE_HEAD_SCALE_FACTOR / math.sqrt(s.head_dim)
                       and s.seq_k == min(MAX_SEQ, A.WIDE_HEAD_MAX_SEQ) and not s.specials),
        "wide-head": (128 < s.head_dim <= 256 and s.causal and s.scale == A.WIDE_HEAD_SCALE_FACTOR / math.sqrt(s.head_dim)
                      and s.seq_k == min(MAX_SEQ, A.WIDE_HEAD_PROBE_KEYS) and not s.specials),
        "negative-scale": (s.scale == A.NEGATIVE_SCALE and s.q.kind == s.k.kind == "normal" and s.q.scale == s.k.scale > 0
                           and s.seq_k >= min(MAX_SEQ, A.NEGATIVE_SCALE_KEYS) and "scale:negative" in case.features),
        "near-ties": (s.k.kind == "key-ties" and s.k.gap in A.NEAR_TIES_JITTERS and not s.causal
                      and s.q.kind == s.v.kind == "normal" and s.seq_k >= min(MAX_SEQ, A.NEAR_TIES_KEYS)
                      and min(A.NEAR_TIES_MIN_QUERIES, MAX_SEQ) <= s.seq_q <= A.NEAR_TIES_MAX_QUERIES),
        "nan-underflow": (s.k.kind == "key-spike" and s.k.count == 0 and s.q.kind == "constant" and s.mask is None
                          and not s.causal and s.seq_k >= min(MAX_SEQ, A.NAN_UNDERFLOW_KEYS)
                          and [(sp.kind, sp.tensor, sp.index) for sp in s.specials] == [("nan", "v", (0, 0, s.seq_k - 1, 0))]),
        "underflow-v": (s.v.kind == "near-underflow" and s.v.scale == get_format(s.dtype).smallest_normal
                        and not s.specials and s.seq_k >= min(MAX_SEQ, A.UNDERFLOW_V_KEYS)
                        and s.seq_q >= min(MAX_SEQ, A.UNDERFLOW_V_QUERIES)),
        "broadcast-mask": (s.mask is not None and s.mask.kind == "random" and s.mask.density == 0.5 and not s.causal
                           and s.mask_shape in A.KEY_BROADCAST_SHAPES + A.QUERY_BROADCAST_SHAPES
                           and s.seq_q == s.seq_k >= min(MAX_SEQ, A.BROADCAST_MASK_TILED_SEQ)),
        "index-width": "attn:index-width" in case.features,
        "mid-keys": MAX_SEQ < s.seq_k <= A.MID_KEYS_MAX and s.seq_q <= A.MID_KEYS_MAX_QUERIES,
        "mid-queries": MAX_SEQ < s.seq_q <= A.MID_QUERIES_MAX and s.seq_k <= A.MID_QUERIES_MAX_KEYS,
        "many-heads": max(s.seq_q, s.seq_k) <= A.MANY_HEADS_MAX_SEQ and s.batch <= A.MANY_HEADS_MAX_BATCH,
        "absorption": s.k.kind == "key-spike" and s.v.kind == "ends-opposed" and s.q.kind == "constant",
        "masked-lead": (not s.causal and s.mask is not None and s.mask.kind == "leading-block"
                        and s.mask.block == s.seq_k - max(1, s.seq_k // A.MASKED_LEAD_VISIBLE_SHARE)),
        "masked-tail": ((not s.causal and s.mask is not None and s.mask.kind == "key-padding" and s.mask.side == "end"
                         and s.mask.pads == (s.seq_k - max(1, s.seq_k // A.MASKED_LEAD_VISIBLE_SHARE),))
                        or (s.causal and s.mask is None and s.seq_q <= max(1, s.seq_k // A.MASKED_LEAD_VISIBLE_SHARE))),
        "score-floor": (s.scale == A.SCORE_FLOOR_SCALE and s.q.kind == s.k.kind == "constant" and s.q.offset == -s.k.offset > 0
                        and s.v.kind == "uniform" and s.v.offset == 2 * s.v.scale > 0 and not s.specials),
        "far-tail": (s.k.kind == "key-spike" and s.v.kind == "key-spike" and s.q.kind == "constant"
                     and s.v.scale == 0.0 and s.v.gap == -s.v.offset and s.k.count == s.v.count),
        "grid-heads": (s.batch * s.heads_q > GRID_AXIS_LIMIT and max(s.seq_q, s.seq_k) <= A.GRID_HEADS_MAX_SEQ
                       and "attn:grid-heads" in case.features
                       and (s.mask is None or s.mask_shape in ("qk", "11qk", "1qk", "q1"))),  # masks shared by all pairs
        "causal-offset": s.causal and (A.one_past_half_tiles(max(s.seq_q, s.seq_k)) == min(s.seq_q, s.seq_k)) and (
            max(s.seq_q, s.seq_k) == (MAX_SEQ if s.head_dim <= A.WIDE_HEAD_DIM else A.WIDE_HEAD_MAX_SEQ)),
        "many-tiles": (A.TILES_MIN_SEQ <= s.seq_k <= A.TILES_RUNGS[0][0] and s.seq_q in (s.seq_k, s.seq_k // 2 + 1)
                       and s.batch * s.heads_q >= A.TILES_RUNGS[0][1] // 2 and s.head_dim <= A.TILES_MAX_HEAD_DIM
                       and (s.mask is None or s.mask_shape in ("qk", "11qk", "1qk", "q1"))),
    }[probe]


@pytest.mark.parametrize("probe", SOFTMAX_PROBES[:-1])  # wide-offsets: tests/test_wide_offsets.py
def test_a_forced_softmax_probe_is_drawn_every_time(probe: str) -> None:
    @settings(max_examples=4 if probe.startswith("grid") else 12, **_QUIET)
    @given(softmax_cases(dtypes=("float32", "float16"), max_length=MAX_LENGTH, max_rows=MAX_ROWS, probe=probe,
                         **GRID["softmax"]))
    def every(case) -> None:
        assert _softmax_probe_holds(probe, case), case.describe()
        assert sum(_softmax_probe_holds(p, case) for p in ("index-width", "long-row", "many-rows", "grid-rows")) <= 1

    every()


@pytest.mark.parametrize("probe", ATTENTION_PROBES[:-1])  # wide-offsets: tests/test_wide_offsets.py
def test_a_forced_attention_probe_is_drawn_every_time(probe: str) -> None:
    @settings(max_examples=4 if probe in ("grid-heads", "many-tiles") else 12, **_QUIET)
    @given(attention_cases(dtypes=("float32", "float16"), max_seq=MAX_SEQ, probe=probe, **GRID["attention"], **TILES))
    def every(case) -> None:
        assert _attention_probe_holds(probe, case), case.describe()
        if probe != "index-width":
            assert "attn:index-width" not in case.features
        # D = 1 hides the scale (1/sqrt(1) = 1) and the head dim's stride: never in a probe
        assert case.spec.head_dim > 1, case.describe()

    every()


def test_a_probe_keeps_a_head_dim_of_1_only_where_the_target_allows_no_other() -> None:
    one = Capabilities(head_dim_max=1)
    first = settings(max_examples=1, phases=[Phase.generate], **_QUIET)
    case = find(attention_cases(dtypes=("float32",), max_seq=MAX_SEQ, caps=one, probe="many-heads"), lambda c: True,
                settings=first)
    assert case.spec.head_dim == 1
    plain = find(attention_cases(dtypes=("float32",), max_seq=MAX_SEQ), lambda c: True, settings=first)
    assert plain.spec.head_dim == 1  # drawn at random, D = 1 stays the simplest


def test_the_simplest_case_of_a_forced_probe_is_its_strongest() -> None:
    """A probe round tries one example of each probe: Hypothesis's first example, the simplest
    choices.  Those must be the probe at full strength, not its weakest form."""
    first = dict(settings=settings(max_examples=1, phases=[Phase.generate], **_QUIET))
    absorb = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe="absorption"), lambda c: True, **first)
    s = absorb.spec
    # the most key blocks, the last one ragged for every block width (MAX_SEQ is even)
    assert s.seq_k == MAX_SEQ - 1 and MAX_SEQ % 2 == 0
    widest = max(b for b in A.ABSORPTION_BLOCKS if 4 * b <= MAX_SEQ)
    _, k = A._absorption_recipes(get_format("float16"), s.head_dim, widest, max(A.ABSORPTION_FRACTIONS), 0)
    assert s.k == k  # the widest block B and f = 0.9: every kernel block of <= B keys drops the most
    assert s.batch * s.heads_kv >= 2 and s.v.offset > 0
    # the spike first in one (batch, head) and last in the next, whatever the seed
    x = absorb.build()
    top = (x.q.double()[:, :, :1] @ x.k.double().transpose(-1, -2)).argmax(-1).flatten().tolist()
    assert top[:2] == [0, s.seq_k - 1]
    many = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe="many-heads"), lambda c: True, **first)
    s = many.spec
    assert A.MANY_HEADS_PAIRS >= s.batch * s.heads_q >= 3 * A.MANY_HEADS_PAIRS // 4 >= 192  # more than a GPU's SMs
    # h // group != h % Hkv (two K/V heads), groups as large as the pairs then allow but not a
    # power of two (h // 12 is no shift): 3/4 of 16 here, of 32 at the search's 1024 pairs (past a
    # kernel that packs 8 query heads a K/V load)
    group = s.heads_q // s.heads_kv
    assert s.heads_kv >= 2 and group == 3 * min(A.MANY_HEADS_MAX_GROUP, A.MANY_HEADS_PAIRS // (2 * s.batch)) // 4
    assert group > 8 and group & (group - 1) != 0
    assert s.q.kind == "slab-levels"
    # a random mask of its own for every pair: read at another pair's offset, or once for a
    # packed group of query heads, it misplaces keys
    assert s.mask == A.MaskSpec("random", density=A.PAIR_MASK_DENSITY, dead_rows=(s.seq_q - 1,))
    assert s.mask_shape == "bhqk"
    pairs = s.keep().reshape(s.batch * s.heads_q, -1)
    assert len({row.tobytes() for row in pairs}) == len(pairs)  # no two pairs share a mask
    # and a query row with nothing visible in every pair, not the same row in neighbouring pairs
    dead = ~s.keep().reshape(s.batch * s.heads_q, s.seq_q, s.seq_k).any(-1)
    assert dead.any(-1).all() and not (dead[1:] == dead[:-1]).all(-1).any()
    assert "attn:many-heads" in many.features
    assert s.seq_q == s.seq_k == A.MANY_HEADS_MAX_SEQ  # with one key, Q and K do not matter
    offset = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe="causal-offset"), lambda c: True,
                  **first)
    # one past the power of two at or below half the longest (33 for 96): one query in the last
    # tile of every power-of-two tiling up to 32
    tile = offset.spec.seq_q - 1
    assert offset.spec.causal and offset.spec.seq_k == MAX_SEQ and tile & (tile - 1) == 0
    assert tile <= MAX_SEQ // 2 < 2 * tile
    zero = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe="zero-scale"), lambda c: True, **first)
    assert zero.spec.scale == 0.0 and zero.spec.seq_k >= A.ZERO_SCALE_MIN_KEYS  # one key: every scale agrees
    # past two blocks of 128 keys, V zero over the first 60%: a whole V block of up to 128 keys
    # is zero counted from either end
    assert zero.spec.seq_k == A.ZERO_SCALE_PROBE_KEYS and zero.spec.v.kind == "zero-run"
    v = zero.build().v.double()
    zero_keys = int((v == 0).all(-1).all(0).all(0).to(torch.int64).cumprod(0).sum())
    n = zero.spec.seq_k
    assert zero_keys >= 128 and n - (n // 128) * 128 + 128 <= zero_keys < n
    keys = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe="mid-keys"), lambda c: True, **first)
    assert (keys.spec.seq_k, keys.spec.seq_q) == (A.MID_KEYS_MAX, A.MID_KEYS_MAX_QUERIES)
    # its queries' scores rise along the keys by amounts over three decades, neighbours at most
    # an octave apart: some query's step at every key block lies just under any small-step
    # threshold (2**-15 to 2**-3 nats at blocks of 64), see GENTLE_RISE
    built = keys.build()
    scores = (built.q[0, 0].double() @ built.k[0, 0].double().T) * keys.spec.effective_scale
    rises = (scores[:, -1] - scores[:, 0]).tolist()
    assert rises == sorted(rises) and rises[-1] > 7.0 and rises[0] < 8.0 * 2.0**-11
    assert max(b / a for a, b in zip(rises, rises[1:])) <= 2.01
    for probe in ("masked-lead", "masked-tail"):
        # the longest keys past the profile, a few queries: a split-KV path's wholly masked splits
        masked = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe=probe), lambda c: True, **first)
        s = masked.spec
        assert s.seq_k == A.MASKED_KEYS_MAX and s.seq_q <= A.MID_KEYS_MAX_QUERIES and s.mask is not None
        assert s.v.kind == "seq-drift" and s.v.gap > 0  # the live keys' values differ from the rest's
        visible = masked.build().mask.expand(s.batch, s.heads_q, s.seq_q, s.seq_k).any(-1)
        if probe == "masked-tail":
            # two queries at least, one of which sees no key at all: every block or split of it empty
            assert s.seq_q >= 2 and s.mask.dead_rows and visible.any(-1).all() and not visible.all(-1).any()
        else:
            # a decode step (one query): a split-KV decode path must apply the mask too
            assert s.seq_q == 1 and visible.all()
        capped = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe=probe,
                                      caps=Capabilities(max_length=1000)), lambda c: True, **first)
        assert capped.spec.seq_k == 1000
    scores = {}  # every key's score, the same: scale D a (-a)
    for dtype in ("float32", "float16"):
        s = find(attention_cases(dtypes=(dtype,), max_seq=MAX_SEQ, probe="score-floor"), lambda c: True, **first).spec
        scores[dtype] = (s.scale * s.head_dim * s.q.offset * s.k.offset, s.head_dim)
    lowest = A.SCORE_FLOOR_SCALE * get_format("float32").max_finite / A.SCORE_HEADROOM  # qk_limit's floor
    assert -lowest <= scores["float32"][0] < -0.99 * lowest  # -3.7e36: below any finite stand-in for -inf
    # float16 entries end at 65504
    assert scores["float16"][0] == -A.SCORE_FLOOR_SCALE * scores["float16"][1] * 65504.0**2
    # where the target takes no boolean mask, the causal flag hides the tail
    tail = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe="masked-tail",
                                caps=Capabilities(bool_mask=False)), lambda c: True, **first)
    s = tail.spec
    assert s.causal and s.mask is None and s.seq_k == A.MASKED_KEYS_MAX and s.seq_q <= s.seq_k // 4
    queries = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe="mid-queries"), lambda c: True, **first)
    assert (queries.spec.seq_q, queries.spec.seq_k) == (A.MID_QUERIES_MAX - 1, A.MID_QUERIES_MAX_KEYS)
    assert queries.spec.causal  # Nq far past Nk: top-left and bottom-right differ on every query tile
    grid = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe="grid-heads", **GRID["attention"]),
                lambda c: True, **first)
    s = grid.spec
    assert s.batch == GRID_COUNTS[2] and s.heads_q == 1 and s.seq_q == s.seq_k == A.GRID_HEADS_MAX_SEQ
    for length, pairs in A.TILES_RUNGS:
        tiles = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe="many-tiles", tiles_seq=length),
                     lambda c: True, **first)
        s = tiles.spec
        assert s.seq_q == s.seq_k == length and s.causal and s.batch * s.heads_q == pairs, tiles.describe()
        assert s.head_dim == A.TILES_MAX_HEAD_DIM and s.heads_q == 2 * s.heads_kv  # D = 1 makes a score one product
        assert "attn:many-tiles" in tiles.features
    four = find(softmax_cases(probe="four-d"), lambda c: True, **first)
    assert four.spec.heads == S.MAX_HEADS and "shape:4d" in four.features
    assert four.spec.batch == S.MAX_BATCH and four.spec.length == S.FOUR_D_LENGTH  # a one-entry row's softmax is 1
    narrow = find(softmax_cases(probe="narrow-values"), lambda c: True, **first).spec
    assert (narrow.narrow, narrow.rows, narrow.length) == ("bfloat16", 8, 300)  # float32 holding bfloat16 values
    x = narrow.build()
    assert torch.equal(x.to(torch.bfloat16).to(torch.float32), x) and not torch.equal(
        dataclasses.replace(narrow, narrow="").build(), x)
    spike = find(softmax_cases(probe="edge-spike"), lambda c: True, **first).spec  # float32 first: 112 nats
    assert [(r.kind, r.count, r.gap) for r in spike.recipes] == [("dominant", 1, 112.0), ("dominant", 2, 112.0)]
    ends = find(softmax_cases(probe="block-ends"), lambda c: True, **first)
    assert ends.spec.length == 14400  # float32's: fills tiles of 16 to 64, 48, 80, 96, 100, 144, 160, 192, 240
    assert [r.gap for r in ends.spec.recipes] == [math.log(14400) + S.BLOCK_ENDS_GAP_NATS, 112.0]
    weights = torch.softmax(ends.build().double(), -1)
    edges = list(block_end_keys(14400))  # 15, 16, ..., 8191, 8192; 14399 and each full last tile's first and the one before
    assert len(edges) == 43 and (weights[0, edges].sum() > 0.99).item() and (weights[1, edges].sum() > 1 - 1e-12).item()
    assert (weights[:, edges].min() > 0.5 / 43).item()  # every edge near an equal share
    masked = find(softmax_cases(probe="masked-long"), lambda c: True, **first).spec
    assert masked.mask.kind == "leading-block" and masked.mask.block == masked.length - masked.length // 4
    assert masked.recipes[0].offset == -2 * 112.0  # live entries far below 0: a stand-in maximum of 0 outweighs them
    many = find(softmax_cases(probe="many-rows"), lambda c: True, **first)
    assert many.spec.total_rows == S.MANY_ROWS[1] and many.spec.length == S.MANY_ROWS_SPAN * 300 // S.MANY_ROWS[1]
    assert many.spec.row_shift == S.row_shift_for(get_format("float32")) and "rows:shifted" in many.features
    sized = find(softmax_cases(probe="many-rows", probe_entries=S.MANY_ROWS_SIZED_MAX * (300 + S.ROW_COST)),
                 lambda c: True, **first)
    # past a persistent grid's programs, of long rows where affordable
    assert sized.spec.total_rows == S.MANY_ROWS_SIZED_MAX and sized.spec.length == 300
    medium = find(softmax_cases(probe="many-rows", probe_entries=S.MANY_ROWS_SIZED_MAX * (S.ROW_COST + 65)),
                  lambda c: True, **first)
    assert medium.spec.total_rows == S.MANY_ROWS_SIZED_MAX and medium.spec.length == 65
    small = find(softmax_cases(probe="many-rows", probe_entries=500), lambda c: True, **first)
    assert small.spec.total_rows == S.MANY_ROWS[0]  # a slow target's: the fewest rows
    tall = find(softmax_cases(probe="grid-rows", **GRID["softmax"]), lambda c: True, **first)
    assert tall.spec.total_rows == GRID_COUNTS[-1] and tall.spec.length == S.GRID_ROWS_MAX_LENGTH


def test_which_probes_the_arguments_allow_and_clear_errors_otherwise() -> None:
    # grid-rows: only where the search sizes it; wide-offsets: only where it allows it (CUDA)
    assert SOFTMAX_PROBES[-2:] == ("grid-rows", "wide-offsets")
    assert softmax_probes() == SOFTMAX_PROBES[:-2]
    assert softmax_probes(grid_rows=GRID_AXIS_LIMIT + 1) == SOFTMAX_PROBES[:-1]
    assert softmax_probes(grid_rows=GRID_AXIS_LIMIT + 1, wide_offsets=True) == SOFTMAX_PROBES
    # grid-heads and many-tiles only where the search sizes them, wide-offsets where it allows it
    assert ATTENTION_PROBES[-3:] == ("grid-heads", "many-tiles", "wide-offsets")
    assert attention_probes() == ATTENTION_PROBES[:-3]
    assert attention_probes(grid_pairs=GRID_AXIS_LIMIT + 1, **TILES) == ATTENTION_PROBES[:-1]
    assert attention_probes(grid_pairs=GRID_AXIS_LIMIT + 1, **TILES, wide_offsets=True) == ATTENTION_PROBES
    assert attention_probes(grid_pairs=GRID_AXIS_LIMIT) == ATTENTION_PROBES[:-3]
    assert attention_probes(tiles_seq=A.TILES_MIN_SEQ - 1) == ATTENTION_PROBES[:-3]
    assert attention_probes(caps=Capabilities(max_length=A.TILES_MIN_SEQ - 1), tiles_seq=4096)[-1] != "many-tiles"
    with pytest.raises(InvalidArgument, match=r"tiles_seq must be a non-negative int \(0: no many-tiles probe\)"):
        attention_cases(tiles_seq=-1)
    with pytest.raises(InvalidArgument, match=r"tiles_seq \(within caps.max_length\) below 258"):
        attention_cases(probe="many-tiles")
    assert softmax_probes(elementwise=True) == ()
    assert softmax_probes(caps=Capabilities(max_length=1000), max_length=300) == (
        "no-rows", "one-entry", "aligned-specials", "floor-row", "spread-ladder", "narrow-values", "four-d", "many-rows",
        "long-row", "plateau-row", "edge-spike", "masked-long", "block-ends")
    assert softmax_probes(many_rows=False, four_d=False) == ("no-rows", "one-entry", "aligned-specials", "floor-row",
                                                             "spread-ladder", "narrow-values",
                                                             "mixed-row", "long-row", "plateau-row", "edge-spike",
                                                             "masked-long", "block-ends", "index-width")
    assert "spread-ladder" not in softmax_probes(caps=Capabilities(max_length=1))
    assert "masked-long" not in softmax_probes(caps=Capabilities(neg_inf=False))
    assert "narrow-values" not in softmax_probes(dtypes=("float16", "bfloat16"))
    assert "one-entry" not in softmax_probes(caps=Capabilities(min_length=2))
    assert "plateau-row" not in softmax_probes(long_rows=False)
    assert "mixed-row" not in softmax_probes(long_rows=False)
    # the summation-bias check needs rows of 2048 entries: a target limited below has no mixed row
    assert "mixed-row" not in softmax_probes(caps=Capabilities(max_length=S.MIXED_MIN_LENGTH - 1))
    assert "mixed-row" in softmax_probes(caps=Capabilities(max_length=S.MIXED_MIN_LENGTH))
    assert attention_probes(probes=False, index_widths=False) == ("empty-batch", "zero-scale", "single-key", "negative-scale", "near-ties",
                                                                  "underflow-v", "nan-underflow", "broadcast-mask", "coincident-mask", "coincident-heads", "coincident-heads-3d",
                                                                  "aligned-specials", "causal-offset", "wide-head", "wider-head",
                                                                  "score-floor",
                                                                  "block-ends", "masked-lead", "masked-tail")  # not sizes
    assert "masked-lead" not in attention_probes(caps=Capabilities(bool_mask=False))
    assert "single-key" not in attention_probes(caps=Capabilities(special_values=False))
    assert "nan-underflow" not in attention_probes(caps=Capabilities(special_values=False))
    assert "empty-batch" not in attention_probes(caps=Capabilities(empty_inputs=False))
    assert "no-rows" not in softmax_probes(caps=Capabilities(empty_inputs=False))
    assert "wide-head" not in attention_probes(caps=Capabilities(head_dim_max=128))
    assert "wider-head" not in attention_probes(caps=Capabilities(head_dim_max=256))
    assert A.wider_probe_head_dim((64, 257, 512)) == 257 and A.wider_probe_head_dim((64, 512, 1024)) == 512
    assert "coincident-mask" not in attention_probes(caps=Capabilities(bool_mask=False))
    assert "coincident-heads" not in attention_probes(caps=Capabilities(bool_mask=False))
    assert "coincident-heads" not in attention_probes(caps=Capabilities(max_heads=1))
    assert "coincident-heads-3d" not in attention_probes(caps=Capabilities(bool_mask=False))
    assert "broadcast-mask" not in attention_probes(caps=Capabilities(bool_mask=False))
    assert "masked-tail" in attention_probes(caps=Capabilities(bool_mask=False))  # by the causal flag
    assert "masked-tail" not in attention_probes(caps=Capabilities(bool_mask=False, causal_square_only=True))
    assert "masked-tail" not in attention_probes(caps=Capabilities(neg_inf=False))
    assert "aligned-specials" not in attention_probes(max_seq=8)  # no power of two of 16 or more
    assert "aligned-specials" not in attention_probes(caps=Capabilities(special_values=False))
    assert "aligned-specials" not in softmax_probes(caps=Capabilities(max_length=31))
    assert "aligned-specials" not in softmax_probes(special_values=False)
    assert attention_probes(max_seq=8) == ("empty-batch", "zero-scale", "single-key", "negative-scale", "near-ties", "underflow-v", "nan-underflow", "broadcast-mask",
                                           "coincident-mask", "coincident-heads", "coincident-heads-3d", "causal-offset", "wide-head", "wider-head", "score-floor", "many-heads",
                                           "mid-keys", "block-ends", "mid-queries", "masked-lead", "masked-tail",
                                           "index-width")  # absorption: 17 keys
    assert "causal-offset" not in attention_probes(caps=Capabilities(causal_square_only=True))
    assert "causal-offset" not in attention_probes(caps=Capabilities(causal=False))
    with pytest.raises(InvalidArgument, match=r"probe must be None or one of"):
        softmax_cases(probe="absorption")
    with pytest.raises(InvalidArgument, match=r"max_seq .* below 17; pass probe=None, or one of \('empty-batch', 'zero-scale'"):
        attention_cases(max_seq=8, probe="absorption")
    with pytest.raises(InvalidArgument, match=r"elementwise=True draws no probe"):
        softmax_cases(elementwise=True, probe="long-row")
    with pytest.raises(InvalidArgument, match=r"softmax_cases\(\): got an unexpected keyword argument 'max_lenght'"):
        softmax_probes(max_lenght=300)


def test_absorption_values_are_per_head() -> None:
    """The spike's end is drawn for each (batch, head), or alternates over them, and V's spike
    rows (both ends) carry the opposite sign of every other key's value."""
    import numpy as np

    from strategies.values import sample_groups

    fmt = get_format("float32")
    rng = np.random.default_rng(0)
    k = ValueRecipe("key-spike", scale=0.0, gap=5.0, count=2).sample(rng, (4, 16, 10, 2), fmt, 1e9)
    ends = k.reshape(64, 10, 2)[:, :, 0].argmax(-1)
    assert set(ends.tolist()) == {0, 9}
    for count, first in ((3, 0), (4, 9)):
        alternate = ValueRecipe("key-spike", scale=0.0, gap=5.0, count=count)
        whole = alternate.sample(rng, (2, 3, 10, 2), fmt, 1e9).reshape(6, 10, 2)[:, :, 0].argmax(-1)
        # group by group, the streams of sample_groups (past its BULK_FROM groups too)
        groups = sample_groups(alternate.group_recipes(), 600, (10, 2), fmt, 1e9,
                               lambda g: np.random.default_rng(g), lambda b, r: np.random.default_rng((b, r)))
        by_group = groups[:, :, 0].argmax(-1)
        for got in (whole, by_group):
            assert got.tolist() == [first if g % 2 == 0 else 9 - first for g in range(len(got))]
    with pytest.raises(ValueError, match="key spike's count"):
        ValueRecipe("key-spike", count=6)
    # count 5: the keys at power-of-two block edges (the block-ends probe), in every group
    edges = ValueRecipe("key-spike", scale=0.0, gap=5.0, count=5).sample(rng, (2, 3, 40, 2), fmt, 1e9)
    assert all(np.flatnonzero(g[:, 0]).tolist() == [15, 16, 31, 32] for g in edges.reshape(6, 40, 2))
    v = ValueRecipe("ends-opposed", scale=0.01, offset=1.0).sample(rng, (2, 3, 10, 4), fmt, 1e9)
    v = v.reshape(6, 10, 4)
    assert (v[:, [0, 9]] > 0.9).all() and (v[:, 1:9] < -0.9).all()


def _examples(name: str, dtype: str, max_examples: int, seed: int = 3) -> list:
    seen = []
    opts = search.CheckOptions(dtypes=(dtype,), max_examples=max_examples, seed=seed, compare_naive=False,
                               shrink=False, profile=search.PROFILES["cpu"])
    with search.observing_cases(before=seen.append):
        (cell,) = search.check_target(get_target(name), opts)
    assert cell.status == "passed" and cell.examples == len(seen)
    return seen


def test_the_search_tries_every_probe_after_a_tenth() -> None:
    name, n = "ref-online-softmax", 30
    seen = _examples(name, "float16", n)
    assert len(seen) == n
    first = int(n * search.PROBE_ROUND_AT)
    probes = search.probe_round(get_target(name), "float16", search.CheckOptions(max_examples=n))
    # grid-rows comes after, sized by the speed; wide-offsets last; float16 has no narrower format
    assert probes == tuple(p for p in SOFTMAX_PROBES[:-2] if p != "narrow-values")
    for i, probe in enumerate(probes):
        assert _softmax_probe_holds(probe, seen[first + i]), (probe, seen[first + i].describe())


def test_a_short_search_has_no_probe_round() -> None:
    # 4 probes do not fit in half of 6 examples: one plain run, as before the round existed
    assert search.probe_round(get_target("ref-online-softmax"), "float16", search.CheckOptions(max_examples=6)) == ()
    assert search.probe_round(get_target("ref-online-softmax"), "float16",
                              search.CheckOptions(max_examples=100, probe_examples=0)) == ()
    assert len(_examples("ref-online-softmax", "float16", 6)) == 6
    # and the cell says so, with the examples that would run it
    short = search.check_cell(get_target("ref-online-softmax"), "float16",
                              search.CheckOptions(max_examples=6, seed=1, shrink=False, compare_naive=False))
    need = 2 * search.probe_round_examples(get_target("ref-online-softmax"), "float16", search.CheckOptions())
    assert short.probe_round.startswith("probe round not run") and f"max_examples >= {need} (got 6)" in short.probe_round
    full = search.check_cell(get_target("ref-online-softmax"), "float16",
                             search.CheckOptions(max_examples=need, seed=1, shrink=False, compare_naive=False))
    assert full.probe_round.startswith(f"probe round: {need // 2} probe(s)")


def _every_probe_no_climb(monkeypatch) -> search.CheckOptions:
    """A campaign cell's options, with every probe tried however slow its pilot, and no many-tiles
    climb: at the campaign tests' budget the attention cell climbed to the 3000 x 3000 rung, 32 of
    a 45 s test (2026-12-06), and the rungs are not what they check."""
    monkeypatch.setattr(search, "SPEED_GATED_PROBES", {})
    monkeypatch.setattr(search, "tiles_rung_fits", lambda *args, **kwargs: False)
    return search.CheckOptions(compare_naive=False, shrink=False, profile=search.PROFILES["cpu"])


def test_a_campaign_cell_tries_the_probes_in_its_first_chunk_only(monkeypatch) -> None:
    """The campaign searches a cell in chunks (check_cell calls); a probe's first example is its
    simplest, the same in every chunk, so only the first chunk runs the round."""
    from reports.campaign import run_cell

    base = _every_probe_no_climb(monkeypatch)
    target = get_target("ref-online-softmax")
    seen = []
    with search.observing_cases(before=seen.append):
        run = run_cell(target, "float16", base, budget_s=600.0, seed=1, max_examples=60, observe=False)
    assert run.chunks >= 2 and run.cell.examples == len(seen) == 60
    args = search._strategy_args(target, "float16", base)
    first = settings(max_examples=1, phases=[Phase.generate], **_QUIET)
    for probe in softmax_probes(**args):  # the round's (float16: no narrow-values)
        if probe == "many-rows":
            continue  # sized by the speed measured in the chunk
        simplest = find(softmax_cases(**args, probe=probe), lambda c: True, settings=first)
        assert sum(c.spec == simplest.spec for c in seen) == 1, probe


def test_an_attention_campaign_cell_tries_the_probes_in_its_first_chunk_too(monkeypatch) -> None:
    # more probes than FIRST_CHUNK's 12 examples allowed (a round needs twice its examples), so
    # campaign cells never ran it before 2026-12-05.  Apart from the softmax cell's test above: the
    # two took 41 s together in a -n 2 run, the suite's fourth slowest (2026-12-06).
    from reports.campaign import run_cell

    base = _every_probe_no_climb(monkeypatch)
    first = settings(max_examples=1, phases=[Phase.generate], **_QUIET)
    target = get_target("ref-naive-attention")
    assert search.probe_round_examples(target, "float32", base) > 6
    seen = []
    with search.observing_cases(before=seen.append):
        run_cell(target, "float32", base, budget_s=600.0, seed=1,
                 max_examples=2 * search.probe_round_examples(target, "float32", base), observe=False)
    args = search._strategy_args(target, "float32", base)
    for probe in ("empty-batch", "zero-scale", "single-key", "negative-scale", "near-ties", "underflow-v", "nan-underflow", "broadcast-mask",
                  "coincident-mask", "coincident-heads", "coincident-heads-3d", "aligned-specials", "causal-offset", "wide-head", "wider-head",
                  "score-floor", "masked-tail"):
        simplest = find(attention_cases(**args, probe=probe), lambda c: True, settings=first)
        assert sum(c.spec == simplest.spec for c in seen) == 1, probe


def test_the_grid_probes_keep_within_declared_limits() -> None:
    """A target that refuses a batch or a head count past 65535 (sdpa-flash on the H200) gets its
    pairs split between the two; one that refuses more pairs in all (compiled FlexAttention) gets
    no grid-heads probe, and says why."""
    first = settings(max_examples=1, phases=[Phase.generate], **_QUIET)
    flash_like = Capabilities(max_batch=65535, max_heads=65535)
    case = find(attention_cases(caps=flash_like, max_seq=MAX_SEQ, probe="grid-heads", **GRID["attention"]),
                lambda c: True, settings=first)
    s = case.spec
    assert s.batch <= 65535 and s.heads_q <= 65535 and s.batch * s.heads_q > GRID_AXIS_LIMIT
    efficient_like = Capabilities(max_heads=65535)
    case = find(attention_cases(caps=efficient_like, max_seq=MAX_SEQ, probe="grid-heads", **GRID["attention"]),
                lambda c: True, settings=first)
    assert case.spec.batch > GRID_AXIS_LIMIT  # the batch alone is still the simplest
    assert "grid-heads" not in attention_probes(caps=Capabilities(max_pairs=65535), **GRID["attention"])
    with pytest.raises(InvalidArgument, match="caps.max_pairs"):
        attention_cases(caps=Capabilities(max_pairs=65535), probe="grid-heads", **GRID["attention"])
    limited = Capabilities(max_batch=2, max_heads=3)
    for case in _draw_many(attention_cases(caps=limited, max_seq=MAX_SEQ), 60):
        assert case.spec.batch <= 2 and case.spec.heads_q <= 3 or "attn:many-heads" in case.features
    # The 16-bit index-width probe's two K/V heads (grouped by two) give way to a head limit.
    for heads in (1, 2, 3):
        for case in _draw_many(attention_cases(caps=Capabilities(max_heads=heads), max_seq=MAX_SEQ,
                                               probe="index-width"), 8):
            assert case.spec.heads_q <= heads and case.spec.heads_q % case.spec.heads_kv == 0, case.describe()


def _draw_many(strategy, n: int) -> list:
    seen = []

    @settings(max_examples=n, phases=[Phase.generate], **_QUIET)
    @given(strategy)
    def collect(case) -> None:
        seen.append(case)

    collect()
    return seen


def test_a_speed_gated_probe_follows_its_pilots_time() -> None:
    """search.speed_gated_out: over the pilot's limit (seconds, plus a share of the budget where
    there is one), or a pilot that never finished, skips the probe; a pilot the round did not try
    gates nothing."""
    gated = search.speed_gated_out
    ran = ("many-rows", "mixed-row", "long-row", "plateau-row")
    assert not gated("plateau-row", ran, {"long-row": (16417, 0.9)}, None)
    assert gated("plateau-row", ran, {"long-row": (16417, 1.1)}, None)
    assert gated("plateau-row", ran, {"long-row": (16417, 1.1)}, 1000.0)  # plateau: seconds only
    assert gated("plateau-row", ran, {"long-row": None}, None)
    assert not gated("plateau-row", ("plateau-row",), {}, None)
    # mixed-row: 3 % of the budget; no limit without one
    assert not gated("mixed-row", ran, {"many-rows": (1000, 0.03)}, 2.3)
    assert gated("mixed-row", ran, {"many-rows": (1000, 0.3)}, 5.2)
    assert not gated("mixed-row", ran, {"many-rows": (1000, 0.3)}, 60.0)
    assert not gated("mixed-row", ran, {"many-rows": (1000, 30.0)}, None)
    assert not gated("long-row", ran, {}, 1.0)


@pytest.mark.parametrize("slow", [False, True])
def test_the_plateau_row_is_tried_only_where_the_long_row_was_quick(slow: bool) -> None:
    """search.SPEED_GATED_PROBES: the plateau-row probe repeats the long row's length, so it runs
    only where the long-row probe's case took at most a second."""
    import time

    import torch

    from kernels.registry import Target
    from verify.capabilities import Capabilities

    def softmax(x):
        if slow and x.shape[-1] > 16000:
            time.sleep(1.2)
        return torch.softmax(x.float(), -1).to(x.dtype)

    target = Target("sleepy", "softmax", softmax, Capabilities(dtypes=("float32",)), "sleeps on long rows")
    opts = search.CheckOptions(max_examples=30, seed=1, compare_naive=False, shrink=False,
                               profile=search.PROFILES["cpu"])
    seen = []
    with search.observing_cases(before=seen.append):
        cell = search.check_cell(target, "float32", opts)
    assert cell.status == "passed"
    args = search._strategy_args(target, "float32", opts)
    first = settings(max_examples=1, phases=[Phase.generate], **_QUIET)
    long_row = find(softmax_cases(**args, probe="long-row"), lambda c: True, settings=first)
    plateau = find(softmax_cases(**args, probe="plateau-row"), lambda c: True, settings=first)
    assert sum(c.spec == long_row.spec for c in seen) == 1
    assert sum(c.spec == plateau.spec for c in seen) == (0 if slow else 1)


def _skips_all_zero_v_blocks(q, k, v, *, scale, causal=False, mask=None, block: int = 64):
    """Attention that skips a key block whose V rows are all zero, weight and all (as padding)."""
    from kernels.reference import naive_attention

    blocked = torch.zeros(v.shape[:-1], dtype=torch.bool, device=v.device)
    for start in range(0, v.shape[-2], block):
        blocked[..., start:start + block] = (v[..., start:start + block, :] == 0).flatten(-2).all(-1)[..., None]
    hidden = blocked.repeat_interleave(q.shape[1] // k.shape[1], dim=1)[:, :, None, :]
    keep = ~hidden if mask is None else mask & ~hidden
    return naive_attention(q, k, v, scale=scale, causal=causal, mask=keep, compute_dtype=torch.float64).to(q.dtype)


@pytest.mark.parametrize("block", [16, 64, 128])
def test_the_zero_scale_probe_catches_a_kernel_that_skips_zero_value_blocks(block: int) -> None:
    """The probe round's zero-scale case holds whole V blocks of zeros (ZERO_SCALE_PROBE_KEYS):
    a kernel that skips them, weight and all, answers far from the mean of V; the reference
    passes it."""
    case = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe="zero-scale"), lambda c: True,
                settings=settings(max_examples=1, phases=[Phase.generate], **_QUIET))
    built = case.build()
    target = get_target("ref-naive-attention")
    mutant = dataclasses.replace(target, name="skips-zero-v-blocks",
                                 fn=lambda q, k, v, **kw: _skips_all_zero_v_blocks(q, k, v, block=block, **kw))
    kw = dict(scale=built.scale, causal=built.causal, mask=built.mask, compare_naive=False)
    from verify import engine

    assert engine.check_attention_input(target, built.q, built.k, built.v, **kw).evaluation.ok
    found = engine.check_attention_input(mutant, built.q, built.k, built.v, **kw).evaluation
    assert [v.kind for v in found.violations] == ["accuracy"]


def _first_probe_case_verdict(probe: str, dtype: str, wrong, max_seq: int = MAX_SEQ):
    """The first case of an attention ``probe`` in ``dtype`` (what the probe round tries), the
    reference's verdict on it asserted clean, and ``wrong``'s (a target or an attention
    function, checked with the reference's caps): (case, built inputs, its evaluation)."""
    from verify import engine

    case = find(attention_cases(dtypes=(dtype,), max_seq=max_seq, probe=probe), lambda c: True,
                settings=settings(max_examples=1, phases=[Phase.generate], **_QUIET))
    built = case.build()
    target = get_target("ref-naive-attention")
    if not hasattr(wrong, "caps"):
        wrong = dataclasses.replace(target, name=f"wrong-on-{probe}", kind="mutant", fn=wrong)
    kw = dict(scale=built.scale, causal=built.causal, mask=built.mask, compare_naive=False)
    assert engine.check_attention_input(target, built.q, built.k, built.v, **kw).evaluation.ok, case.describe()
    return case, built, engine.check_attention_input(wrong, built.q, built.k, built.v, **kw).evaluation


def _full_last_tile_drops_its_last_key(q, k, v, *, scale, causal=False, mask=None, width=80):
    """Attention that leaves the last key out where Nk fills its last tile of ``width`` keys (the
    exact-fit path, no ragged tail), right otherwise."""
    from kernels.reference import naive_attention

    nk = k.shape[-2]
    if nk % width == 0:
        keep = torch.ones(q.shape[-2], nk, dtype=torch.bool)
        keep[:, -1] = False
        mask = keep if mask is None else mask & keep
    return naive_attention(q, k, v, scale=scale, causal=causal, mask=mask, compute_dtype=torch.float64).to(q.dtype)


def test_the_block_ends_probes_of_three_dtypes_fill_the_last_tile_of_every_width_and_weigh_its_last_key() -> None:
    """Nk was 2049 (a ragged tail for every tiling) until 2026-12-08, and a blind mutant that
    dropped the last key where Nk is a multiple of 80 lived through 3 cells of 9 (fourteenth red
    team, 2026-12-07), one on tiles of 112 in 7 of 9 (fifteenth).  Each dtype's cell now tries
    one of lengths.full_tiles_lengths (float16 3840, bfloat16 4032, float32 2288): between them
    they fill every tile width the suite knows, and where one fills a kernel's tiles the last key
    holds about a fortieth of the weight (5.7 times the tolerance in bfloat16 at 3840, CPU)."""
    from strategies.lengths import TILE_WIDTHS
    from verify import engine

    target = get_target("ref-naive-attention")
    caught: set[int] = set()
    for dtype in ("float16", "bfloat16", "float32"):
        case = find(attention_cases(dtypes=(dtype,), max_seq=MAX_SEQ, probe="block-ends"), lambda c: True,
                    settings=settings(max_examples=1, phases=[Phase.generate], **_QUIET))
        built = case.build()
        kw = dict(scale=built.scale, causal=built.causal, mask=built.mask, compare_naive=False)
        assert engine.check_attention_input(target, built.q, built.k, built.v, **kw).evaluation.ok
        for width in (w for w in TILE_WIDTHS if built.k.shape[-2] % w == 0):
            mutant = dataclasses.replace(target, name=f"full-tile-{width}-drops-last-key",
                                         fn=lambda q, k, v, w=width, **a: _full_last_tile_drops_its_last_key(
                                             q, k, v, width=w, **a))
            found = engine.check_attention_input(mutant, built.q, built.k, built.v, **kw).evaluation
            assert [v.kind for v in found.violations] == ["accuracy"] and found.max_ratio > 3, (dtype, width)
            caught.add(width)
    assert caught == set(TILE_WIDTHS) - {100}, sorted(set(TILE_WIDTHS) - caught)  # 100: float64's 4000


def _skips_blocks_whose_weights_underflowed(q, k, v, *, scale, causal=False, mask=None, block=64):
    """Attention that skips a (batch, head)'s block of keys where every query's float32 weight
    exp(s - m) is 0 (a "P is all zero" shortcut): a NaN in V there is lost."""
    from kernels.reference import naive_attention

    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    p = torch.exp(s - s.amax(-1, keepdim=True))
    for j in range(0, k.shape[-2], block):
        dead = (p[..., j:j + block] == 0).all(-1).all(-1)  # (B, Hq)
        v = v.clone()
        v[..., j:j + block, :] = v[..., j:j + block, :].masked_fill(dead[..., None, None], 0.0)
    return naive_attention(q, k, v, scale=scale, causal=causal, mask=mask, compute_dtype=torch.float64).to(q.dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_the_nan_underflow_probe_catches_a_kernel_that_skips_blocks_of_zero_weights(dtype: str) -> None:
    """Fifteenth red team (2026-12-08): such a kernel lived through 9 cells of 9."""
    _, _, found = _first_probe_case_verdict("nan-underflow", dtype, _skips_blocks_whose_weights_underflowed)
    assert [v.kind for v in found.violations] == ["nan-propagation"], found.violations


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_the_underflow_v_probe_catches_a_kernel_that_flushes_vs_subnormals(dtype: str) -> None:
    """Drawn at random, V near underflow came in 26 of 600 float16 cases, and the mutant lived
    through a main job's 76 examples (seed 20261256, 2026-12-08); the probe's first case catches
    it in every dtype, and the reference passes it."""
    _, built, found = _first_probe_case_verdict("underflow-v", dtype, get_target("attention-subnormal-v-flushed"))
    tiny = get_format(dtype).smallest_normal
    assert built.v.abs().max() <= tiny and ((built.v < tiny).float().mean() > 0.8) and (built.v > 0).all()
    assert [v.kind for v in found.violations] == ["accuracy"], found.violations


def _shifts_by_the_raw_maximum(q, k, v, *, scale, causal=False, mask=None):
    """Attention whose shift is the row maximum of the raw scores times the scale (the Triton
    tutorial's m = max(qk) * scale): the minimum of the scaled scores when the scale is negative,
    and exp(s - m) overflows once they spread past ~88."""
    from kernels.reference import key_visibility

    raw = q.float() @ k.float().repeat_interleave(q.shape[1] // k.shape[1], 1).transpose(-1, -2)
    seen = key_visibility(q, k, causal, mask)
    seen = torch.ones_like(raw, dtype=torch.bool) if seen is None else seen.expand_as(raw)
    raw = raw.masked_fill(~seen, float("-inf"))
    m = raw.amax(-1, keepdim=True) * scale
    p = torch.exp(raw * scale - torch.where(torch.isfinite(m), m, torch.zeros_like(m))).masked_fill(~seen, 0.0)
    vv = v.float().repeat_interleave(q.shape[1] // k.shape[1], 1)
    return ((p @ vv) / p.sum(-1, keepdim=True)).to(q.dtype)


def _takes_the_absolute_scale(q, k, v, *, scale, causal=False, mask=None):
    from kernels.reference import naive_attention

    return naive_attention(q, k, v, scale=abs(scale), causal=causal, mask=mask, compute_dtype=torch.float32)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_the_negative_scale_probe_catches_a_shift_by_the_raw_maximum_and_an_absolute_scale(dtype: str) -> None:
    case = find(attention_cases(dtypes=(dtype,), max_seq=MAX_SEQ, probe="negative-scale"), lambda c: True,
                settings=settings(max_examples=1, phases=[Phase.generate], **_QUIET))
    built = case.build()
    target = get_target("ref-naive-attention")
    kw = dict(scale=built.scale, causal=built.causal, mask=built.mask, compare_naive=False)
    from verify import engine

    assert built.scale < 0 and engine.check_attention_input(target, built.q, built.k, built.v, **kw).evaluation.ok
    for fn in (_shifts_by_the_raw_maximum, _takes_the_absolute_scale):
        mutant = dataclasses.replace(target, name=fn.__name__, fn=fn)
        found = engine.check_attention_input(mutant, built.q, built.k, built.v, **kw).evaluation
        assert not found.ok, fn.__name__


def _refuses_an_empty_batch(q, k, v, *, scale, causal=False, mask=None):
    """Attention whose launcher sizes its grid by the batch: a grid of 0 programs is an error."""
    from kernels.reference import naive_attention

    if q.shape[0] == 0:
        raise RuntimeError("invalid grid: 0 programs")
    return naive_attention(q, k, v, scale=scale, causal=causal, mask=mask, compute_dtype=torch.float32)


def _one_row_too_many(x: torch.Tensor) -> torch.Tensor:
    """A softmax that flattens its rows as max(1, rows), the launcher's guard against an empty grid."""
    rows = max(1, x.numel() // x.shape[-1])
    return torch.softmax(x.reshape(-1, x.shape[-1]).double(), -1).to(x.dtype).new_zeros(rows, x.shape[-1])


@pytest.mark.parametrize("op", ["attention", "softmax"])
def test_the_empty_probes_catch_a_launcher_that_assumes_rows(op: str) -> None:
    from verify import engine

    first = settings(max_examples=1, phases=[Phase.generate], **_QUIET)
    if op == "attention":
        built = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe="empty-batch"), lambda c: True,
                     settings=first).build()
        target = get_target("ref-naive-attention")
        kw = dict(scale=built.scale, causal=built.causal, mask=built.mask)
        assert built.q.shape[0] == 0 and engine.check_attention_input(target, built.q, built.k, built.v, **kw).evaluation.ok
        mutant = dataclasses.replace(target, name="refuses-an-empty-batch", fn=_refuses_an_empty_batch)
        found = engine.check_attention_input(mutant, built.q, built.k, built.v, **kw).evaluation
    else:
        x = find(softmax_cases(dtypes=("float16",), probe="no-rows"), lambda c: True, settings=first).build()
        target = get_target("torch.softmax")
        assert x.numel() == 0 and engine.check_softmax_input(target, x).evaluation.ok
        found = engine.check_softmax_input(dataclasses.replace(target, name="one-row-too-many", fn=_one_row_too_many),
                                           x).evaluation
    assert not found.ok and found.violations[0].kind in ("exception", "shape"), found.violations


def _pads_lanes_with_the_lowest_finite_value(x: torch.Tensor) -> torch.Tensor:
    """A softmax over rows padded to 32-wide lanes with the format's lowest finite value, not
    -inf: right unless a row's entries lie at that value."""
    n = x.shape[-1]
    padded = torch.full((*x.shape[:-1], -(-n // 32) * 32), torch.finfo(x.dtype).min, dtype=torch.float64)
    padded[..., :n] = x.double()
    return torch.softmax(padded, -1)[..., :n].to(x.dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_the_floor_row_probe_catches_lanes_padded_with_a_finite_stand_in(dtype: str) -> None:
    """The probe round's floor-row case (FLOOR_ROW_ULPS): rows at the format's lowest finite
    value and just above it, of a ragged length; a softmax that pads its lanes with that value
    counts the padding; the reference passes it."""
    from kernels.registry import Target
    from verify import engine

    case = find(softmax_cases(dtypes=(dtype,), max_length=MAX_LENGTH, probe="floor-row"), lambda c: True,
                settings=settings(max_examples=1, phases=[Phase.generate], **_QUIET))
    x = case.build()
    assert x.shape == (2, 257) and float(x[0].max()) == float(x[0].min()) == -get_format(dtype).max_finite
    exact = get_target("torch.softmax")
    assert engine.check_softmax_input(exact, x, compare_naive=False).evaluation.ok
    mutant = Target(name="lanes-padded-with-the-floor", op="softmax", fn=_pads_lanes_with_the_lowest_finite_value,
                    caps=exact.caps, kind="mutant", description="pads its lanes with the lowest finite value")
    assert [v.kind for v in engine.check_softmax_input(mutant, x, compare_naive=False).evaluation.violations] == [
        "accuracy"]


def _uniform_below(threshold: float):
    """A softmax that answers 1/n for rows whose entries lie within ``threshold`` of each other."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        xd = x.double()
        flat = (xd.amax(-1, keepdim=True) - xd.amin(-1, keepdim=True)) < threshold
        return torch.where(flat, 1.0 / x.shape[-1], torch.softmax(xd, -1)).to(x.dtype)
    return fn


# 1e-6 and below: the 1/n answer is within ~4 float32 ulps of the exact one, inside the tolerance
@pytest.mark.parametrize("threshold", [1e-5, 1e-4, 1e-3, 1e-2])
def test_the_spread_ladder_probe_catches_a_uniform_row_shortcut_at_any_threshold(threshold: float) -> None:
    """The probe round's spread-ladder case (values.near_uniform_ladder): near-uniform float32 rows
    of spreads from an ulp to 2**-4, one a factor two below any threshold; a softmax taking rows
    within the threshold for uniform (answering 1/n) is off by the spread, the reference passes."""
    from kernels.registry import Target
    from verify import engine

    case = find(softmax_cases(dtypes=("float32",), max_length=MAX_LENGTH, probe="spread-ladder"), lambda c: True,
                settings=settings(max_examples=1, phases=[Phase.generate], **_QUIET))
    x = case.build()
    spreads = (x.amax(-1) - x.amin(-1)).double()
    assert x.shape == (S.NEAR_UNIFORM_STEPS, MAX_LENGTH) and (spreads[1:] > spreads[:-1]).all()
    exact = get_target("torch.softmax")
    assert engine.check_softmax_input(exact, x, compare_naive=False).evaluation.ok
    mutant = Target(name="uniform-row-shortcut", op="softmax", fn=_uniform_below(threshold), caps=exact.caps,
                    kind="mutant", description=f"1/n where max - min < {threshold}")
    assert not engine.check_softmax_input(mutant, x, compare_naive=False).evaluation.ok


def _reciprocal_of_l_in_float16(q, k, v, *, scale, causal=False, mask=None):
    """Attention whose 1 / l is taken in float16 (l rounded to float16 first): right while the
    visible keys' weights sum below 65504."""
    group = q.shape[1] // k.shape[1]
    s = q.double() @ k.double().repeat_interleave(group, 1).transpose(-1, -2) * scale
    p = torch.exp(s - s.amax(-1, keepdim=True))
    inverse = (1.0 / p.sum(-1, keepdim=True).to(torch.float16)).double()
    return (p @ v.double().repeat_interleave(group, 1) * inverse).to(q.dtype)


def test_the_zero_scale_probe_with_long_keys_catches_a_float16_reciprocal_of_l() -> None:
    """With zero_scale_keys (the GPU size profile's ZERO_SCALE_LONG_KEYS), the zero-scale probe's
    simplest case is one query against 2**17 + 1 keys of weight 1: l = their count, past
    float16's range; a kernel taking 1 / l in float16 answers 0, the reference passes."""
    from kernels.registry import Target
    from verify import engine

    with pytest.raises(InvalidArgument, match="zero_scale_keys must be a non-negative int"):
        attention_cases(zero_scale_keys=-1)
    case = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe="zero-scale",
                                zero_scale_keys=A.ZERO_SCALE_LONG_KEYS), lambda c: True,
                settings=settings(max_examples=1, phases=[Phase.generate], **_QUIET))
    s = case.spec
    assert (s.batch, s.seq_q, s.seq_k, s.scale) == (1, 1, A.ZERO_SCALE_LONG_KEYS, 0.0) and s.head_dim <= 64
    capped = find(attention_cases(dtypes=("float16",), max_seq=MAX_SEQ, probe="zero-scale", caps=Capabilities(
        max_length=4096), zero_scale_keys=A.ZERO_SCALE_LONG_KEYS), lambda c: True,
        settings=settings(max_examples=1, phases=[Phase.generate], **_QUIET))
    assert capped.spec.seq_k == 4096  # within the target's max_length
    x = case.build()
    kw = dict(scale=x.scale, causal=x.causal, mask=x.mask, compare_naive=False)
    exact = get_target("ref-naive-attention")
    assert engine.check_attention_input(exact, x.q, x.k, x.v, **kw).evaluation.ok
    mutant = Target(name="reciprocal-of-l-in-float16", op="attention", fn=_reciprocal_of_l_in_float16,
                    caps=exact.caps, kind="mutant", description="1 / l in float16")
    found = engine.check_attention_input(mutant, x.q, x.k, x.v, **kw).evaluation
    assert [v.kind for v in found.violations] == ["accuracy"]


def _leading_mask_dim_read_as_batch(q, k, v, *, scale, causal=False, mask=None):
    """Attention that reads a 3-d mask as (B, Nq, Nk), one mask a batch entry for every head,
    instead of (Hq, Nq, Nk); in bounds where B = Hq."""
    from kernels.reference import naive_attention

    if mask is not None and mask.dim() == 3:
        mask = mask[: q.shape[0], None]
    return naive_attention(q, k, v, scale=scale, causal=causal, mask=mask, compute_dtype=torch.float64).to(q.dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_the_coincident_heads_3d_probe_catches_a_3d_mask_read_by_batch(dtype: str) -> None:
    case, built, found = _first_probe_case_verdict("coincident-heads-3d", dtype, _leading_mask_dim_read_as_batch)
    assert built.mask.dim() == 3 and [v.kind for v in found.violations] == ["accuracy"], case.describe()


@pytest.mark.parametrize(("probe", "shape"), [("coincident-heads", "bhqk"), ("coincident-heads-3d", "hqk")])
def test_coincident_heads_probes_draw_one_mask_rank_each(probe: str, shape: str) -> None:
    # B = Hq with a 4-d mask by (batch, head) and with a 3-d one by head: a kernel that swaps
    # the 4-d mask's indices, or takes the 3-d mask's leading dim for the batch, stays in bounds.
    # One probe drew both ranks until 2026-12-08, and the round tries its simplest case alone.
    @settings(max_examples=10, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(attention_cases(max_seq=MAX_SEQ, probe=probe))
    def run(case) -> None:
        assert case.spec.batch == case.spec.heads_q >= 2 and case.spec.mask_shape == shape

    run()


def _probe_round_cases(op: str, dtype: str) -> list:
    first = settings(max_examples=1, phases=[Phase.generate], **_QUIET)
    if op == "attention":
        return [(p, find(attention_cases(dtypes=(dtype,), max_seq=MAX_SEQ, probe=p), lambda c: True, settings=first))
                for p in attention_probes(max_seq=MAX_SEQ)]
    return [(p, find(softmax_cases(dtypes=(dtype,), max_length=MAX_LENGTH, max_rows=MAX_ROWS, probe=p),
                     lambda c: True, settings=first))
            for p in softmax_probes(dtypes=(dtype,), max_length=MAX_LENGTH, max_rows=MAX_ROWS)]


def test_the_probe_rounds_cases_walk_through_the_layouts() -> None:
    """Drawn plainly, every probe's simplest case was contiguous: the round never saw a stride or
    an offset view.  Now each of Q, K and V takes every layout that keeps its values somewhere in
    the round, and the probes kept plain (aligned paths, sizes) stay contiguous."""
    from strategies.features import SOFTMAX_LEADING_LAYOUTS
    from strategies.layouts import BROADCAST_DIM

    cases = _probe_round_cases("attention", "float16")
    for i, tensor in enumerate("qkv"):
        assert {c.spec.layouts[i] for _, c in cases} == set(ATTENTION_LAYOUTS) - set(BROADCAST_DIM), tensor
    assert all(c.spec.layouts == ("contiguous",) * 3 for p, c in cases if p in A.PLAIN_LAYOUT_PROBES)
    layouts = {c.spec.layout for _, c in _probe_round_cases("softmax", "float32")}
    assert layouts >= set(SOFTMAX_LAYOUTS) - set(BROADCAST_DIM) - set(SOFTMAX_LEADING_LAYOUTS), layouts


def _k_last_stride_taken_for_1(q, k, v, *, scale, causal=False, mask=None):
    from kernels.reference import naive_attention

    k = torch.as_strided(k, k.shape, k.stride()[:-1] + (1,), k.storage_offset())
    return naive_attention(q, k, v, scale=scale, causal=causal, mask=mask, compute_dtype=torch.float64).to(q.dtype)


def _storage_offset_ignored(x):
    return torch.softmax(torch.as_strided(x, x.shape, x.stride(), 0).double(), -1).to(x.dtype)


@pytest.mark.parametrize("op", ["attention", "softmax"])
def test_the_probe_round_alone_catches_a_kernel_that_assumes_a_stride_or_offset(op: str) -> None:
    # Blind mutants of the fourteenth red team (2026-12-07): K's last stride taken for 1 lived in
    # 2 cells of 9, a softmax view's storage offset ignored in 1.
    from verify import engine

    right = get_target("ref-naive-attention" if op == "attention" else "torch.softmax")
    wrong = dataclasses.replace(right, name="assumes-a-layout", kind="mutant",
                                fn=_k_last_stride_taken_for_1 if op == "attention" else _storage_offset_ignored)
    caught = []
    for probe, case in _probe_round_cases(op, "float32"):
        built = case.build()
        if op == "attention":
            kw = dict(scale=built.scale, causal=built.causal, mask=built.mask, compare_naive=False)
            runs = [engine.check_attention_input(t, built.q, built.k, built.v, **kw).evaluation for t in (right, wrong)]
        else:
            runs = [engine.check_softmax_input(t, built, compare_naive=False).evaluation for t in (right, wrong)]
        assert runs[0].ok, case.describe()
        caught += [probe] if not runs[1].ok else []
    assert caught, op
