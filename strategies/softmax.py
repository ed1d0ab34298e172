"""Softmax inputs: a replayable spec, the case built from it, and the strategy drawing cases.

Hypothesis draws a :class:`SoftmaxSpec` (a few dozen numbers, JSON-able);
:meth:`SoftmaxCase.build` expands it deterministically into the logits tensor.
Shrinking therefore acts on the description (shorter rows, fewer rows, simpler
recipe, no mask, seed 0) and a failing spec replays bit for bit anywhere.

Building, in order (each step only uses bit-exact operations, see ``strategies._rng``):

1. float64 values: row ``g`` of the flattened ``(batch*heads*rows, length)`` matrix is
   drawn from ``recipes[g % len(recipes)]`` with its own stream, or taken from
   ``explicit`` when the spec holds explicit values;
2. clipping to +-max_finite of the dtype, so every value is finite after rounding;
3. the mask: masked entries become -inf;
4. special entries (NaN, +inf, -0.0), which override everything above;
5. rounding to the dtype, to nearest even (see ``strategies.rounding``);
6. the layout, on the target device.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
import math
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from strategies import _rng
from strategies._choices import largest_first, rare
from strategies._text import ReplayableRepr, call_text, num, short_dtype
from strategies._validation import (
    bound_arguments,
    check_argument,
    check_bool,
    check_caps,
    check_optional_bool,
    check_probe,
    check_positive_int,
    length_bounds,
    reject_extra_keys,
    resolve_dtypes,
    resolve_switch,
    spec_error,
)
from strategies.features import (SOFTMAX_LAYOUTS, SOFTMAX_LEADING_LAYOUTS, SOFTMAX_VALUE_KINDS, SOFTMAX_VECTOR_LAYOUTS,
                                 ordered)
from strategies.layouts import BROADCAST_DIM, is_noncontiguous, materialize, probe_layout_order
from strategies.lengths import (
    _powers_of_two,
    GRID_AXIS_LIMIT,
    WIDE_OFFSET_ELEMENTS,
    draws_index_width,
    full_tiles_for,
    grid_counts,
    index_width_length,
    index_width_lengths,
    WRAP_REVEALING_COUNTS,
    off_powers_of_two,
    offset_features,
    wide_elements_or_default,
    wide_repetitions,
    length_features,
    lengths,
    LONG_LENGTH_MAX,
    long_length,
    long_length_kinds,
    long_length_range,
)
from strategies.masks import MASK_KINDS, MaskSpec, keep_features, mask_specs
from strategies.rounding import to_format
from strategies.specials import SpecialSpec, special_kinds, special_specs
from strategies.values import (DOMINANT_AT, NEAR_UNIFORM_STEPS, ValueRecipe, full_drift, is_near_uniform_ladder,
                               near_uniform_ladder, position_distinct, sample_groups, stale_plateau, value_recipes,
                               well_mixed)
from verify.capabilities import Capabilities
from verify.dtypes import FloatFormat, get_format

#: Inputs with at most this many entries may be drawn element by element.
EXPLICIT_MAX_ENTRIES = 64
MAX_BATCH = 3
#: Heads of a 4-D input (batch, heads, rows, length).
MAX_HEADS = 3
MAX_RECIPES = 3
MAX_SPECIALS = 3

# The probes below reach past the ordinary sizes (max_length, max_rows) rarely, so
# that an average example stays cheap; each is drawn as "the top value of a small
# integer range", which shrinks towards the ordinary case.
#: One example in this many (with a batch) is 4-D.
FOUR_D_ODDS = 5
#: The longest rows of a forced four-d probe's simplest case (a tail past 32).
FOUR_D_LENGTH = 35
#: One example in about 10 holds one or two long rows (past max_length, up to
#: ``lengths.LONG_LENGTH_MAX``) with the full value recipes, masks and special values
#: (Hypothesis draws the top of ``integers(0, 7)`` less often than one time in 8).
LONG_ROW_ODDS = 8
# ...of at most max_rows x max_rows x max_length entries in all (19200 with the CPU size
# profile's 8 x 300; two rows only where both fit): a profile that keeps ordinary inputs
# small because its oracle is slow (float64 takes the mpmath path for every row: 4 x 130)
# keeps its long rows much shorter (2080), as a long float64 row costs about 50 us per entry.
#: One case in about this many with rows of at least ``MIXED_MIN_LENGTH`` entries has them well
#: mixed (``values.well_mixed``: uniform entries within a factor 16 of the row's largest
#: probability, no special value, the mask as drawn): ``verify.tolerance.softmax_bias_bound``
#: judges such rows always (other long rows where their terms round without bias) and holds
#: their sums to a probabilistic bound, which a sum rounded toward zero or truncated breaks and
#: the worst case (gamma_{n-1}) does not.  MIXED_MIN_LENGTH is that check's BIAS_MIN_LENGTH.
MIXED_ODDS = 4
MIXED_MIN_LENGTH = 2048
#: One example in this many holds many short rows (in all ``MANY_ROWS``, each of at most
#: ``MANY_ROWS_MAX_LENGTH`` entries): state a persistent program keeps from one row to
#: its next shows only when programs take several rows each.
MANY_ROWS_ODDS = 10
MANY_ROWS = (25, 600)
MANY_ROWS_MAX_LENGTH = 32
#: ...and up to this many rows where the caller sizes the case (``probe_entries``: the search's
#: probe round, from the target's speed), their length growing past MANY_ROWS_MAX_LENGTH where
#: the entries allow.  A persistent grid holds up to 16 programs of 128 threads a SM, 2112 on
#: the H200's 132 SMs: with 2113 rows one program at least takes a second row, and with fewer
#: programs each takes several.  Rows past 32 entries leave the paths that pack several short
#: rows into a warp for ones that give a row a warp or a program each.  With at most 600 rows of
#: at most 32 entries, a blind mutant whose 'two rows a program' path for 1024 rows and more of
#: more than 32 entries kept one maximum for both rows lived (fifth red team, 2026-12-05).
MANY_ROWS_SIZED_MAX = 2113
#: Row g of a many-rows case is shifted by ``ROW_SHIFT_STEPS[g % 7]`` times the row shift
#: (``row_shift``): the distance past which every exponential of a row underflows to zero in
#: the compute format (float32, or float64 for float64 inputs), even subnormal, against a
#: maximum 1 shift higher.  Softmax ignores a row's shift; a maximum, a sum or a scale a kernel
#: shares between rows or carries from one to the next (rows packed into a warp, a persistent
#: program's next row) then loses a whole row (0, or 0/0 = NaN) instead of a few ulps.  Seven
#: distinct steps: rows 1 to 6 apart always differ, and 7 divides none of the data-centre SM
#: counts (108, 114, 132, 144) nor a power-of-two count of rows a program.
ROW_SHIFT_STEPS = (0, 1, -1, 2, -2, 3, -3)
#: Nats past the smallest subnormal's exponent in the row shift (row_shift_for).
ROW_SHIFT_MARGIN = 8.0
#: ...and no more entries in all than this many times max_length, the rows getting
#: shorter as they get more (600 rows of 2, 64 of 18, 37 of 32 with max_length 300): the
#: engine's search climbs towards the examples with the largest error ratio, often the
#: ones with the most entries, and spent most of 300-example bfloat16 and float64 runs
#: on 600 x 32 inputs (2026-11-29).
MANY_ROWS_SPAN = 4
#: The least share of a many-rows case's rows its mask may leave live.  A mask drawn for any
#: input may hide every row of a tall, narrow matrix (a leading block wider than the row, a
#: random mask of density 1, a sliding window whose band leaves after a few rows): the case
#: is then a short one in disguise, whose rows past the 32nd (where state a kernel carries
#: from one of a program's rows to the next shows) hold no mass.  Such a mask gives way to
#: none.  In a CI run (2026-12-02) 15 of 67 drawn many-rows cases hid such state, most of
#: them that way; fully masked inputs stay covered by the ordinary sizes.
MANY_ROWS_MIN_LIVE = 0.5
#: What a row costs a target or the oracle, in entries (a kernel's program, the oracle's row):
#: the unit of ``probe_entries`` is an entry, and a row costs ROW_COST more.
ROW_COST = 32
#: The grid-rows probe (``probe="grid-rows"`` only, never drawn at random): more rows in all
#: than a CUDA grid axis holds (``lengths.GRID_COUNTS``), of at most this many entries each.
GRID_ROWS_MAX_LENGTH = 16
#: The rare probes of ``softmax_cases``, by name: ``probe=`` draws only that one (and
#: ``softmax_probes`` says which the arguments allow).
SOFTMAX_PROBES = ("no-rows", "one-entry", "aligned-specials", "floor-row", "spread-ladder", "narrow-values", "four-d", "many-rows", "mixed-row",
                  "long-row", "plateau-row", "edge-spike", "masked-long", "block-ends", "index-width", "grid-rows", "wide-offsets")  # cheapest first
#: The no-rows probe (forced only, where caps.empty_inputs): a case drawn as any other, then given
#: no rows (``rows = 0``) and no special entries: shape (0, N), (B, 0, N) or (B, H, 0, N) as its
#: batch and heads were drawn, the layout, length and mask as drawn.  The output is empty, of
#: the input's shape, and so is the LSE.  A launcher that sizes its grid by the rows (0
#: programs: an error on a GPU), divides by them, or reads x[0] fails there; drawn at random
#: rows are never 0 (a blind mutant that raised on an empty input lived through every seed;
#: eleventh red team, 2026-12-06).
NO_ROWS = 0
#: The one-entry probe (forced only, where rows of one entry are allowed): ONE_ENTRY_ROWS rows
#: (at most max_rows) of one entry each, 2-D, one row of every kind: finite (its softmax is 1),
#: -inf (a fully masked row: 0 or NaN), NaN and +inf (NaN), -0.0 (1), in ONE_ENTRY_KINDS order,
#: repeated, those the format and the target allow.  A row of one entry is a kernel's degenerate
#: case, often a shortcut (return 1, skip the max and the sum) that never reads the entry; drawn
#: at random, such rows came in 11 and 16 of 300 cases (float16, float32), nearly all
#: Hypothesis's first simple ones, and none of the float16 ones had a NaN, an infinity or a mask: a blind mutant returning 1
#: for every one-entry row lived in float16, bfloat16 and float32 (fifth red team, 2026-12-05).
ONE_ENTRY_ROWS = 8
ONE_ENTRY_KINDS = ("finite", "masked", "nan", "+inf", "neg-zero")
#: The aligned-specials probe (forced only, where NaN is allowed): ALIGNED_SPECIAL_ROWS rows (at
#: most max_rows) of a power of two's length, the longest max_length allows of 32 or more
#: (largest_first: the longest first), no mask, rows in turn NaN at one entry, finite, +inf at
#: one entry (where the format has it), finite, ..., the special entries at columns spread over
#: the row from a drawn one.  A kernel's path for rows that fill its blocks exactly (no tail
#: mask) is often another code path than the ragged one, and NaN is where such paths differ: a
#: NaN-ignoring maximum (fmax) with exponentials cut below a threshold by a comparison turns
#: NaN into 0 there.  Drawn, a NaN in a row of 2**k entries, k >= 5, came rarely enough that a
#: blind mutant doing so for such rows lived through float16 at every seed (thirteenth red team,
#: 2026-12-07).
ALIGNED_SPECIAL_ROWS = 6
ALIGNED_SPECIAL_MIN_LENGTH = 32
ALIGNED_SPECIAL_KINDS = ("nan", "finite", "+inf", "finite")
#: The floor-row probe (forced only): two rows of the longest length one past a power of two
#: that max_length allows (257 on the CPU: a ragged tail for every block and vector width), every
#: entry of row 0 the format's lowest finite value, row 1's a few ulps above it (a near-max row
#: of FLOOR_ROW_ULPS ulps' spread); no mask, no special value.  A kernel that fills its ragged
#: lanes, or starts its running maximum, with a finite stand-in for -inf at or above the row's
#: entries (-65504 in float16, -1e4, -1e30, -FLT_MAX) counts the filler as entries (row 0: 1 /
#: (n + lanes) where 1 / n is right) or keeps the stand-in as the maximum (every exp(x - m) 0:
#: 0 / 0).  The attention twin is the score-floor probe.  Drawn, a row at the very floor needs a
#: constant or near-max recipe at the format's last value: a blind mutant padding its lanes with
#: -65504 lived in float16 (seventh red team, 2026-12-05).
FLOOR_ROW_ULPS = 4
#: The spread-ladder probe (forced only, where rows of two entries or more are allowed):
#: NEAR_UNIFORM_STEPS near-uniform rows of the longest length max_length allows, row j's entries
#: within eps 2**j of an offset of +-1 (``values.near_uniform_ladder``), no mask, no special
#: value.  A kernel that takes a row whose entries lie within some threshold of each other for
#: uniform and answers 1/n (or skips the exponentials) is off by about the row's spread; the
#: ladder puts a row within a factor two below every threshold from a few ulps to 2**-4, so
#: one case meets any such shortcut.  Drawn, a near-uniform row lands in a given threshold's
#: window a few times in a hundred cases: a blind mutant with a 1e-5 threshold lived through 100
#: float32 examples at one seed (seventh red team, 2026-12-05).
SPREAD_LADDER_FEATURE = "values:spread-ladder"
#: The edge-spike and masked-long probes (forced only, where long rows are allowed): two rows of
#: the longest long-row length (16385 on the CPU: one entry past a power of two, a ragged tail of
#: one for every vector width), no special value.
#: - edge-spike: row 0's last entry and row 1's first exceed the rest of their row by the row
#:   shift (row_shift_for: past exp's range in the compute format).  A maximum that misses a
#:   ragged tail (a vector loop over n - n % 4 entries, the tail handled apart) or the first
#:   block overflows exp there: inf / inf = NaN, where the answer is one-hot.  Drawn at random a
#:   dominant entry lands in a 16385-entry row's tail one time in 16385.
#: - masked-long: every entry masked but the last quarter (a leading block: whole masked blocks
#:   or chunks open the row, whatever their width up to three quarters of it) or, one time in
#:   two, but the first (padding at the end), with the values moved MASKED_LONG_SHIFTS row shifts
#:   below 0.  A split-row kernel that gives a wholly masked chunk a finite stand-in maximum (0)
#:   and merges it with the others then lifts the row's maximum above every live entry by more
#:   than exp's range: 0 / 0.  The long-row probes have no mask, and drawn masks on long rows
#:   leave leading blocks of at most 128 entries; a blind mutant with chunks of 1024 lived
#:   (sixth red team, 2026-12-05).
MASKED_LONG_SHIFTS = 2
#: The probes whose cases draw their layout plainly (contiguous first); every other probe's
#: simplest case takes the layout ``layouts.probe_layout_order`` turns to by the probe's place in
#: SOFTMAX_PROBES.  Kept plain: aligned-specials (for the aligned path, which a strided or offset
#: view leaves), long-row (the long rows' schedules as the ordinary examples rarely reach them) and
#: the probes sized by the target's speed or memory, or laid out by the engine.
PLAIN_LAYOUT_PROBES = ("aligned-specials", "many-rows", "long-row", "index-width", "grid-rows", "wide-offsets")
#: The block-ends probe (forced only, where long rows are allowed), the attention probe's twin:
#: two rows of a long-row length that fills the last tile of many tile widths, one of
#: ``lengths.full_tiles_lengths`` by the dtype (``lengths.full_tiles_for``; on the CPU float16
#: 13440, tiles of 16 to 128, 48, 80, 96, 112, 160, 192, 224 and 240; bfloat16 and float32 the
#: rest of ``lengths.TILE_WIDTHS``), no
#: mask, no special value, every entry at a block's edge (``values.block_end_keys``: 15, 16, 31,
#: 32, ..., 8191, 8192, each full last tile's first entry and the one before it, and the last
#: entry: 43 of float32's 14400) lifted over the row's maximum to near-equal shares
#: (``values.BLOCK_END_SPREAD``): in row 0 by ln(n) + 1, so that those entries hold nearly all
#: the weight, in row 1 by the row shift (row_shift_for), so that they alone hold it (the rest
#: are 0).  A kernel that loses such an entry from its maximum and sum, counts it twice where
#: two blocks meet, or leaves its output unwritten is off by about a share 1 / (edges) of the
#: row there, whatever its block width: dropping every 1024th or 2048th entry of random rows
#: moved the output by 0.99 to 1.34 of the tolerance in float16 and bfloat16, where only the
#: mixed row's bias check stood between (CPU, 2026-12-07).  Until 2026-12-08 the rows were the
#: longest long rows (16385 on the CPU, a ragged tail for every tiling), and a blind mutant in
#: blocks of 80 that lost the last entry of a row filling them lived through 3 cells of 9
#: (fourteenth red team).
BLOCK_ENDS_GAP_NATS = 1.0
#: The narrow-values probe (forced only, for float32 and float64 inputs): an ordinary case whose
#: values are first rounded to the next narrower format (float64 -> float32, float32 ->
#: bfloat16), as inputs upcast from it are.  The input still asks for its own format's accuracy:
#: a dispatch that runs such "losslessly narrowable" inputs through the narrower kernel and casts
#: back is off by the narrower format's roundoff (a blind mutant doing so for float64 lived:
#: sixth red team, 2026-12-05; drawn float64 values are almost never all float32 numbers).
NARROWER = {"float64": "float32", "float32": "bfloat16"}
#: The mixed-row probe's longest row (``probe="mixed-row"``): one or two well-mixed rows of
#: MIXED_MIN_LENGTH to this many entries.  A sum rounded toward zero is off by ~n u_c / 3
#: against the bias check's ~10 sqrt(n) u_c, so the margin grows as sqrt(n) / 30: 3.0x here,
#: at half the cost of the long-row probe's 16385 entries (one ragged entry past 2**13).
MIXED_PROBE_MAX_LENGTH = 8193
#: The wide-offsets probe (``probe="wide-offsets"`` only, with ``wide_offsets=True``): a drawn
#: block of ``lengths.WRAP_REVEALING_COUNTS`` rows (rows of WIDE_ROW_INDEX_LENGTH entries or
#: more: 1 to WIDE_BLOCK_ROWS) of WIDE_MIN_LENGTH to WIDE_MAX_LENGTH entries (and the target's
#: max_length), repeated along the rows past ``lengths.WIDE_OFFSET_ELEMENTS``.
WIDE_BLOCK_ROWS = 4
WIDE_ROW_INDEX_LENGTH = 32768  # 2**31 entries in shorter rows are more than 65535 rows
WIDE_MIN_LENGTH = 16  # past 1 (a one-entry softmax is 1, whatever was read); short rows are many programs
WIDE_MAX_LENGTH = 2**20 + 1


@dataclass(frozen=True)
class SoftmaxSpec:
    """Everything needed to rebuild one softmax input.

    ``batch == 0`` gives a 2-D ``(rows, length)`` tensor, ``batch >= 1`` a 3-D
    ``(batch, rows, length)`` one, and ``heads >= 1`` (with a batch) a 4-D
    ``(batch, heads, rows, length)`` one; ``heads == 0`` means no heads dim, so stored
    specs without the field replay unchanged.  ``explicit`` (2-D only) holds the values
    themselves, already representable in ``dtype``; ``recipes`` is then empty.  The
    layouts in ``SOFTMAX_LEADING_LAYOUTS`` rearrange the leading dims and need a batch.
    """

    dtype: str
    rows: int
    length: int
    batch: int = 0
    recipes: tuple[ValueRecipe, ...] = (ValueRecipe(),)
    mask: MaskSpec = MaskSpec()
    specials: tuple[SpecialSpec, ...] = ()
    layout: str = "contiguous"
    seed: int = 0
    explicit: tuple[tuple[float, ...], ...] | None = None
    heads: int = 0  # last, so that positional construction keeps its meaning
    vector: bool = False  # a 1-D input, shape (length,): one row, no batch or heads
    # The wide-offsets probe: the built (rows, length) block is the first of ``tile`` repeated
    # along the rows; the target gets them all (``full_shape``), the engine checks every one.
    tile: int = 1
    # Flattened row g's values are shifted by row_shift * ROW_SHIFT_STEPS[g % 7] (many rows).
    row_shift: float = 0.0
    # The narrow-values probe: the values are first rounded to this narrower format ("": none).
    narrow: str = ""

    def __post_init__(self) -> None:
        try:
            fmt = get_format(self.dtype)
        except ValueError as err:
            raise spec_error("softmax spec", str(err)) from None
        object.__setattr__(self, "dtype", fmt.name)
        object.__setattr__(self, "recipes", tuple(self.recipes))
        object.__setattr__(self, "specials", tuple(self.specials))
        for name in ("rows", "length", "batch", "seed", "heads", "tile"):
            if not isinstance(getattr(self, name), int) or isinstance(getattr(self, name), bool):
                raise spec_error("softmax spec", f"{name} must be an int", getattr(self, name))
        if self.rows < 0 or self.length < 1 or self.batch < 0 or self.heads < 0:
            raise spec_error("softmax spec", "need rows >= 0, length >= 1, batch >= 0, heads >= 0", self.shape)
        if self.heads and not self.batch:
            raise spec_error("softmax spec", "heads >= 1 (a 4-D input) needs batch >= 1", self.shape)
        if self.tile < 1:
            raise spec_error("softmax spec", "tile must be >= 1", self.tile)
        if not (isinstance(self.row_shift, (int, float)) and not isinstance(self.row_shift, bool)
                and 0.0 <= self.row_shift < math.inf):
            raise spec_error("softmax spec", "row_shift must be a finite number >= 0", self.row_shift)
        object.__setattr__(self, "row_shift", float(self.row_shift))
        if self.narrow and self.narrow != NARROWER.get(fmt.name):
            raise spec_error("softmax spec", f"narrow must be '' or {fmt.name}'s narrower format "
                             f"{NARROWER.get(fmt.name)!r}", self.narrow)
        if self.tile > 1 and (self.batch or self.heads or self.vector or self.layout != "contiguous"):
            raise spec_error("softmax spec", "a tiled block (tile > 1) is 2-D and contiguous: batch = heads = 0, "
                             "vector False, layout 'contiguous'")
        if not 0 <= self.seed <= _rng.SEED_MAX:
            raise spec_error("softmax spec", f"seed must lie in [0, {_rng.SEED_MAX}]", self.seed)
        if self.layout not in SOFTMAX_LAYOUTS:
            raise spec_error("softmax spec", f"layout must be one of {SOFTMAX_LAYOUTS}", self.layout)
        if self.layout in SOFTMAX_LEADING_LAYOUTS and not self.batch:
            raise spec_error("softmax spec", f"layout {self.layout!r} rearranges leading dims: it needs batch >= 1")
        if not isinstance(self.vector, bool):
            raise spec_error("softmax spec", "vector must be a bool", self.vector)
        if self.vector and (self.rows != 1 or self.batch or self.heads):
            raise spec_error("softmax spec", "a 1-D input (vector=True) holds one row: rows = 1, batch = heads = 0")
        if self.vector and self.layout not in SOFTMAX_VECTOR_LAYOUTS:
            raise spec_error("softmax spec", f"a 1-D input's layout must be one of {SOFTMAX_VECTOR_LAYOUTS}",
                             self.layout)
        if self.explicit is None:
            if not self.recipes:
                raise spec_error("softmax spec", "needs at least one value recipe (or explicit values)")
        else:
            values = tuple(tuple(float(v) for v in row) for row in self.explicit)
            object.__setattr__(self, "explicit", values)
            if self.batch != 0 or len(values) != self.rows or any(len(r) != self.length for r in values):
                raise spec_error("softmax spec", "explicit values must form a rows x length matrix (batch 0)")
            if not np.isfinite(np.array(values)).all():
                raise spec_error("softmax spec", "explicit values must be finite (use specials and masks)")
        if any(s.tensor != "x" or len(s.index) != 2 for s in self.specials):
            raise spec_error("softmax spec", "special entries need tensor 'x' and a (row, col) index")
        if not fmt.has_inf and (self.mask.kind != "none" or any(s.kind == "+inf" for s in self.specials)):
            raise spec_error("softmax spec", f"{fmt.name} has no infinities: no mask, no +inf entries")

    @property
    def shape(self) -> tuple[int, ...]:
        if self.vector:
            return (self.length,)
        if self.heads:
            return (self.batch, self.heads, self.rows, self.length)
        return (self.batch, self.rows, self.length) if self.batch else (self.rows, self.length)

    @property
    def full_shape(self) -> tuple[int, ...]:
        """The shape the target gets: ``shape``, its rows repeated ``tile`` times."""
        return (self.rows * self.tile, self.length) if self.tile > 1 else self.shape

    @property
    def slabs(self) -> int:
        """How many ``(rows, length)`` matrices the input holds."""
        return max(self.batch, 1) * max(self.heads, 1)

    @property
    def total_rows(self) -> int:
        """Rows of the input flattened to ``(-1, length)``."""
        return self.slabs * self.rows

    @property
    def format(self) -> FloatFormat:
        return get_format(self.dtype)

    # ---- replay -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A dict of plain JSON types; ``case_from_dict`` (or :meth:`from_dict`) inverts it."""
        d = {
            "op": "softmax",
            "dtype": self.dtype,
            "rows": self.rows,
            "length": self.length,
            "batch": self.batch,
            "recipes": [r.to_dict() for r in self.recipes],
            "mask": self.mask.to_dict(),
            "specials": [s.to_dict() for s in self.specials],
            "layout": self.layout,
            "seed": self.seed,
            "explicit": None if self.explicit is None else [list(r) for r in self.explicit],
        }
        # Only when set: a spec without heads keeps the dict (and any name or hash made
        # from it) it had before the field existed.
        if self.heads:
            d["heads"] = self.heads
        if self.vector:
            d["vector"] = True
        if self.tile > 1:
            d["tile"] = self.tile
        if self.row_shift:
            d["row_shift"] = self.row_shift
        if self.narrow:
            d["narrow"] = self.narrow
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SoftmaxSpec":
        d = dict(d)
        op = d.pop("op", "softmax")
        if op != "softmax":
            raise spec_error("softmax spec", "op must be 'softmax'", op)
        try:
            return cls(
                dtype=d.pop("dtype"),
                rows=d.pop("rows"),
                length=d.pop("length"),
                batch=d.pop("batch", 0),
                recipes=tuple(ValueRecipe.from_dict(r) for r in d.pop("recipes", [{}])),
                mask=MaskSpec.from_dict(d.pop("mask", {})),
                specials=tuple(SpecialSpec.from_dict(s) for s in d.pop("specials", [])),
                layout=d.pop("layout", "contiguous"),
                seed=d.pop("seed", 0),
                explicit=d.pop("explicit", None),
                heads=d.pop("heads", 0),
                vector=d.pop("vector", False),
                tile=d.pop("tile", 1),
                row_shift=d.pop("row_shift", 0.0),
                narrow=d.pop("narrow", ""),
                **reject_extra_keys(d),
            )
        except (KeyError, TypeError) as err:
            raise spec_error("softmax spec", f"malformed dict ({err})") from None

    # ---- building ---------------------------------------------------------------------
    def keep(self) -> np.ndarray:
        """Boolean ``(slabs, rows, length)``: False where the logit is -inf."""
        heads = max(self.heads, 1)
        return np.stack(
            [
                # A 2-D input's rows are separate sequences (padding per row); a 3-D or 4-D one
                # pads per batch entry (s // heads), the same for every head.
                self.mask.keep(self.rows, self.length, _rng.stream(self.seed, _rng.MASK, s), s // heads,
                               self.batch == 0)
                for s in range(self.slabs)
            ]
        )

    def values(self) -> np.ndarray:
        """Float64 ``(slabs, rows, length)`` before rounding: values, mask and specials."""
        fmt = self.format
        if self.explicit is not None:
            x = np.array(self.explicit, dtype=np.float64).reshape(self.rows, self.length)[None]  # () has no length
        else:
            x = sample_groups(self.recipes, self.total_rows, (self.length,), fmt, fmt.max_finite,
                              lambda g: _rng.stream(self.seed, _rng.VALUES, g),
                              lambda block, r: _rng.stream(self.seed, _rng.BULK, _rng.VALUES, block, r))
            if self.row_shift:
                steps = np.array(ROW_SHIFT_STEPS, dtype=np.float64)
                x += (self.row_shift * steps[np.arange(self.total_rows) % len(steps)])[:, None]
                np.clip(x, -fmt.max_finite, fmt.max_finite, out=x)
            x = x.reshape(self.slabs, self.rows, self.length)
        x[~self.keep()] = -np.inf
        flat = x.reshape(-1, self.length)
        for special in self.specials:
            special.place(flat)
        return x

    def build(self, device: str = "cpu") -> torch.Tensor:
        values = self.values()
        if self.narrow:
            # Finite values clipped to the narrower format's range and rounded to it; -inf, +inf
            # and NaN stay as they are.
            top = get_format(self.narrow).max_finite
            values = np.where(np.isfinite(values), np.clip(values, -top, top), values)
            values = to_format(values, get_format(self.narrow)).to(torch.float64).numpy()
        x = to_format(values, self.format).reshape(self.shape)
        return materialize(x, self.layout, device)


#: Thresholds of the ``rows:many`` and ``len:long`` features (see ``strategies.features``).
MANY_FEATURE_ROWS = 32
LONG_FEATURE_LENGTH = 1024


def softmax_features(spec: SoftmaxSpec) -> tuple[str, ...]:
    found = [f"dtype:{spec.dtype}", *length_features(spec.length)]
    if spec.heads:
        found.append("shape:4d")
    elif spec.batch:
        found.append("shape:3d")
    elif spec.vector:
        found.append("shape:1d")
    total_rows = spec.total_rows * spec.tile
    if total_rows > MANY_FEATURE_ROWS:
        found.append("rows:many")
    if total_rows > GRID_AXIS_LIMIT:
        found.append("rows:grid")
    found.extend(offset_features(total_rows * spec.length))
    if spec.length > LONG_FEATURE_LENGTH:
        found.append("len:long")
    if spec.explicit is not None:
        found.append("values:explicit")
    else:
        used = spec.recipes[:total_rows]
        for recipe in used:
            found.extend(recipe.features())
        if len(set(used)) > 1:
            found.append("rows:mixed-ranges")
        if spec.row_shift and total_rows > 1:
            found.append("rows:shifted")
    if spec.narrow:
        found.append("values:narrow")
    if spec.explicit is None and is_near_uniform_ladder(spec.recipes, spec.format):
        found.append(SPREAD_LADDER_FEATURE)
    found.extend(spec.mask.kind_features())
    found.extend(keep_features(spec.keep()))
    found.extend(f"special:{s.kind}" for s in spec.specials)
    if spec.layout == "misaligned":
        found.append("layout:misaligned")
    elif spec.layout != "contiguous":
        found.append(f"layout:{spec.layout}")
        if is_noncontiguous(spec.layout, spec.shape):
            found.append("layout:noncontiguous")
    return ordered(found)


@dataclass(frozen=True, repr=False)
class SoftmaxCase(ReplayableRepr):
    """A drawn softmax input: its spec and the adversarial features it exercises."""

    spec: SoftmaxSpec
    features: tuple[str, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", softmax_features(self.spec))

    def build(self, device: str = "cpu") -> torch.Tensor:
        """The logits, dtype ``spec.dtype``, bitwise identical for equal specs."""
        return self.spec.build(device)

    def describe(self) -> str:
        s = self.spec
        parts = ["1-D", f"len={s.length}"] if s.vector else [f"rows={s.rows}", f"len={s.length}"]
        if s.heads:
            parts.insert(0, f"heads={s.heads}")
        if s.batch:
            parts.insert(0, f"batch={s.batch}")
        parts.append(short_dtype(s.dtype))
        if s.explicit is not None:
            flat = [v for row in s.explicit for v in row]
            shown = ", ".join(num(v) for v in flat[:8]) + (", ..." if len(flat) > 8 else "")
            parts.append(f"values=[{shown}]")
        elif len(s.recipes) == 1:
            parts.append(s.recipes[0].describe())
        else:
            parts.append("rows-cycle[" + "; ".join(r.describe() for r in s.recipes) + "]")
        if s.row_shift:
            parts.append(f"row-shift={num(s.row_shift)}x(0,1,-1,2,-2,3,-3)")
        if s.narrow:
            parts.append(f"values-in={short_dtype(s.narrow)}")
        if s.mask.kind != "none":
            parts.append(f"mask={s.mask.describe()}")
        if s.specials:
            parts.append("specials=[" + ", ".join(sp.describe() for sp in s.specials) + "]")
        if s.layout != "contiguous":
            parts.append(f"layout={s.layout}")
        parts.append(f"seed={s.seed}")
        if s.tile > 1:
            parts.append(f"repeated x{s.tile} to {s.full_shape[0]} x {s.length} "
                         f"({s.full_shape[0] * s.length} elements)")
        return " ".join(parts)


# ---- the strategy -------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class _SoftmaxConfig:
    call: str  # how the public function was called: the strategy's repr in Hypothesis output
    formats: tuple[FloatFormat, ...]
    min_length: int
    max_length: int
    max_rows: int
    special_values: bool
    masks: bool
    noncontiguous: bool
    elementwise: bool | None
    index_lengths: tuple[int, ...] = ()  # rare one-row lengths past max_length (lengths.INDEX_WIDTH_LENGTHS)
    four_d: bool = False
    long_range: tuple[int, int] | None = None  # lengths of the long-row probe, past max_length
    long_kinds: tuple[str, ...] = ()  # their kinds (lengths.LONG_LENGTH_KINDS)
    many_rows: tuple[int, int] | None = None  # total rows of the many-rows probe, past max_rows
    many_max_length: int = MANY_ROWS_MAX_LENGTH  # their length
    many_entries: int = 0  # and their entries in all
    grid_rows: tuple[int, ...] = ()  # row counts of the grid-rows probe (lengths.GRID_COUNTS)
    probe: str | None = None  # every case is this probe (SOFTMAX_PROBES)
    zero_strides: bool = True  # the lead-broadcast layout (caps.zero_strides)
    vector: bool = True  # one row may come as a 1-D input (caps.vector_input)
    wide_range: tuple[int, int] | None = None  # block lengths of the wide-offsets probe
    wide_elements: int = WIDE_OFFSET_ELEMENTS  # and the elements its repetitions pass
    mixed_range: tuple[int, int] | None = None  # lengths of the mixed-row probe
    empty_inputs: bool = True  # the no-rows probe (caps.empty_inputs)

    def unavailable_probes(self) -> dict[str, str]:
        """The probes these settings cannot draw, each with the reason."""
        out = {}
        if self.elementwise:
            return {p: "elementwise=True draws no probe" for p in SOFTMAX_PROBES}
        if not self.index_lengths:
            out["index-width"] = ("index_widths=False, or no length of 32767..65537 lies past max_length "
                                  "within caps.max_length")
        if self.long_range is None:
            out["long-row"] = "long_rows=False, or caps.max_length leaves no length past max_length"
            out["plateau-row"] = out["long-row"]
        if self.mixed_range is None:
            out["mixed-row"] = (f"long_rows=False, or caps.max_length below the summation-bias check's "
                                f"{MIXED_MIN_LENGTH} entries")
        if self.many_rows is None:
            out["many-rows"] = f"many_rows=False, or max_rows >= {MANY_ROWS[1]}"
        if not self.four_d:
            out["four-d"] = "four_d=False"
        if not self.grid_rows:
            out["grid-rows"] = (f"grid_rows below {GRID_AXIS_LIMIT + 1} (the search sizes it by the target's "
                                "speed), or elementwise=True")
        if self.wide_range is None:
            out["wide-offsets"] = (f"wide_offsets=False (the search turns it on where the device and the "
                                   f"target's speed allow), or caps.max_length below {WIDE_MIN_LENGTH}")
        if not self.empty_inputs:
            out["no-rows"] = "caps.empty_inputs=False (the target takes no input without rows)"
        if self.min_length > 1:
            out["one-entry"] = "caps.min_length above 1"
        if not self.special_values:
            out["aligned-specials"] = "special_values=False (caps take no NaN)"
        elif not aligned_special_lengths(self.min_length, self.max_length):
            out["aligned-specials"] = f"no power of two of {ALIGNED_SPECIAL_MIN_LENGTH} or more within the lengths"
        if self.max_length < 2:
            out["spread-ladder"] = "rows of one entry only (a one-entry softmax is 1 whatever its value)"
        if not any(f.name in NARROWER for f in self.formats):
            out["narrow-values"] = "no float32 or float64 among the dtypes"
        if self.long_range is None:
            out["edge-spike"] = out["masked-long"] = out["block-ends"] = out["long-row"]
        elif not self.masks:
            out["masked-long"] = "masks=False, or caps take no -inf"
        return out

    def __repr__(self) -> str:
        return self.call

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.call)


def softmax_cases(
    *,
    dtypes: tuple[str, ...] | list[str] = ("float32",),
    caps: Capabilities | None = None,
    max_length: int = 300,
    max_rows: int = 8,
    special_values: bool | None = None,
    masks: bool | None = None,
    elementwise: bool | None = None,
    index_widths: bool = True,
    long_rows: bool = True,
    many_rows: bool = True,
    four_d: bool = True,
    probe: str | None = None,
    probe_entries: int = 0,
    grid_rows: int = 0,
    wide_offsets: bool = False,
    wide_elements: int | None = None,
) -> SearchStrategy[SoftmaxCase]:
    """Softmax inputs within the target's capabilities, rich in adversarial features.

    * ``dtypes``: storage dtypes to draw from, intersected with ``caps.dtypes``;
      shrinking moves towards the first.
    * ``caps``: what the target supports (default: everything).  Lengths stay in
      ``[caps.min_length, min(max_length, caps.max_length)]`` (the probes below reach past
      ``max_length``, never past ``caps.max_length``); ``caps.neg_inf`` gates masks (-inf
      entries), ``caps.special_values`` NaN/+inf entries, ``caps.noncontiguous`` the
      non-default layouts.
    * ``max_rows``: rows per matrix; 3-D inputs add a batch of up to 3, 4-D inputs split
      the rows over up to 3 heads as well.
    * ``special_values`` / ``masks``: None follows ``caps``; False turns off;
      True insists (an error if ``caps`` forbids it).
    * ``elementwise``: None draws small inputs (<= 64 entries) element by element
      some of the time; True always does (forcing 2-D inputs of <= 64 entries, and none
      of the probes below); False never does.
    * ``index_widths``: about one example in ``INDEX_WIDTH_ODDS`` is a single row of a
      length at the edge of 16-bit indexing (32767..65537), past ``max_length`` but
      within ``caps.max_length``, with values that tell its positions apart
      (``position_distinct``), no mask and no NaN/inf entries; False never draws them.
    * ``long_rows``: about one example in 10 is one or two rows (2-D) of a length past
      ``max_length``, up to ``LONG_LENGTH_MAX`` (16385), ``max_rows**2 * max_length`` and
      ``caps.max_length``, concentrated on the edges of long tiles (multiples of
      512..4096 and one either side, powers of two and one either side, primes), with
      the full value recipes, masks and special values: a blocked or split-row kernel's
      long-row path; False never draws them.  Where ``max_length`` is already past 16385 (the
      GPU size profile's 20000), the long rows are of 16385 to ``max_length``.  Forced (``probe="long-row"``), the simplest
      case is one row of the longest length whose values rise past exp's range
      (``values.full_drift``).  ``probe="plateau-row"`` (forced only) draws the long rows the
      same way, the simplest case one row of the longest length on a step just past the sum's
      overflow edge (``values.stale_plateau``): a maximum that lags behind overflows the sum.
      ``probe="mixed-row"`` (forced only; it needs ``long_rows``) draws one or two well-mixed
      rows (``values.well_mixed``, no special value, the mask as drawn) of ``MIXED_MIN_LENGTH`` to
      ``MIXED_PROBE_MAX_LENGTH`` entries (and ``caps.max_length``), the longest in the simplest
      case: ``verify.tolerance.softmax_bias_bound`` holds their sums to a probabilistic bound,
      which a sum that rounds one way (toward zero, truncated) breaks.
    * ``many_rows``: about one example in ``MANY_ROWS_ODDS`` holds about 25..600 rows in
      all (past ``max_rows``; split over the batch and heads when there are some) of at
      most 32 entries (2 at least, where allowed) each and ``MANY_ROWS_SPAN * max_length``
      in all, so a persistent kernel's programs each take several rows, and with a mask
      that leaves at least ``MANY_ROWS_MIN_LIVE`` of the rows live; False never draws them.
    * ``four_d``: about one example with a batch in ``FOUR_D_ODDS`` is 4-D,
      ``(batch, heads, rows, length)``, its heads sharing the drawn rows (rows per head
      = ceil(rows / heads)); False keeps inputs 2-D and 3-D.
    * ``probe``: one of ``SOFTMAX_PROBES``: every case is that probe (the rest drawn as
      usual), so that a search can try each probe whatever its luck with the rare draws
      (``softmax_probes`` lists those the other arguments allow).  None: drawn rarely, but
      for ``grid-rows``, which is drawn only when forced.
    * ``probe_entries``: 0, or the cost of a many-rows case in entries, each of its rows costing
      ``ROW_COST`` more: up to ``MANY_ROWS[1]`` rows (fewer where it allows fewer, ``MANY_ROWS[0]``
      at least) of up to ``max_length`` entries.  0: ``MANY_ROWS_SPAN * max_length`` entries.
    * ``grid_rows``: the most rows of a grid-rows case, drawn only when forced
      (``probe="grid-rows"``) and only where it allows ``lengths.GRID_COUNTS``' 65536 (0, the
      default: none): past the 65535 blocks of a CUDA grid's second axis, rows of 2 to
      ``GRID_ROWS_MAX_LENGTH`` entries.  ``verify.search`` sizes both by the target's measured
      speed and passes them to its probe round alone.
    * ``wide_offsets``: allow the wide-offsets probe, drawn only when forced
      (``probe="wide-offsets"``): a 2-D block of ``lengths.WRAP_REVEALING_COUNTS`` rows (rows of
      ``WIDE_ROW_INDEX_LENGTH`` or more: 1 to ``WIDE_BLOCK_ROWS``, never 2**k entries) of
      ``WIDE_MIN_LENGTH`` to ``WIDE_MAX_LENGTH`` entries (within ``caps``, past the size
      profile) with the usual values, masks (at least half the rows live) and special
      entries, repeated along the rows (``spec.tile``) past ``lengths.WIDE_OFFSET_ELEMENTS``:
      4 to 16 GiB of input, so only for a device that holds it (False, the default: never).
      Every repetition must come out as the first does; ``verify.engine`` checks them all.
    * ``wide_elements``: the elements the wide-offsets probe's repetitions pass:
      ``lengths.WIDE_OFFSET_ELEMENTS`` (2**31, int32 offsets; None, the default) or, where 8 GiB
      tensors are out of reach (the CPU), ``lengths.FLOAT_OFFSET_ELEMENTS`` (2**24, offsets
      formed in float32): 64 MiB to 128 MiB of float32 input.
    * The simplest case of each probe is its strongest: a many-rows case has the most rows
      and entries, a grid-rows case the most rows and the longest ones.
    """
    config = _softmax_config(dtypes, caps, max_length, max_rows, special_values, masks, elementwise, index_widths,
                             long_rows, many_rows, four_d, probe, probe_entries, grid_rows, wide_offsets,
                             wide_elements)
    check_probe(probe, config.unavailable_probes(), SOFTMAX_PROBES)
    return _softmax_cases(config)


def softmax_probes(**kwargs: Any) -> tuple[str, ...]:
    """The probes (``SOFTMAX_PROBES``) that ``softmax_cases(**kwargs)`` can draw, in order."""
    unavailable = _softmax_config(**{**bound_arguments(softmax_cases, kwargs), "probe": None}).unavailable_probes()
    return tuple(p for p in SOFTMAX_PROBES if p not in unavailable)


def aligned_special_lengths(min_length: int, max_length: int) -> tuple[int, ...]:
    """The aligned-specials probe's lengths: the powers of two of ALIGNED_SPECIAL_MIN_LENGTH or
    more within [min_length, max_length]."""
    return _powers_of_two(max(min_length, ALIGNED_SPECIAL_MIN_LENGTH), max_length, 0, 0)


def floor_row_length(min_length: int, max_length: int) -> int:
    """The floor-row probe's length: the longest 2**k + 1 within [min_length, max_length] (a
    ragged tail of one for every power-of-two block), else max_length."""
    candidates = _powers_of_two(min_length, max_length, 1, 0)
    return candidates[-1] if candidates else max_length


def _softmax_config(dtypes, caps, max_length, max_rows, special_values, masks, elementwise, index_widths,
                    long_rows, many_rows, four_d, probe, probe_entries=0, grid_rows=0,
                    wide_offsets=False, wide_elements=None) -> _SoftmaxConfig:
    """softmax_cases' arguments checked and resolved (see there)."""
    caps = check_caps(caps)
    formats = resolve_dtypes(dtypes, caps)
    lo, hi = length_bounds(max_length, "max_length", caps)
    check_positive_int(max_rows, "max_rows")
    specials_on = resolve_switch(special_values, caps.special_values, "special_values", "special_values")
    masks_on = resolve_switch(masks, caps.neg_inf, "masks", "neg_inf")
    if masks is True:
        check_argument(
            any(f.has_inf for f in formats),
            f"masks=True but none of dtypes={tuple(f.name for f in formats)} can hold -inf; "
            f"add a dtype with infinities or pass masks=None",
        )
    check_optional_bool(elementwise, "elementwise")
    if elementwise:
        check_argument(
            lo <= EXPLICIT_MAX_ENTRIES,
            f"elementwise=True needs inputs of at most {EXPLICIT_MAX_ENTRIES} entries, "
            f"but caps.min_length={caps.min_length}; pass elementwise=None",
        )
    call = call_text(
        "softmax_cases",
        dtypes=tuple(f.name for f in formats),
        caps=caps,
        max_length=max_length,
        max_rows=max_rows,
        special_values=special_values,
        masks=masks,
        elementwise=elementwise,
        index_widths=index_widths,
        long_rows=long_rows,
        many_rows=many_rows,
        four_d=four_d,
        probe=probe,
        probe_entries=probe_entries,
        grid_rows=grid_rows,
        wide_offsets=wide_offsets,
        wide_elements=wide_elements,
    )
    check_optional_bool(index_widths, "index_widths")
    for value, name in ((probe_entries, "probe_entries"), (grid_rows, "grid_rows")):
        check_argument(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                       f"{name} must be a non-negative int, got {value!r}")
    wide_elements = wide_elements_or_default(wide_elements)
    for value, name in ((long_rows, "long_rows"), (many_rows, "many_rows"), (four_d, "four_d"),
                        (wide_offsets, "wide_offsets")):
        check_bool(value, name)
    probes = not elementwise
    wide = index_width_lengths(lo, caps.max_length, hi) if index_widths and probes else ()
    long_cap = max_rows * max_rows * hi
    long_range = None
    if long_rows and probes:
        long_range = long_length_range(lo, long_cap if caps.max_length is None else min(caps.max_length, long_cap), hi)
        if long_range is None and hi >= LONG_LENGTH_MAX:
            # The ordinary lengths already reach past the long rows' (the GPU size profile's 20000):
            # the long probes take the longest of them, so that their full-strength rows (a drift
            # past exp's range, a plateau past the sum's edge) are still tried at the top length.
            long_range = (max(lo, LONG_LENGTH_MAX), hi)
    many_lo, many_hi = max(MANY_ROWS[0], max_rows + 1), MANY_ROWS[1]
    if probe_entries:
        # Sized by the caller: rows of ROW_COST plus their entries within probe_entries.
        many_hi = min(MANY_ROWS_SIZED_MAX, max(many_lo, probe_entries // (ROW_COST + max(lo, 2))))
    many = (many_lo, many_hi) if many_rows and probes and many_lo <= many_hi else None
    # Short rows keep a many-rows example cheap, unless probe_entries affords more; a target's
    # minimum length still rules.
    many_entries = MANY_ROWS_SPAN * hi
    if probe_entries:
        many_entries = max(many_lo * lo, probe_entries - many_hi * ROW_COST)
    many_length = min(hi, max(lo, MANY_ROWS_MAX_LENGTH, many_entries // many_hi))
    long_kinds = long_length_kinds(*long_range) if long_range else ()
    grid = grid_counts(grid_rows) if probes else ()
    wide_lo, wide_hi = max(lo, WIDE_MIN_LENGTH), min(caps.max_length or WIDE_MAX_LENGTH, WIDE_MAX_LENGTH)
    wide_range = (wide_lo, wide_hi) if wide_offsets and probes and wide_lo <= wide_hi else None
    mixed_lo = max(lo, MIXED_MIN_LENGTH)
    mixed_hi = min(caps.max_length or MIXED_PROBE_MAX_LENGTH, MIXED_PROBE_MAX_LENGTH)
    mixed_range = (mixed_lo, mixed_hi) if long_rows and probes and mixed_lo <= mixed_hi else None
    config = _SoftmaxConfig(call, formats, lo, hi, max_rows, specials_on, masks_on, caps.noncontiguous, elementwise,
                            wide, four_d and probes, long_range, long_kinds, many, many_length,
                            many_entries, grid, probe, zero_strides=caps.zero_strides,
                            vector=caps.vector_input, wide_range=wide_range, wide_elements=wide_elements,
                            mixed_range=mixed_range, empty_inputs=caps.empty_inputs)
    return config


def _live_share(mask: MaskSpec, rows: int, length: int) -> float:
    """The share of a ``rows x length`` matrix's rows that ``mask`` leaves an entry live in
    (a random mask's from one fixed draw: an estimate, close at the many rows it is for)."""
    keep = mask.keep(rows, length, np.random.default_rng(0), per_row=True)
    return float(keep.any(axis=1).mean())


@st.composite
def _softmax_cases(draw: st.DrawFn, c: _SoftmaxConfig) -> SoftmaxCase:
    # The narrow-values probe draws a format that has a narrower one (NARROWER).
    narrowable = tuple(f for f in c.formats if f.name in NARROWER) if c.probe == "narrow-values" else ()
    fmt = draw(st.sampled_from(narrowable or c.formats))
    # First: the probes' lengths come from the seed, and the mask is drawn for the length.
    seed = draw(st.integers(0, _rng.SEED_MAX))
    wide = False  # one row at a 16-bit index width, to show misaddressing
    heads = 0
    many_case = False  # this case is the many-rows kind
    tile = 1  # the wide-offsets probe's repetitions of the block
    if c.elementwise:
        length = draw(lengths(c.min_length, min(c.max_length, EXPLICIT_MAX_ENTRIES)))
        rows = draw(st.integers(1, max(1, min(c.max_rows, EXPLICIT_MAX_ENTRIES // length))))
        batch = 0
    else:
        length = draw(lengths(c.min_length, c.max_length))
        rows = draw(st.integers(1, c.max_rows))
        batch = draw(st.integers(0, MAX_BATCH))
        wide = draws_index_width(draw, c.index_lengths)
        forced = c.probe
        if forced is not None:
            wide = forced == "index-width"
        if forced == "four-d":
            # The probe's simplest case its strongest: every leading dim past 1, rows of more than
            # one entry (one entry's softmax is 1, whichever entry was read).  FOUR_D_LENGTH at
            # most: the probe is about flattening the leading dims, and 27 rows of 300 took the
            # interpreted precise softmax seconds a dtype.
            batch = largest_first(draw, 1, MAX_BATCH)
            top = max(c.min_length, min(c.max_length, FOUR_D_LENGTH))
            rows, length = largest_first(draw, 1, c.max_rows), largest_first(draw, c.min_length, top)
        # Each probe's choices are drawn whether or not it is taken, so that the ordinary
        # case costs as many choices as a probe (see the comment on recipes below).
        if c.four_d:
            # the most heads first: a 4-D input's simplest case splits its rows the most
            four, n_heads = rare(draw, FOUR_D_ODDS), largest_first(draw, 1, MAX_HEADS)
            four = four if forced is None else forced == "four-d"
            if four and batch:
                # The heads share the drawn rows, so a 4-D input costs what a 3-D one does (the
                # engine's search can climb onto one kind of input for most of a run).
                heads, rows = n_heads, -(-rows // n_heads)
        long_row = False
        if c.long_range is not None:
            long_row, long_kind = rare(draw, LONG_ROW_ODDS), draw(st.sampled_from(c.long_kinds))
            long_row = long_row if forced is None else forced in ("long-row", "plateau-row")
        many = False
        if c.many_rows is not None:
            many = rare(draw, MANY_ROWS_ODDS) if forced is None else forced == "many-rows"
            # Forced (the probe round), the most rows of the longest length one time in three and
            # in the simplest case; else counts and lengths at the same edges as lengths (and a
            # failure drawn at random shrinks to the fewest, shortest rows).
            full = draw(st.integers(0, 2)) == 0 and forced == "many-rows"
            many_total = c.many_rows[1] if full else draw(lengths(*c.many_rows))
            # Two entries at least (where allowed), as in grid-rows: a one-entry row's softmax
            # is 1 whatever state or row a kernel mixed into it.
            many_floor = max(c.min_length, min(2, c.many_max_length))
            many_length = c.many_max_length if full else draw(lengths(many_floor, c.many_max_length))
        if forced == "grid-rows":
            # The most rows first, and the longest; two entries at least (where allowed): a
            # one-entry row's softmax is 1, whichever row was read.
            total = c.grid_rows[-1 - draw(st.integers(0, len(c.grid_rows) - 1))]
            top = max(c.min_length, min(c.max_length, GRID_ROWS_MAX_LENGTH))
            length, heads = largest_first(draw, min(top, max(c.min_length, 2)), top), 0
            rows = -(-total // max(batch, 1))
        elif forced == "wide-offsets":
            # Any length of the range (the offsets pass the edge whatever it is; a kernel's short-
            # and long-row paths both form them), repeated past c.wide_elements: rows shorter than
            # WIDE_ROW_INDEX_LENGTH in blocks of 7, 11 or 13 (WRAP_REVEALING_COUNTS: the repeated
            # rows pass a grid axis's 65535, and a wrapped row index must read other numbers);
            # longer ones, whose repetitions number too few rows for that, in blocks of 1 to 4
            # rows (never 2**k entries): 11 rows of 2**20 made the block's oracle the cost of a
            # CPU cell's probe round (18 of 27 s, 2026-12-06).
            length = draw(lengths(*c.wide_range))
            if length < WIDE_ROW_INDEX_LENGTH:
                rows = draw(st.sampled_from(WRAP_REVEALING_COUNTS))
            else:
                rows = off_powers_of_two(draw(st.integers(1, WIDE_BLOCK_ROWS)), length)
            batch, heads, tile = 0, 0, wide_repetitions(rows * length, c.wide_elements)
        elif forced == "mixed-row":
            # One or two well-mixed rows (below), the longest one time in two and in the simplest
            # case (the bias check's margin grows with the length); with a batch, as (1, rows, N).
            full = not draw(st.booleans())
            length = c.mixed_range[1] if full else draw(lengths(*c.mixed_range))
            rows, batch, heads = 2 if rows % 2 == 0 else 1, min(batch, 1), 0
        elif forced == "narrow-values":
            # The most rows of the longest length first: one entry's softmax is 1 in any format.
            rows, length = largest_first(draw, 1, c.max_rows), largest_first(draw, c.min_length, c.max_length)
        elif forced in ("edge-spike", "masked-long"):
            length, rows, batch, heads = c.long_range[1], 2, 0, 0
        elif forced == "block-ends":
            length, rows, batch, heads = full_tiles_for(*c.long_range, fmt.name), 2, 0, 0
        elif forced == "floor-row":
            length, rows, batch, heads = floor_row_length(c.min_length, c.max_length), min(2, c.max_rows), 0, 0
        elif forced == "spread-ladder":
            length, rows, batch, heads = c.max_length, NEAR_UNIFORM_STEPS, 0, 0
        elif forced == "one-entry":
            length, rows, batch, heads = 1, min(c.max_rows, ONE_ENTRY_ROWS), 0, 0
        elif forced == "aligned-specials":
            aligned = aligned_special_lengths(c.min_length, c.max_length)
            length = aligned[largest_first(draw, 0, len(aligned) - 1)]
            rows, batch, heads = min(c.max_rows, ALIGNED_SPECIAL_ROWS), 0, 0
        elif wide:  # one long row: the cost stays that of an ordinary example
            length, rows, batch, heads = index_width_length(c.index_lengths, seed), 1, 0, 0
        elif long_row:
            # One or two rows: two show a kernel that carries a long row's state into the next.
            # With a batch drawn, as (1, rows, N): a long-row path must flatten the leading dims
            # too, not take the rows from dim 0.
            length, batch, heads = long_length(*c.long_range, long_kind, seed), min(batch, 1), 0
            rows = 2 if rows % 2 == 0 and 2 * length <= c.long_range[1] else 1
        elif many:
            many_case = True
            length = max(many_floor, min(many_length, c.many_entries // many_total))
            rows = max(1, many_total // (max(batch, 1) * max(heads, 1)))
    total_rows = max(batch, 1) * max(heads, 1) * rows

    # Hypothesis shrinks towards fewer choices before anything else, so every
    # branch below draws at least as much as the simplest one: the recipes are
    # drawn even when explicit values replace them, and the mask is drawn even
    # for a dtype that cannot hold -inf.  Otherwise shrinking would drift
    # towards explicit values or float8 just because they are cheaper.
    recipes = tuple(
        draw(st.lists(value_recipes(fmt, SOFTMAX_VALUE_KINDS), min_size=1, max_size=min(MAX_RECIPES, total_rows)))
    )
    if wide or tile > 1:
        # Rows that tell positions apart: a constant row read from the wrong place looks right.
        recipes = tuple(position_distinct(r, fmt) for r in recipes)
    mixed = ((rare(draw, MIXED_ODDS) or c.probe == "mixed-row") and length >= MIXED_MIN_LENGTH and not wide
             and tile == 1)
    if mixed:
        recipes = tuple(well_mixed(r, fmt) for r in recipes)
    mode = "explicit" if c.elementwise else "recipes"
    if c.elementwise is None:
        mode = draw(st.sampled_from(("recipes", "explicit")))
    explicit = None
    if mode == "explicit" and batch == 0 and rows * length <= EXPLICIT_MAX_ENTRIES and tile == 1:
        explicit = draw(_explicit_values(fmt, rows, length))
        recipes = ()

    mask = MaskSpec()
    if c.masks:
        mask = draw(mask_specs(rows, length, MASK_KINDS))
        # Fully masked rows' answers (0 or NaN) are what fresh or never-written memory may hold.
        mostly_live = many_case or tile > 1
        if not fmt.has_inf or (mostly_live and _live_share(mask, rows, length) < MANY_ROWS_MIN_LIVE):
            mask = MaskSpec()

    specials = tuple(
        draw(
            st.lists(
                special_specs(special_kinds(fmt, c.special_values), (("x", (total_rows, length)),)),
                max_size=MAX_SPECIALS,
            )
        )
    )
    if wide:
        # A NaN or +inf makes the whole row NaN by contract, and a mask can hide most of the
        # row: either would hide a misaddressing, which is what this row is drawn to show.
        specials, mask = (), MaskSpec()
    if tile > 1:
        specials = ()  # a NaN row is NaN whatever was read; masks stay (at least half the rows live)
    if mixed and explicit is None:
        # A NaN or +inf entry takes its row out of the bias check (the row is NaN); a mask does
        # not (its entries are exact zeros in the sum) and stays: a sum wrong only on masked
        # long rows shows there.
        specials = ()
    if c.probe == "one-entry":
        # One row of each kind in turn (see ONE_ENTRY_KINDS): the rest as drawn.
        mask, rows_of = MaskSpec(), {}
        allowed = [k for k in ONE_ENTRY_KINDS if k == "finite" or (k == "masked" and c.masks and fmt.has_inf)
                   or k in special_kinds(fmt, c.special_values)]
        for r in range(rows):
            rows_of.setdefault(allowed[r % len(allowed)], []).append(r)
        if rows_of.get("masked"):
            mask = MaskSpec("fully-masked-row", rows=tuple(rows_of["masked"]))
        specials = tuple(SpecialSpec(k, "x", (r, 0)) for k in ONE_ENTRY_KINDS[2:] for r in rows_of.get(k, ()))
    if c.probe == "aligned-specials":
        # See ALIGNED_SPECIAL_ROWS: one special entry a row in turn, spread from a drawn column.
        mask, first = MaskSpec(), draw(st.integers(0, length - 1))
        allowed = special_kinds(fmt, c.special_values)
        kinds = [k for k in ALIGNED_SPECIAL_KINDS if k == "finite" or k in allowed]
        spacing = length // max(rows, 1) + 1
        specials = tuple(SpecialSpec(kinds[r % len(kinds)], "x", (r, (first + r * spacing) % length))
                         for r in range(rows) if kinds[r % len(kinds)] != "finite")
    if c.probe == "floor-row" and explicit is None:
        # See FLOOR_ROW_ULPS: drawn as usual, then replaced (the same choices).
        floor = -fmt.max_finite
        recipes = (ValueRecipe("constant", offset=floor),
                   ValueRecipe("near-max", scale=FLOOR_ROW_ULPS * fmt.eps * fmt.max_finite, offset=floor))
        specials, mask = (), MaskSpec()
    if c.probe == "spread-ladder" and explicit is None:
        # See SPREAD_LADDER_FEATURE: drawn as usual, then replaced (the same choices).
        recipes = near_uniform_ladder(fmt)
        specials, mask = (), MaskSpec()
    if c.probe == "edge-spike" and explicit is None:
        # See MASKED_LONG_SHIFTS: the spike at the end of row 0, at the start of row 1.
        gap = row_shift_for(fmt)
        recipes = tuple(ValueRecipe("dominant", scale=1.0, gap=gap, count=at) for at in (1, 2))
        specials, mask = (), MaskSpec()
    if c.probe == "block-ends" and explicit is None:
        # See BLOCK_ENDS_GAP_NATS: most of the weight at the edges (row 0), all of it (row 1).
        at = DOMINANT_AT.index("block-ends")
        recipes = tuple(ValueRecipe("dominant", scale=1.0, gap=gap, count=at)
                        for gap in (math.log(length) + BLOCK_ENDS_GAP_NATS, row_shift_for(fmt)))
        specials, mask = (), MaskSpec()
    if c.probe == "masked-long" and explicit is None:
        # See MASKED_LONG_SHIFTS: the last quarter live (lead; the simplest case) or the first (tail).
        lead = not draw(st.booleans())
        masked = length - max(1, length // 4)
        if fmt.has_inf:
            mask = (MaskSpec("leading-block", block=masked) if lead
                    else MaskSpec("key-padding", pads=(masked,), side="end"))
        low = -MASKED_LONG_SHIFTS * row_shift_for(fmt)
        recipes = tuple(replace(r, offset=r.offset + low) for r in recipes)
        specials = ()
    if c.probe in ("long-row", "plateau-row") and explicit is None:
        # The probe round's long rows at full strength, with no mask or special value to hide a
        # wrong maximum, their first recipe: for long-row a drift that rises past exp's range, so
        # that the running maximum must move on at every block boundary (values.full_drift); for
        # plateau-row a step whose exponentials overflow the sum relative to the first half
        # (values.stale_plateau), so that the maximum must move on past the step however small
        # it looks.  Drawn as usual, then replaced, so the case costs the same choices.
        # The drift lies wholly below 0, its top a row shift (row_shift_for) below: softmax
        # ignores the shift, and a maximum that starts at 0, or is combined by a rule right for
        # one sign only (the float's bits compared as integers), loses the row.
        drift = full_drift(fmt)
        drift = replace(drift, offset=-min(drift.gap + row_shift_for(fmt), fmt.max_finite - drift.gap))
        recipes = (drift if c.probe == "long-row" else stale_plateau(fmt),) + recipes[1:]
        specials, mask = (), MaskSpec()
    layouts = ("contiguous",)
    if c.noncontiguous:
        # The leading-dim layouts are plain contiguous memory for a 2-D input.
        layouts = SOFTMAX_LAYOUTS if batch else tuple(n for n in SOFTMAX_LAYOUTS if n not in SOFTMAX_LEADING_LAYOUTS)
        if not c.zero_strides or explicit is not None:
            # (values drawn entry by entry keep every row: a broadcast would keep row 0's alone)
            layouts = tuple(n for n in layouts if n not in BROADCAST_DIM)
    # One row alone is also drawn as a 1-D input, (length,) (False first: it shrinks to 2-D).  A
    # launcher that reads x.stride(-2) or x.shape[-2], or a kernel that flattens to (rows, length)
    # from x.shape[0], fails only there.  Drawn in every case, so a case costs as many choices.
    vector = draw(st.booleans()) and c.vector and rows == 1 and not batch and not heads and tile == 1
    if vector:
        layouts = tuple(n for n in layouts if n in SOFTMAX_VECTOR_LAYOUTS)
    if tile > 1:
        layouts = ("contiguous",)  # the repetitions are made by the engine, contiguous
    if c.probe and c.probe not in PLAIN_LAYOUT_PROBES:
        layouts = probe_layout_order(layouts, SOFTMAX_PROBES.index(c.probe))
    layout = draw(st.sampled_from(layouts))
    # Many rows: each row shifted against its neighbours past exp's range (see ROW_SHIFT_STEPS).
    row_shift = row_shift_for(fmt) if many_case and explicit is None else 0.0
    narrow = NARROWER.get(fmt.name, "") if c.probe == "narrow-values" else ""
    if c.probe == "no-rows":
        # See NO_ROWS: the rest as drawn (explicit values, where drawn, become none).
        rows, specials, vector = NO_ROWS, (), False
        explicit = None if explicit is None else ()
    spec = SoftmaxSpec(
        dtype=fmt.name,
        rows=rows,
        length=length,
        batch=batch,
        recipes=recipes,
        mask=mask,
        specials=specials,
        layout=layout,
        seed=seed,
        explicit=explicit,
        heads=heads,
        vector=vector,
        tile=tile,
        row_shift=row_shift,
        narrow=narrow,
    )
    return SoftmaxCase(spec)


def row_shift_for(fmt: FloatFormat) -> float:
    """The row shift of a many-rows case of ``fmt`` (see ``ROW_SHIFT_STEPS``): the natural log of
    the compute format's smallest subnormal, negated, plus ROW_SHIFT_MARGIN, rounded up (112 for
    inputs of 32 bits or fewer, computed in float32; 753 for float64)."""
    compute = get_format(Capabilities().compute_format(fmt.name))
    return float(math.ceil(-math.log(compute.smallest_subnormal) + ROW_SHIFT_MARGIN))


def _round_to(fmt: FloatFormat, values: list[float]) -> list[float]:
    clipped = np.clip(np.array(values, dtype=np.float64), -fmt.max_finite, fmt.max_finite)
    return to_format(clipped, fmt).to(torch.float64).tolist()


_DRAW_WIDTH = {"float16": 16, "bfloat16": 32, "float32": 32, "float64": 64, "float8_e4m3fn": 16, "float8_e5m2": 16}


@lru_cache(maxsize=256)
def _explicit_values(fmt: FloatFormat, rows: int, length: int) -> SearchStrategy[tuple[tuple[float, ...], ...]]:
    # Narrow formats are drawn at the nearest width Hypothesis supports and rounded
    # (to nearest even) to the format; the stored values are the rounded ones.
    width = _DRAW_WIDTH[fmt.name]
    element = st.floats(-fmt.max_finite, fmt.max_finite, allow_nan=False, allow_infinity=False, width=width)
    return st.lists(element, min_size=rows * length, max_size=rows * length).map(
        lambda flat: tuple(
            tuple(row) for row in np.array(_round_to(fmt, flat), dtype=np.float64).reshape(rows, length).tolist()
        )
    )
