"""Attention inputs: a replayable spec, the case built from it, and the strategy drawing cases.

A drawn :class:`AttentionSpec` fixes the shapes (batch, Hq, Hkv, Nq, Nk, D), the
scale, causal flag and boolean mask recipe, one value recipe each for Q, K and
V, special entries, a layout per tensor and a seed.  :meth:`AttentionCase.build`
expands it into :class:`AttentionInputs` deterministically: each (batch, head)
slab of each tensor has its own random stream, so shrinking the batch or head
count leaves the surviving slabs' numbers unchanged.

Magnitudes are bounded so that failures are the kernel's, not the format's:

* Q and K entries stay below ``sqrt(C / (64 * D * max(|scale|, 1)))`` where C is
  the largest finite value of the compute format (float32 for inputs of 32 bits
  or fewer, float64 for float64), so neither ``q.k`` nor ``scale * q.k``
  overflows however the kernel orders the product.  Scores of 1e4 and more
  (one-hot softmax) remain reachable.
* V entries stay below ``min(max_finite / 2, C / (2 * Nk))``: an unnormalised
  accumulation of ``Nk`` rows with weights <= 1 cannot overflow the compute format (see
  ``v_limit``; float16 V reaches 32752, past what such a sum held in float16 survives).

The causal flag is passed through as is; which diagonal it means when
Nq != Nk is the consumer's convention (this suite's oracle and reference use
top-left, as ``torch.nn.functional.scaled_dot_product_attention``;
FlashAttention >= 2.1 uses bottom-right).  Bottom-right patterns are still
exercised through the boolean mask: a ``causal`` mask recipe with offset
``Nk - Nq``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
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
from strategies.features import (ATTENTION_BROADCAST_LAYOUTS, ATTENTION_KV_LAYOUTS, ATTENTION_LAYOUTS, K_VALUE_KINDS, QK_VALUE_KINDS, V_VALUE_KINDS, ZERO_RUN_KINDS,
                                 ordered)
from strategies.layouts import (has_strided_last_dim, is_aligned, is_noncontiguous, materialize, pack_kv,
                                probe_layout_order)
from strategies.lengths import (
    GRID_AXIS_LIMIT,
    _powers_of_two,
    INDEX_WIDTH_LENGTHS,
    WIDE_OFFSET_ELEMENTS,
    draws_index_width,
    full_tiles_for,
    grid_counts,
    index_width_length,
    index_width_lengths,
    length_features,
    lengths,
    WRAP_REVEALING_COUNTS,
    offset_features,
    wide_elements_or_default,
    wide_repetitions,
)
from strategies.masks import MASK_KINDS, STAGGERED_KINDS, MaskSpec, keep_features, mask_specs
from strategies.rounding import to_format
from strategies.specials import SpecialSpec, special_kinds, special_specs
from strategies.values import (KEY_SPIKE_AT, UNDERFLOW_SIGNS, ValueRecipe, magnitudes, position_distinct, sample_groups,
                               value_recipes)
from verify.capabilities import Capabilities
from verify.dtypes import FORMATS, FloatFormat, get_format
from verify.tolerance import ILL_CONDITIONED_ARGUMENT_ERROR

#: Head dims tried when none are given, smallest first (shrinking goes to small D).
#: Powers of two, the non-powers of two real models use, and tiny ones.
#: Past 256 (one over it, and 512) only where the target's ``head_dim_max`` allows: a kernel
#: that tiles D in 256-wide blocks, or keeps one 256-wide tile, goes wrong there.
INTERESTING_HEAD_DIMS = (1, 2, 3, 4, 5, 7, 8, 16, 24, 32, 40, 48, 64, 72, 80, 96, 112, 120, 128, 160, 192, 256,
                         257, 512)
#: Cases with a head dim past this keep at most WIDE_HEAD_MAX_SEQ queries and keys, one
#: batch and two K/V heads.
WIDE_HEAD_DIM = 256
WIDE_HEAD_MAX_SEQ = 32
#: Upper ends of the head-dim tiers.  A case draws a tier, then a dim within it: one
#: sampled_from over all of them reached the last entries (257, 512) in none of 300 examples
#: (Hypothesis favours early choices), so a kernel wrong only past 256 lived.
HEAD_DIM_TIERS = (16, 64, 128, WIDE_HEAD_DIM, None)

#: Broadcast shapes of the boolean mask; key-padding masks may also be (B, 1, 1, Nk).  The
#: 3-d ones align from the right, as broadcasting does: (1, Nq, Nk) and (Hq, Nq, Nk), whose
#: leading dim is the heads', not the batch's (a kernel that takes it for the batch is wrong).
MASK_SHAPES = ("qk", "11qk", "b1qk", "1hqk", "bhqk", "1qk", "hqk")
MASK_SHAPES_BY_RANK = (("qk",), ("1qk", "hqk"), ("11qk", "b1qk", "1hqk", "bhqk"))
#: How the mask tensor is laid out in memory (its values are the same in every layout):
#: ``contiguous``; ``sliced``, a view into a larger buffer whose extra rows and columns
#: hold a checkerboard, starting one row and one column in (as a cached mask sliced to the live
#: window, ``[1:Nq+1, 1:Nk+1]``: the view has a storage offset, which a kernel that reads the mask
#: from its storage's start misses; a blind mutant that did lived through seeds 1-3 of 4 s a dtype
#: when the view started at the buffer's start, eleventh red team, 2026-12-06); ``transposed``,
#: column-major; ``expanded``, broadcast to (B, Hq, Nq, Nk) with zero strides.
MASK_LAYOUTS = ("contiguous", "sliced", "transposed", "expanded")
#: Masks over the keys alone also come with a singleton query axis: (B, 1, 1, Nk), and per head
#: (B, Hq, 1, Nk), whose heads differ (a kernel that reads head 0's row for all is wrong).  Key
#: padding, and the mask kinds whose first row is as good a key mask and differs across heads
#: (KEY_MASK_KINDS): a kernel may take any (B, Hq, 1, Nk) mask for padding.  In 1,200 drawn
#: cases (seeds 1-4, 2026-11-30) masks of that shape that differ across heads came 42 times,
#: against 13 for key padding alone; the price, 3-d masks over several heads 89 times, not 137.
QUERY_BROADCAST_SHAPES = ("b11k", "bh1k")
KEY_MASK_KINDS = ("random", "fully-masked-row", "single-unmasked", "key-padding")
#: Masks over the queries alone, broadcast over the keys: (Nq, 1), (B, 1, Nq, 1), (B, Hq, Nq, 1)
#: (query padding: a masked query sees no key, and its output is 0).  A kernel that takes any
#: mask with one singleton axis for key padding reads such a mask along the wrong axis; one that
#: reads a mask with the key stride of a full one reads past it.  The kinds whose first column
#: differs across queries (KEY_BROADCAST_KINDS) give the column: random queries, whole rows
#: (fully-masked-row), the leading or trailing queries (a causal diagonal offset: left padding).
KEY_BROADCAST_SHAPES = ("q1", "b1q1", "bhq1")
#: Masks with a singleton axis, over the queries or over the keys.
BROADCAST_MASK_SHAPES = QUERY_BROADCAST_SHAPES + KEY_BROADCAST_SHAPES
KEY_BROADCAST_KINDS = ("random", "fully-masked-row", "single-unmasked", "causal")
MAX_SPECIALS = 3
#: Long-key probes (see ``attention_cases``) keep the rest of the case small: at most this
#: many queries, one batch, two K/V heads (four query heads with GQA) and head dims up to
#: ``LONG_KEY_MAX_HEAD_DIM``, so one costs about as much as an ordinary example.  Two K/V
#: heads, because a key offset that wraps reads the rows before the head's, which belong
#: to another head: with one head, a read that lands back in the same head (such as key
#: j - 1 for key j when Nk = 65535) moves a (key, value) pair but barely changes the
#: output, a weighted sum over all pairs.
LONG_KEY_MAX_QUERIES = 4
LONG_KEY_KV_HEADS = 2
LONG_KEY_MAX_HEAD_DIM = 16
#: Spread of Q and K in a long-key probe: the scores' spread (the product of the two with
#: the default scale) lies in [4, 16], so a few of the 32k-65k keys carry most of the
#: weight and the output is theirs; near-flat scores make it a mean over all keys, which
#: hides which rows were read.
LONG_KEY_QK_SPREAD = (2.0, 4.0)
#: Rare probes past the size profile (see ``attention_cases``): one example in
#: ``PROBE_ODDS`` has up to ``MID_KEYS_MAX`` keys (with few queries and heads, any mask,
#: values and specials), one more has up to ``MANY_HEADS_MAX_BATCH`` x
#: ``MANY_HEADS_MAX_KV_HEADS`` x ``MANY_HEADS_MAX_GROUP`` (batch, head) pairs of short
#: sequences, ``MANY_HEADS_MAX_PAIRS`` at most.  Tiling bugs past a few key blocks, and
#: per-program state that leaks across (batch, head) pairs of a persistent grid, show only
#: there.  A persistent grid has a few programs a SM (108 to 170 SMs on current data-centre
#: GPUs; 512 programs is 4 a SM on the H200), so the probe's simplest case has up to 1024 pairs
#: (8 x 5 x 24 = 960 with GQA, the group not a power of two (see _past_powers_of_two), else
#: 8 x 128): every program of a grid of up to 959 takes a second one.  With 4 x 8 x 8 at most (32 in the simplest case), none of 300
#: examples had more than 132 (2026-11-30); with 256 at most, a blind mutant whose programs of
#: a 512-wide grid kept their running sum from one pair to the next lived (2026-12-03).  Groups
#: go to 32 query heads a K/V head (multi-query models have more): a kernel that packed at most
#: 8 query heads of a group and mapped head h to h // min(group, 8) lived with groups of 8 at
#: most (a blind mutant, 2026-12-03).
PROBE_ODDS = 10
#: Lengths set equal to another dim (see _coincident_lengths): the (length, dim) pairs, and one
#: case in COINCIDENCE_ODDS draws one of them (each pair one case in 48).
COINCIDENCES = (("q", "batch"), ("q", "heads"), ("k", "batch"), ("k", "heads"), ("k", "head_dim"), ("q", "head_dim"))
COINCIDENCE_ODDS = 8
#: V recipes a case whose mask could be misread (Nq = B with a 2-d mask, B = Hq with a 3-d one,
#: a mask per query head with groups of query heads) keeps; any other becomes normal(1).
MISREAD_MASK_V_KINDS = ("normal", "uniform", "seq-drift", "slab-levels")
#: One case in ZERO_RUN_ODDS has a stretch of exactly zero positions in Q, K or V (a
#: ``zero-run`` recipe, from ZERO_RUN_STARTS of the positions, ZERO_RUN_SHARES of them): data that
#: looks like padding and is visible.  A kernel that skips an all-zero key block or query row
#: drops weight the softmax gives it (a blind mutant skipping zero V blocks lived through 100
#: examples of every dtype, 2026-12-05).
ZERO_RUN_ODDS = 8
ZERO_RUN_STARTS = (0.5, 0.0, 0.25)
ZERO_RUN_SHARES = (0.5, 0.25, 1.0)
#: One masked case in KEEP_ALL_ODDS has a mask that hides nothing (a random mask of density 0).
KEEP_ALL_ODDS = 8
#: One masked case in DEAD_ROWS_ODDS (and every mask of the many-heads probe's pairs and of the
#: masked-lead and masked-tail probes) also has one query row with no visible key laid over its
#: kind (MaskSpec.dead_rows; shifted one row per mask group, so each pair's dead row differs):
#: the last first, where a ragged last query tile ends, then the first and the middle.  Drawn
#: from the kinds alone, a dead row came in about one case in six, and a budgeted search whose
#: few seconds went mostly to the probe round, whose cases held none, missed it: two mutants (a
#: dead row left unwritten, an empty row's LSE 0) lived through 13 examples a dtype at 2 of 3
#: seeds of the main job's 4 s a dtype (2026-12-06).
DEAD_ROWS_ODDS = 4
#: One causal or sliding-window mask in SELF_ATTENTION_ODDS (in a case with no probe, drawn or
#: forced, and not one drawn to differ per head) has self-attention's pattern: square (Nq = Nk), top-left (offset 0) and
#: the same for every head.  That is the pattern a dispatcher knows, and one that tells it by
#: a few entries (the first row, the diagonal) runs a sliding window, or a causal mask with a
#: hole, as the causal flag.  Such a blind mutant lived through seeds 1 and 2 of the main job's
#: 4 s a dtype (2026-12-06): drawn as any case, masks whose every head's first row and
#: diagonal read as causal and that are not came in 13 of 2,000 (max_seq 40).  Until 2026-12-06
#: (forty-first session) only cases whose probe draw was 0 took it, one in ten rather than the
#: seven in ten that draw no probe (PROBE_ODDS): one diagonal mask in 20, and a change of the K
#: recipes' kinds left 0 such masks in the test's 1,200 draws.  Now one in four of seven in ten.
SELF_ATTENTION_ODDS = 4
#: One masked case in FLIP_ODDS whose mask has a pattern (causal, sliding-window, leading-block,
#: key-padding, or one that hides nothing) and at least 3 x 3 entries has one entry inverted
#: inside it (MaskSpec.flips): off the first and last rows and columns and off the kind's
#: diagonal, the entries a cheap test of the mask's shape reads.  In cases with no probe (seven
#: in ten); until 2026-12-06 those whose probe draw was 0, one in ten, with odds of 3.
FLIP_ODDS = 8
FLIP_KINDS = ("causal", "sliding-window", "leading-block", "key-padding", "random")
#: A mask broadcast over the queries or the keys is drawn on square lengths in all but one
#: case in SQUARE_BROADCAST_ODDS where no probe was drawn (see _attention_cases).
SQUARE_BROADCAST_ODDS = 4
#: The mask kinds with a diagonal (self-attention's pattern; a flip keeps off the diagonal).
DIAGONAL_KINDS = ("causal", "sliding-window")
DEAD_ROW_PLACES = ("last", "first", "middle")
#: Mask shapes that hold a mask for each query head.
PER_HEAD_MASK_SHAPES = ("1hqk", "bhqk", "hqk")
#: The share of keys masked at random in the many-heads probe's masks of their own for each pair.
PAIR_MASK_DENSITY = 0.5
#: One case in GROUPED_ODDS (where GQA and at least 4 query heads are allowed) has groups of 2
#: or more over 2 or more K/V heads (see _head_counts).
GROUPED_ODDS = 3
#: The absorption probe (one example in ``PROBE_ODDS`` more, with at least this many keys
#: where the size profile allows them): Q = 1 and K = 0 but for one key of each of
#: ``ABSORPTION_KV_HEADS`` heads, the first and the last in turn (a kernel may walk its key
#: blocks either way; the longest keys are odd, so the last one sits in a ragged block), which
#: outscores every other key by the same margin, so each other key weighs ``w = u * f / B``
#: of it (u the input format's unit roundoff, f in ``ABSORPTION_FRACTIONS``, B a power of
#: two in ``ABSORPTION_BLOCKS``).  A block of B keys
#: then adds just under half an ulp (of the input format) to the running sum: a kernel that
#: keeps the running sum or the accumulator in the input format between key blocks drops
#: every such block, and the dropped weight grows with the number of blocks.  The sum
#: computed in float32 sees it all.  The probe has no mask, causal flag or special value
#: (each would hide the spike from some queries), and its V is ``ends-opposed``: the spike's
#: value is opposite in sign to every other key's, so the weight dropped from the running
#: sum and from the accumulator push the output the same way (about twice the error of
#: either alone).  Its simplest case (the probe forced, see ``probe_round`` in
#: ``verify.search``) is its strongest: the longest keys, the widest B (every kernel block
#: of up to B keys is dropped), f = 0.9.
ABSORPTION_MIN_KEYS = 17
ABSORPTION_KV_HEADS = 4
ABSORPTION_BLOCKS = (8, 16, 32, 64, 128, 256)
ABSORPTION_FRACTIONS = (0.9, 0.7)  # the first, the probe's simplest, drops the most
ABSORPTION_MIN_V_VALUE = 2.0**-4
#: The far-tail probe (forced with ``probe="far-tail"``, and one absorption case in two drawn at
#: random): the absorption probe's geometry (Q = 1, every key visible, K = 0 but for the spike
#: at the first or the last key of each head) with the spike G nats above every other key and
#: the spike's value 0, every other key's V the same ``value``.  The output is then the far
#: tail's alone, (Nk - 1) e^-G value / (1 + (Nk - 1) e^-G): a kernel that drops weights or
#: blocks far below the running maximum ("negligible" past a threshold, a rescale factor
#: flushed to 0) gives 0 instead, an error of the whole output, whatever the tolerance.  G is
#: the largest of FAR_TAIL_GAPS whose tail weight e^-G stays FAR_TAIL_NORMAL_MARGIN nats inside
#: the normal range of the format P may be kept in (the input format for 16-bit inputs, which
#: the policy lets a kernel round P to before its P V product; the compute format otherwise:
#: subnormal results may flush to zero on GPUs), and whose output is at least
#: FAR_TAIL_MIN_OUTPUT of the format's smallest normal.  float16 reaches 8 nats only (its
#: smallest normal is e^-9.7: a correct kernel with P in float16 loses a farther tail), bfloat16
#: and float32 80, float64 700.
FAR_TAIL_GAPS = (700.0, 300.0, 80.0, 44.0, 24.0, 16.0, 8.0)
FAR_TAIL_NORMAL_MARGIN = 1.0
FAR_TAIL_MIN_OUTPUT = 64.0
#: The rare probes of ``attention_cases``, by name: ``probe=`` draws only that one (and
#: ``attention_probes`` says which the arguments allow).  ``zero-scale``: scale = 0 (drawn
#: one time in ``ZERO_SCALE_ODDS`` otherwise); ``index-width``: Nk at the edge of 16-bit key
#: offsets; ``mid-keys``: thousands of keys; ``mid-queries``: a thousand queries or more;
#: ``many-heads``: many (batch, head) pairs; ``absorption``: see ``ABSORPTION_MIN_KEYS``;
#: ``grid-heads`` and ``many-tiles`` (forced only): see GRID_HEADS_MAX_SEQ and TILES_RUNGS;
#: ``causal-offset`` (forced only): causal with Nq and Nk apart, see CAUSAL_OFFSET_SIDES;
#: ``masked-lead`` and ``masked-tail`` (forced only): see MASKED_LEAD_VISIBLE_SHARE; ``far-tail``
#: (forced, and one drawn absorption case in two): see FAR_TAIL_GAPS; ``score-floor`` (forced
#: only): see SCORE_HEADROOM; ``negative-scale`` (forced only): see NEGATIVE_SCALE; ``near-ties``
#: (forced only): see NEAR_TIES_KEYS; ``broadcast-mask`` (forced only): see BROADCAST_MASK_SEQ;
#: ``single-key`` (forced only): see SINGLE_KEY_QUERIES; ``wide-head`` (forced only): see
#: WIDE_HEAD_PROBE_KEYS; ``coincident-mask`` (forced only): see COINCIDENT_MASK_KEYS;
#: ``empty-batch`` (forced only): see EMPTY_BATCH; ``block-ends`` (forced only): see BLOCK_ENDS_MAX_KEYS;
#: ``coincident-heads`` and ``coincident-heads-3d`` (forced only): see COINCIDENT_HEADS;
#: ``underflow-v`` (forced only): see UNDERFLOW_V_SIGNS; ``nan-underflow`` (forced only): see
#: NAN_UNDERFLOW_GAP.
ATTENTION_PROBES = ("empty-batch", "zero-scale", "single-key", "negative-scale", "near-ties", "underflow-v",
                    "nan-underflow", "broadcast-mask", "coincident-mask", "coincident-heads", "coincident-heads-3d", "aligned-specials",
                    "causal-offset", "wide-head", "wider-head", "score-floor", "absorption", "far-tail", "many-heads",
                    "mid-keys", "block-ends", "mid-queries", "masked-lead", "masked-tail", "index-width", "grid-heads",
                    "many-tiles", "wide-offsets")  # cheapest first
#: The probes whose cases draw their tensors' layouts plainly (contiguous first); every other
#: probe's simplest case takes the layouts ``layouts.probe_layout_order`` turns to by the probe's
#: place in ATTENTION_PROBES (Q), one further (K) and two (V).  Kept plain: aligned-specials
#: (for the aligned path, which a strided or offset view leaves) and the probes sized by the
#: target's speed or memory, or laid out by the engine.
PLAIN_LAYOUT_PROBES = ("aligned-specials", "many-heads", "mid-keys", "mid-queries", "index-width", "grid-heads",
                       "many-tiles", "wide-offsets")
#: The empty-batch probe (forced only, where caps.empty_inputs): a case drawn as any other, then
#: given batch EMPTY_BATCH and no special entries (there is nowhere to put them); the heads,
#: lengths, head dim, mask, causal flag and layouts stay as drawn.  The output is empty, (0, Hq,
#: Nq, D), and so is the LSE.  A batch gathered at run time can be empty: a launcher that sizes
#: its grid by the batch (a grid of 0 programs is an error on a GPU), divides by it, or reads
#: q[0] to learn a stride fails there, and drawn at random B is never 0 (a blind mutant that
#: raised on B = 0 lived through every seed; eleventh red team, 2026-12-06).
EMPTY_BATCH = 0
#: The block-ends probe (forced only, where 17 keys or more are allowed): Nk a length up to
#: BLOCK_ENDS_MAX_KEYS (within max_seq and the mid-keys probe's limit) that fills the last tile of
#: many tile widths, one of ``lengths.full_tiles_lengths`` by the dtype (``full_tiles_for``:
#: float16 3840, tiles of 16 to 128, 48, 80, 96, 160, 192 and 240; bfloat16 4032, tiles of 112,
#: 144 and 224 too; float32 2288, 176 and 208), up to
#: BLOCK_ENDS_QUERIES queries, one batch entry, Q = 1, K normal (spread BLOCK_ENDS_K_SPREAD)
#: with every key at a block's edge (``values.block_end_keys``: 15, 16, 31, 32, ..., 2047, 2048,
#: each full last tile's first key and the one before it, and the last key: 37 of 3840) lifted so
#: that its score exceeds the rest by ln(Nk) + 1 (together about nine tenths of the weight), V
#: distinct at every position, the default scale, no mask, causal flag or special value.  A key
#: lost or read twice at such an edge then moves the output by about a fortieth of V's spread,
#: whatever the kernel's block width.  Drawn at random, a key past the first thousand carries
#: weight only where a probe puts its spike (the first or the last key), and one key in a
#: thousand moves an output by 1e-5 to 2e-3 relative: a blind mutant that skipped every 1024th
#: key lived through two seeds of three at 4 s a dtype (twelfth red team, 2026-12-06).  Until
#: 2026-12-08 Nk was 2049, a ragged tail for every tiling, and a blind mutant that dropped the
#: last key where Nk is a multiple of 80 lived through 3 cells of 9 (fourteenth red team).
BLOCK_ENDS_MAX_KEYS = 4097
BLOCK_ENDS_MIN_KEYS = 17
BLOCK_ENDS_QUERIES = 4
BLOCK_ENDS_K_SPREAD = 0.5
#: The negative-scale probe (forced only): scale NEGATIVE_SCALE, Q and K normal with scores as
#: wide as NEGATIVE_SCALE_PEAK allows within the tolerance's judgement (_tamed_scale's limit),
#: at least NEGATIVE_SCALE_KEYS keys (within max_seq).  A negative scale is a valid one (SDPA
#: takes any float), and drawn at random it came in about one case in ten, mostly with a
#: constant Q or K (a sign that cannot show) or scores too wide to judge: a kernel that took
#: |scale|, or the default for a scale <= 0, lived through 64-136 examples at two seeds of
#: three at the main job's 4 s a dtype (red team, 2026-12-06).  The Triton tutorial's forward
#: takes the row maximum of the raw scores times the scale, the minimum of the scaled scores
#: when the scale is negative: exp(s - m) overflows once the scaled scores spread past ~88.
NEGATIVE_SCALE = -0.7
NEGATIVE_SCALE_PEAK = 1600.0
NEGATIVE_SCALE_KEYS = 131
#: The near-ties probe (forced only): K of kind ``key-ties`` (three copies of one key, each
#: scaled by 1 + jitter * U(-1, 1), the jitter one of NEAR_TIES_JITTERS), Q and V normal, the
#: default scale, no causal flag (top-left, few queries would hide the copies), masks as drawn;
#: at least NEAR_TIES_KEYS keys (within max_seq: several key blocks and a ragged one) and
#: NEAR_TIES_MIN_QUERIES to NEAR_TIES_MAX_QUERIES queries (few: a decode step's split-KV path;
#: several: the copies are the maximum of about a quarter of the query rows).  For the queries that
#: point the copied key's way, blocks holding a copy have maxima a hair apart: a merge that takes
#: them for equal, or a rescale skipped for a small step, is wrong by about the gap.  Drawn at
#: random (key-ties K among ten kinds, Nk >= 64 with Nq <= 16) such cases came in 16 of 1,000,
#: and a blind split-KV mutant that merged maxima within 2**-7 uncorrected lived through 4 s and
#: 20 s a dtype (ninth red team, 2026-12-06).  The first jitter is the one a 16-bit K keeps
#: (2**-11 of a key is about an ulp of float16).
NEAR_TIES_KEYS = 131
NEAR_TIES_MIN_QUERIES = 8
NEAR_TIES_MAX_QUERIES = 16
NEAR_TIES_JITTERS = (2.0**-11, 2.0**-8, 2.0**-14)
#: The underflow-v probe (forced only): a case drawn as any other (shapes, mask, causal flag,
#: scale, Q and K), no special value, and V of kind ``near-underflow`` up to the input format's
#: smallest normal (log-uniform from twice its smallest subnormal: nine entries in ten subnormal), its
#: signs by ``values.UNDERFLOW_SIGNS`` (the simplest case's first: all positive, so that the
#: output is about as small and a flush loses all of it).  A kernel that reads V's subnormals as
#: 0 (an FTZ/DAZ compile flag, a conversion that drops them, a tensor-core path that flushes
#: them: cuDNN's bfloat16 does, tests/test_findings.py) then answers 0 where a correct kernel's
#: gradual underflow costs at most half a float32 subnormal a product
#: (``verify.tolerance.underflow_bound``).  Drawn at random, V near underflow came in 26 of 600
#: float16 cases, and a mutant that flushed V's subnormals lived through a main job's 76
#: examples in 3 dtypes (seed 20261256, 2026-12-08), though any one such case caught it in
#: every dtype, at 4 to 40000 times the tolerance.
UNDERFLOW_V_SIGNS = ("positive", "mixed", "negative")
#: ... with at least this many keys and queries (within max_seq): several key and query blocks
#: and a ragged one, so that a flush on the blocked (tensor-core) path shows as well as one in a
#: one-key shortcut.
UNDERFLOW_V_KEYS = 67
UNDERFLOW_V_QUERIES = 17
#: The nan-underflow probe (forced only, where the target takes NaN): at least NAN_UNDERFLOW_KEYS
#: keys (within max_seq), Q = 1, K = 0 but for the first key of each head, whose score is
#: NAN_UNDERFLOW_GAP nats above every other (their weights e^-300 underflow to exactly 0 in
#: every compute format but float64), V normal with a NaN at the last key of the first K/V head,
#: the default scale, no mask or causal flag.  The key is visible and its weight, however small,
#: is not 0: the output's column 0 in every query head that reads that K/V head is NaN (and a
#: kernel computing P V in IEEE arithmetic gets 0 x NaN = NaN).  A kernel that skips a block
#: whose weights all underflowed (a "P is all zero" shortcut, a block-sparse skip of blocks far
#: below the running maximum) loses it.  Drawn at random, a NaN sits where weights underflow
#: almost never, and such a blind mutant lived through 9 cells of 9 (fifteenth red team,
#: 2026-12-08).
NAN_UNDERFLOW_GAP = 300.0
NAN_UNDERFLOW_KEYS = 131
#: The broadcast-mask probe (forced only, where the target takes a boolean mask): a random mask
#: (density 1/2) broadcast over the keys, (..., Nq, 1), where the target takes one, else over the
#: queries, (..., 1, Nk), on square lengths of at least BROADCAST_MASK_SEQ (within max_seq), no
#: causal flag.  There a kernel that tells a mask's singleton axis by the sizes takes the right
#: shape along the wrong axis.  Drawn at random such masks are few (a handful in 1,200 cases; see
#: SQUARE_BROADCAST_ODDS), and a blind mutant that read an (N, 1) mask as (1, N) when Nq = Nk
#: lived through seeds 1-3 of 4 s a dtype (ninth red team, 2026-12-06).  At least
#: BROADCAST_MASK_SEQ, and since 2026-12-07 past two 64-key tiles and one past 128
#: (BROADCAST_MASK_TILED_SEQ, within max_seq): a blind mutant that applied an (..., Nq, 1) mask to its
#: first 64-key tile alone lived in 8 of 9 cells where the probe drew 9 to 64 keys (fourteenth
#: red team).
BROADCAST_MASK_SEQ = 9
BROADCAST_MASK_TILED_SEQ = 129
#: The single-key probe (forced only, where the target takes NaN): one key (Nk = 1), up to
#: SINGLE_KEY_QUERIES queries, two K/V heads where allowed, Q, K and V normal, the default scale, no
#: mask or causal flag; a NaN in the second query row of the first head and one in the second
#: head's key.  With one key the softmax is 1 whatever the score, so a kernel (or a dispatcher)
#: that returns V there without computing Q K^T loses the NaN the score should carry into the
#: output.  Drawn at random, Nk = 1 with a NaN in Q or K came too seldom: such a blind mutant lived
#: through seed 1 of 4 s a dtype (ninth red team, 2026-12-06).  A fast path for a degenerate size is
#: where a kernel skips the arithmetic its special values need.
SINGLE_KEY_QUERIES = 4
#: The aligned-specials probe (forced only, where the target takes NaN): Nq = Nk = a power of two,
#: the longest max_seq allows of ALIGNED_SPECIAL_MIN_KEYS or more (largest_first: the longest
#: first), one batch entry, up to three K/V heads, no GQA, mask or causal flag, the default
#: scale, Q, K and V normal; a NaN in the first head's Q at a drawn row and one in the second
#: head's K half the keys further on (the third head finite).  A kernel's path for key counts
#: that fill its blocks exactly (no tail mask) is often another than the ragged one, and NaN is
#: where such paths differ: a NaN-ignoring maximum with exponentials cut below a threshold by a
#: comparison turns NaN into 0 there.  Drawn at random, a NaN in Q or K with Nk a power of two of
#: 64 or more came too seldom: such a blind mutant lived through float16 and float32 at every
#: seed of 4 s a dtype (thirteenth red team, 2026-12-07).  The softmax twin is the softmax
#: probe of the same name.
ALIGNED_SPECIAL_MIN_KEYS = 16
ALIGNED_SPECIAL_HEADS = 3
#: The single-key probe's V lies in [SINGLE_KEY_V / 2, 3 SINGLE_KEY_V / 2] where the format and
#: v_limit allow it: past float16's largest value (65504), with the output V itself, exactly.  A
#: kernel whose epilogue or accumulator keeps float16's range for every dtype saturates there: a
#: blind mutant that clamped every output to +-65504 lived through seed 2 of 4 s a dtype, whose
#: bfloat16 and float32 cells drew no output past it (tenth red team, 2026-12-06).
SINGLE_KEY_V = 2.0**17
#: The wide-head probe (forced only, where a head dim in (128, 256] is allowed): the largest such
#: dim that is not a power of two (192, else 160, else 256), causal where allowed (Nq one past the
#: power of two at or below half of Nk, or Nq = Nk where the target takes causal only square),
#: a random mask too where the target takes both, the scale WIDE_HEAD_SCALE_FACTOR / sqrt(D), Q, K
#: and V normal, up to WIDE_HEAD_PROBE_KEYS keys (few: an interpreted Triton kernel pays for D).
#: Kernels take another path past a head dim of 128 (two output tiles of D, or one wider tile
#: with fewer stages), and a path of its own can
#: lose what the main one does: the causal flag on the second output tile, the strictness of the
#: diagonal, the caller's scale.  Drawn at random, D > 128 with the causal flag came 0-1 times a
#: cell of 4 s a dtype, and three such blind mutants each lived through one to two seeds of three
#: (tenth red team, 2026-12-06).
WIDE_HEAD_PROBE_KEYS = 48
#: The wider-head probe (forced only, where a head dim past 256 is allowed): the wide-head probe
#: at the largest such dim that is not a power of two (257 of INTERESTING_HEAD_DIMS), else the
#: smallest (512), with the keys of a case past WIDE_HEAD_DIM (WIDE_HEAD_MAX_SEQ).  A kernel past
#: 256 tiles D again (a second launch or tile for the columns past 256), and that path too can
#: drop the causal flag, the mask or the scale: a blind mutant whose columns past 256 dropped
#: the causal flag lived through one or two seeds of three a dtype (thirteenth red team,
#: 2026-12-07), D > 256 with the causal flag being rare among drawn cases.
WIDER_HEAD_MIN_DIM = WIDE_HEAD_DIM + 1
#: The coincident-mask probe (forced only, where the target takes a boolean mask and two batch
#: entries): a 2-d random mask (density 1/2, its rows differ) on as many queries as batch entries
#: (B = Nq = min(max_batch, 3)), at least COINCIDENT_MASK_KEYS keys, no causal flag.  A 2-d mask
#: (Nq, Nk) applies to every batch entry; a kernel (or a wrapper) that takes a 2-d mask whose first
#: dim equals the batch for a (B, Nk) padding mask reads it that way only here.  Drawn at random,
#: Nq = B >= 2 with a 2-d mask came once in 9 cells of 4 s a dtype, causal that time (which hid the
#: misread), and such a blind mutant lived through seeds 1-3 (eleventh red team, 2026-12-06).
COINCIDENT_MASK_KEYS = 16
#: The coincident-heads probe (forced only, where the target takes a boolean mask, two batch
#: entries and two heads): B = Hq = Hkv = COINCIDENT_HEADS (within max_batch and max_heads), a 4-d
#: random mask (density 1/2), one for every (batch, head), at least COINCIDENT_MASK_KEYS keys, no
#: causal flag.  With B = Hq a kernel that swaps the mask's batch and head indices stays in
#: bounds and reads slab (h, b) for (b, h); with B != Hq it would read past the mask.  Drawn at
#: random (B = Hq about one case in COINCIDENCE_ODDS, then a 4-d mask by head one time in four
#: since 2026-12-06), B = Hq = 2 with a 4-d mask came in 7 of 1,254 calls, and such a blind
#: mutant lived through two seeds of three at 4 s a dtype (twelfth red team, 2026-12-06).  The
#: coincident-heads-3d probe is the same with a 3-d mask, (Hq, Nq, Nk): with B = Hq a kernel that
#: takes a 3-d mask's leading dim for the batch stays in bounds too.  Such a blind mutant lived in
#: 6 of 9 cells (fourteenth red team, 2026-12-07), then, with one coincident-heads case in two
#: 3-d, 4 of 9: the probe round tries a probe's simplest case alone, which was the 4-d one.
COINCIDENT_HEADS = 3
COINCIDENT_HEADS_MASKS = {"coincident-heads": "bhqk", "coincident-heads-3d": "hqk"}
WIDE_HEAD_SCALE_FACTOR = 0.75
#: The score-floor probe (forced only, within the size profile): every score of a row equal and
#: about as low as the contract lets a finite score go (qk_limit: 1 / SCORE_HEADROOM of the
#: compute format's largest value, -5.3e36 in float32, -D 65504**2 with float16 inputs, times
#: SCORE_FLOOR_SCALE): Q constant a, K constant -a, so the visible keys weigh the same and the exact output is the
#: mean of their V, which lies in [v / 2, 3 v / 2] (0 outside the hull).  Masks and the causal
#: flag as drawn, no special value.  A kernel whose running maximum starts at a finite stand-in
#: for -inf (-1e30, -1e20, -65504) above the scores, or that takes scores below such a value for
#: masked ones, computes exp(s - m) = 0 for every key: 0 or 0/0 = NaN, not the mean.  Drawn at
#: random such rows come only from an untamed scale (one case in WILD_ODDS) with large Q and K;
#: a blind mutant whose maximum started at -1e30 lived in bfloat16 and float32 (fifth red team,
#: 2026-12-05).
SCORE_HEADROOM = 64.0
#: The score-floor probe's scale: not a power of two, so that its product with a score rounds.
#: A kernel that takes the maximum of the raw scores and applies the scale and the shift in one
#: fused multiply-add (pytorch #121558; our Triton kernel's compiler did, 2026-11-29) leaves
#: the largest score that rounding error, ~1e29 here, in exp's argument: inf or 0, then NaN.
SCORE_FLOOR_SCALE = 0.7
#: The masked-lead and masked-tail probes (forced only, where the target takes a boolean mask;
#: masked-tail also where it takes a top-left causal flag with Nq != Nk): the longest keys
#: (up to MASKED_KEYS_MAX, past the size profile, with few queries: see MASKED_KEYS_MAX), no
#: causal flag, and every key masked but the last quarter (masked-lead: a
#: leading-block mask, ``stagger`` 1, so each mask group starts one key later) or the first
#: quarter (masked-tail: key padding at the end, or one time in two the causal flag instead
#: of the mask, with at most a quarter as many queries as keys), one key at least.  Every query row then
#: opens, for a kernel walking its key blocks forward (lead) or backward as FlashAttention-2
#: does under causal (tail), with whole blocks of nothing but masked keys, whatever the block
#: width up to three quarters of Nk: a running maximum still -inf when the first live block
#: arrives makes exp(-inf - -inf) = NaN unless the kernel guards it (flashinfer #4451), and a
#: kernel that skips masked blocks, or takes the mask for a valid length, must still find the
#: live keys.  Drawn at random such masks come about one case in ten, often on lengths too
#: short to hold a whole masked block.
MASKED_LEAD_VISIBLE_SHARE = 4
#: The masked probes' longest keys (within caps.max_length and the size profile's probe cap),
#: past the size profile's max_seq with at most MID_KEYS_MAX_QUERIES queries, one batch entry,
#: two K/V heads and D <= MID_KEYS_MAX_HEAD_DIM.  Long keys with few queries is where kernels
#: take their split-KV ("flash decoding") path, whose splits are merged by their log-sum-exp: a
#: split of nothing but masked keys has l = 0 and LSE -inf, and a merge that does not guard it
#: gives NaN, while a path that drops the mask or the causal flag shows only there.  With a
#: quarter live, every split of up to three quarters of the keys (12288 here) is wholly masked.
#: Masks and causal stopped at 4097 keys before (the mid-keys probe), and a blind mutant whose
#: split-KV path for 8192 keys and more ignored both lived (fifth red team, 2026-12-05).  One
#: past a power of two: the last block ragged.
MASKED_KEYS_MAX = 16385
#: A masked probe's plain V (kind normal) rises along the keys by this many of its spreads.
MASKED_V_RISE = 4.0
#: The wide-offsets probe (``probe="wide-offsets"`` only, with ``wide_offsets=True``): one batch
#: entry of ``lengths.WRAP_REVEALING_COUNTS`` heads (Hq = Hkv), Nq = Nk from WIDE_MIN_SEQ to WIDE_MAX_SEQ (and
#: more where the target's pair limit asks for longer heads), D up to WIDE_HEAD_DIM, repeated
#: along the heads until Q, K, V and the output each pass ``lengths.WIDE_OFFSET_ELEMENTS``.
WIDE_MIN_SEQ = 16
WIDE_MAX_SEQ = 256
#: The probe keeps a drawn mask (with the causal flag) only where at least this share of the
#: query rows sees two keys or more (see _rows_weighing_keys); else it drops the mask.
WIDE_MIN_WEIGHING_ROWS = 0.5


def _rows_weighing_keys(mask: MaskSpec, causal: bool, seq_q: int, seq_k: int) -> float:
    """The share of ``seq_q`` query rows that ``mask`` (as its first group draws it, a random
    mask from one fixed draw) and a top-left causal flag leave two keys or more to weigh: only
    such rows' outputs depend on the query read."""
    keep = mask.keep(seq_q, seq_k, np.random.default_rng(0))
    if causal:
        keep = keep & (np.arange(seq_k)[None, :] <= np.arange(seq_q)[:, None])
    return float((keep.sum(axis=1) >= 2).mean()) if seq_q else 0.0


#: The value of the probe draw that takes each of the probes drawn by it (the two long-sequence
#: probes share one: a second draw picks the side).
_PROBE_DRAWS = {"mid-keys": PROBE_ODDS - 1, "mid-queries": PROBE_ODDS - 1, "many-heads": PROBE_ODDS - 2,
                "absorption": PROBE_ODDS - 3, "far-tail": PROBE_ODDS - 3}
#: The causal-offset probe (forced only, within the size profile): causal with the longest keys
#: against about half as many queries (the simplest case) or the reverse.  Top-left and
#: bottom-right alignment differ on every query then, and so do a diagonal that ignores Nq or
#: Nk, whatever the tiles; drawn at random, causal cases with Nq != Nk come a few in ten, after
#: Hypothesis's first simple (often square) examples, and an interpreted kernel's budget of a few
#: seconds a dtype held about a dozen examples (the main job, 2026-12-01, where a bottom-right
#: mutant survived 34 of them).  The shorter side is one past a power of two (65 for a longest of
#: 160): the last tile of every power-of-two tiling up to it holds one query (or key), where a
#: kernel that folds a one-row last tile into the tile before (its output row a copy of the row
#: above) is wrong; causal, every query's output differs from its neighbour's.  With 81 (half of
#: 160, plus one) such a blind mutant lived through seeds 1-3 of 4 s a dtype (2026-12-06): its
#: search's random part met 64k + 1 queries with distinct rows in none of them.
CAUSAL_OFFSET_SIDES = ("keys", "queries")
MID_KEYS_MAX = 4097
#: The mid-queries probe: Nq past max_seq up to MID_QUERIES_MAX against at most
#: MID_QUERIES_MAX_KEYS keys.  A kernel's grid runs over query tiles, and bugs in the later
#: ones (the last tile skipped when Nq is an exact multiple of it, a tile index that
#: overflows or wraps, per-tile state reused) need more query tiles than max_seq gives: 160
#: queries are two tiles of 128 at most.  2049 queries are 17 tiles of 128.  Top-left causal
#: there shows every key to the queries past Nk.
MID_QUERIES_MAX = 2049
MID_QUERIES_MAX_KEYS = 32
#: A decode step (see ``_sequence_lengths``): at most this many queries (one, or a few as
#: speculative decoding verifies), and up to this many times ``max_seq`` keys.
DECODE_MAX_QUERIES = 4
DECODE_KEYS_FACTOR = 8
DECODE_CAUSAL_ODDS = 3
MID_KEYS_MAX_QUERIES = 16
MID_KEYS_MAX_HEAD_DIM = 64
MANY_HEADS_MAX_BATCH = 8
MANY_HEADS_MAX_KV_HEADS = 128
MANY_HEADS_MAX_GROUP = 32
MANY_HEADS_MAX_PAIRS = 1024
#: attention_cases' default: a direct user's cases stay as cheap as before (a pair is a program
#: of the Triton interpreter, ~18 ms); the search sizes the probe by speed up to the cap.
MANY_HEADS_PAIRS = 256
MANY_HEADS_MAX_SEQ = 16
#: The grid-heads probe (``probe="grid-heads"`` only, never drawn at random): more (batch, head)
#: pairs than a CUDA grid axis holds (``lengths.GRID_COUNTS``), all on the batch, all on the
#: heads, or split between them, each of sequences up to GRID_HEADS_MAX_SEQ and head dims up to
#: GRID_HEADS_MAX_HEAD_DIM.  Its masks are shared by every pair (GRID_HEADS_MASK_SHAPES): a mask
#: drawn per pair would take one random stream each.
GRID_HEADS_MAX_SEQ = 4
GRID_HEADS_MAX_HEAD_DIM = 16
GRID_HEADS_AXES = ("batch", "heads", "both")
GRID_HEADS_MASK_SHAPES = {"b1qk": "11qk", "1hqk": "11qk", "bhqk": "11qk", "hqk": "1qk", "b11k": "11qk",
                          "bh1k": "11qk", "b1q1": "q1", "bhq1": "q1"}
#: The mask shapes a wide-offsets case takes: those shared by every head (and batch entry).
WIDE_MASK_SHAPES = ("qk", "11qk", "1qk", "q1")
#: The many-tiles probe (``probe="many-tiles"`` only, never drawn at random): Nq and Nk both in
#: the hundreds to thousands over many (batch, head) pairs, causal first.  Every other probe
#: keeps one side short (mid-keys: 16 queries; mid-queries: 32 keys; many-heads: 16 of each),
#: so none runs many query tiles against many key blocks: where a causal kernel skips or clips
#: the blocks past the diagonal tile by tile, where a persistent grid gives a program its second
#: (pair, query tile) item only past the SM count, and where a position computed in float32
#: stops being exact (Nq x Nk past 2**23, a flat score index; 2**24 at 4096 x 4096).  Those are
#: the shapes models run.  The rungs (length, pairs) are tried in order, each only where the case
#: before it says at its speed that the rung fits (``verify.search``): on the H200 every rung,
#: a plain PyTorch callable on the CPU the first one or two, a kernel under the Triton
#: interpreter none.  Every rung has more (pair, query tile) items than current data-centre GPUs
#: have SMs (108 to 148) in tiles of 64 queries, from the second rung more than two a SM, and in
#: tiles of 128 more than the H200's 132; no rung's count of 64-query tiles divides 132, so the
#: items a program of a persistent grid of 132 takes are not all the same tile of their pairs.
#: The lengths fill their last tile (640, 1024, 4096) or leave it ragged; each rung is about four
#: times the work of the one before at most.  The first rung's length is the least the probe draws:
#: 258, two past a multiple of every power-of-two tile, so that the last query tile, of two rows,
#: sits against a last key block of two keys on the diagonal (until 2026-12-08, 260: a blind
#: kernel whose "block wholly visible" test was off by one there, showing at Nk = 64k + 2, lived
#: in 7 cells of 9, fifteenth red team).
TILES_RUNGS = ((258, 48), (640, 32), (1024, 24), (2113, 12), (3000, 8), (4096, 8))
TILES_MIN_SEQ = TILES_RUNGS[0][0]
TILES_MAX_HEAD_DIM = 64
#: The tile the many-tiles feature counts in, and the SMs it counts past (the H200's).
TILES_FEATURE_TILE = 64
TILES_FEATURE_SMS = 132


def tiles_pairs(length: int) -> int:
    """The (batch, head) pairs of a many-tiles case of up to ``length`` queries and keys: those
    of the longest rung of at most ``length`` (TILES_RUNGS)."""
    fitting = [rung for rung in TILES_RUNGS if rung[0] <= length]
    return fitting[-1][1] if fitting else TILES_RUNGS[0][1]


#: The work of one grid-heads pair at its largest, in the units of verify.search's estimate
#: (score entries plus Q, K and V entries).
GRID_HEADS_PAIR_WORK = GRID_HEADS_MAX_SEQ * GRID_HEADS_MAX_SEQ + 3 * GRID_HEADS_MAX_SEQ * GRID_HEADS_MAX_HEAD_DIM


@dataclass(frozen=True, eq=False)
class AttentionInputs:
    """Arguments of one attention call: ``softmax(scale * q k^T, masked) v``.

    ``q`` is (B, Hq, Nq, D), ``k`` and ``v`` (B, Hkv, Nk, D) with Hq a multiple of
    Hkv (query head h uses key/value head ``h // (Hq // Hkv)``); any of them may
    be a non-contiguous view.  ``mask`` is bool (True = attend), broadcastable to
    (B, Hq, Nq, Nk), or None.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    scale: float
    causal: bool
    mask: torch.Tensor | None


@dataclass(frozen=True)
class AttentionSpec:
    """Everything needed to rebuild one attention input.  ``scale=None`` means 1/sqrt(head_dim)."""

    dtype: str
    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_k: int
    head_dim: int
    scale: float | None = None
    causal: bool = False
    mask: MaskSpec | None = None
    mask_shape: str = "qk"
    mask_layout: str = "contiguous"
    q: ValueRecipe = ValueRecipe()
    k: ValueRecipe = ValueRecipe()
    v: ValueRecipe = ValueRecipe()
    specials: tuple[SpecialSpec, ...] = ()
    layouts: tuple[str, str, str] = ("contiguous", "contiguous", "contiguous")
    seed: int = 0
    #: Largest |V| (entries are clipped to it): None, as drawn before 2026-12-01 and kept so that
    #: those cases replay bit for bit, is ``dtype_bound_v_limit``; new draws store ``v_limit``.
    v_max: float | None = None
    # The wide-offsets probe: the built Q, K, V are the first of ``tile`` blocks repeated along
    # the heads; the target gets them all (``full_shapes``), the engine checks every one.
    tile: int = 1

    def __post_init__(self) -> None:
        try:
            fmt = get_format(self.dtype)
        except ValueError as err:
            raise spec_error("attention spec", str(err)) from None
        object.__setattr__(self, "dtype", fmt.name)
        object.__setattr__(self, "specials", tuple(self.specials))
        object.__setattr__(self, "layouts", tuple(self.layouts))
        for name in ("batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim", "seed", "tile"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise spec_error("attention spec", f"{name} must be an int", value)
            least = 0 if name in ("seed", "batch") else 1  # batch 0: the empty-batch probe
            if value < least:
                raise spec_error("attention spec", f"{name} must be >= {least}", value)
        if self.v_max is not None:
            if isinstance(self.v_max, bool) or not isinstance(self.v_max, (int, float)) or not 0 < self.v_max < math.inf:
                raise spec_error("attention spec", "v_max must be None or a positive finite number", self.v_max)
            object.__setattr__(self, "v_max", float(self.v_max))
        if self.seed > _rng.SEED_MAX:
            raise spec_error("attention spec", f"seed must lie in [0, {_rng.SEED_MAX}]", self.seed)
        if self.heads_q % self.heads_kv:
            raise spec_error("attention spec", "heads_q must be a multiple of heads_kv", (self.heads_q, self.heads_kv))
        if self.scale is not None:
            if not isinstance(self.scale, (int, float)) or not math.isfinite(self.scale):
                raise spec_error("attention spec", "scale must be None or a finite number", self.scale)
            object.__setattr__(self, "scale", float(self.scale))
        if len(self.layouts) != 3 or any(layout not in ATTENTION_LAYOUTS + ATTENTION_KV_LAYOUTS
                                         for layout in self.layouts):
            raise spec_error("attention spec", f"layouts must be three of {ATTENTION_LAYOUTS + ATTENTION_KV_LAYOUTS}",
                             self.layouts)
        kv_joint = [layout in ATTENTION_KV_LAYOUTS for layout in self.layouts]
        if any(kv_joint) and (kv_joint[0] or self.layouts[1] != self.layouts[2]):
            raise spec_error("attention spec", f"{ATTENTION_KV_LAYOUTS} are K's and V's together, never Q's",
                             self.layouts)
        shapes = (*MASK_SHAPES, *QUERY_BROADCAST_SHAPES, *KEY_BROADCAST_SHAPES)
        if self.mask_shape not in shapes:
            raise spec_error("attention spec", f"mask_shape must be one of {shapes}", self.mask_shape)
        if self.mask is not None and self.mask.kind == "none":
            raise spec_error("attention spec", "write mask=None rather than a mask of kind 'none'")
        if self.mask_layout not in MASK_LAYOUTS:
            raise spec_error("attention spec", f"mask_layout must be one of {MASK_LAYOUTS}", self.mask_layout)
        if self.mask_shape in QUERY_BROADCAST_SHAPES and (self.mask is None or self.mask.kind not in KEY_MASK_KINDS):
            raise spec_error("attention spec", f"mask_shape {self.mask_shape!r} is for masks of kinds {KEY_MASK_KINDS} only")
        if self.mask_shape in KEY_BROADCAST_SHAPES and (self.mask is None or self.mask.kind not in KEY_BROADCAST_KINDS):
            raise spec_error("attention spec",
                             f"mask_shape {self.mask_shape!r} is for masks of kinds {KEY_BROADCAST_KINDS} only")
        if any(s.tensor not in ("q", "k", "v") or len(s.index) != 4 for s in self.specials):
            raise spec_error("attention spec", "special entries need tensor 'q', 'k' or 'v' and a 4-d index")
        if not fmt.has_inf and any(s.kind == "+inf" for s in self.specials):
            raise spec_error("attention spec", f"{fmt.name} has no infinities: no +inf entries")
        if self.tile > 1 and (self.batch != 1 or self.layouts != ("contiguous",) * 3
                              or (self.mask is not None and self.mask_shape not in WIDE_MASK_SHAPES)):
            raise spec_error("attention spec", "a block repeated along the heads (tile > 1) has batch 1, contiguous "
                             f"Q, K and V, and a mask shared by the heads (mask_shape in {WIDE_MASK_SHAPES})")

    @property
    def format(self) -> FloatFormat:
        return get_format(self.dtype)

    @property
    def effective_scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim) if self.scale is None else self.scale

    @property
    def shapes(self) -> dict[str, tuple[int, int, int, int]]:
        b, d = self.batch, self.head_dim
        return {
            "q": (b, self.heads_q, self.seq_q, d),
            "k": (b, self.heads_kv, self.seq_k, d),
            "v": (b, self.heads_kv, self.seq_k, d),
        }

    @property
    def full_shapes(self) -> dict[str, tuple[int, int, int, int]]:
        """The shapes the target gets: ``shapes``, the heads repeated ``tile`` times."""
        return {name: (b, h * self.tile, n, d) for name, (b, h, n, d) in self.shapes.items()}

    @property
    def qk_limit(self) -> float:
        return qk_limit(self.format, self.head_dim, self.effective_scale)

    @property
    def v_limit(self) -> float:
        return dtype_bound_v_limit(self.format, self.seq_k) if self.v_max is None else self.v_max

    # ---- replay -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "op": "attention",
            "dtype": self.dtype,
            "batch": self.batch,
            "heads_q": self.heads_q,
            "heads_kv": self.heads_kv,
            "seq_q": self.seq_q,
            "seq_k": self.seq_k,
            "head_dim": self.head_dim,
            "scale": self.scale,
            "causal": self.causal,
            "mask": None if self.mask is None else self.mask.to_dict(),
            "mask_shape": self.mask_shape,
            "mask_layout": self.mask_layout,
            "q": self.q.to_dict(),
            "k": self.k.to_dict(),
            "v": self.v.to_dict(),
            "specials": [s.to_dict() for s in self.specials],
            "layouts": list(self.layouts),
            "seed": self.seed,
            **({} if self.v_max is None else {"v_max": self.v_max}),
            **({} if self.tile == 1 else {"tile": self.tile}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AttentionSpec":
        d = dict(d)
        op = d.pop("op", "attention")
        if op != "attention":
            raise spec_error("attention spec", "op must be 'attention'", op)
        try:
            mask = d.pop("mask", None)
            return cls(
                dtype=d.pop("dtype"),
                batch=d.pop("batch"),
                heads_q=d.pop("heads_q"),
                heads_kv=d.pop("heads_kv"),
                seq_q=d.pop("seq_q"),
                seq_k=d.pop("seq_k"),
                head_dim=d.pop("head_dim"),
                scale=d.pop("scale", None),
                causal=bool(d.pop("causal", False)),
                mask=None if mask is None else MaskSpec.from_dict(mask),
                mask_shape=d.pop("mask_shape", "qk"),
                mask_layout=d.pop("mask_layout", "contiguous"),
                q=ValueRecipe.from_dict(d.pop("q", {})),
                k=ValueRecipe.from_dict(d.pop("k", {})),
                v=ValueRecipe.from_dict(d.pop("v", {})),
                specials=tuple(SpecialSpec.from_dict(s) for s in d.pop("specials", [])),
                layouts=tuple(d.pop("layouts", ("contiguous",) * 3)),
                seed=d.pop("seed", 0),
                v_max=d.pop("v_max", None),
                tile=d.pop("tile", 1),
                **reject_extra_keys(d),
            )
        except (KeyError, TypeError) as err:
            raise spec_error("attention spec", f"malformed dict ({err})") from None

    # ---- building ---------------------------------------------------------------------
    def keep(self) -> np.ndarray | None:
        """The boolean mask in its broadcast shape (True = attend), or None."""
        if self.mask is None:
            return None
        # Slabs are generated per (batch, head) index of the broadcast shape.
        grid = {
            "qk": (1, 1),
            "11qk": (1, 1),
            "b1qk": (self.batch, 1),
            "1hqk": (1, self.heads_q),
            "bhqk": (self.batch, self.heads_q),
            "b11k": (self.batch, 1),
            "bh1k": (self.batch, self.heads_q),
            "1qk": (1, 1),
            "hqk": (1, self.heads_q),
            "q1": (1, 1),
            "b1q1": (self.batch, 1),
            "bhq1": (self.batch, self.heads_q),
        }[self.mask_shape]
        slabs = np.empty((*grid, self.seq_q, self.seq_k), dtype=bool)
        for b in range(grid[0]):
            for h in range(grid[1]):
                rng = _rng.stream(self.seed, _rng.MASK, b, h)
                # Key padding alternates its pads over the slabs, heads included: a kernel
                # that reads one head's (or one batch entry's) padding for all goes wrong.
                slabs[b, h] = self.mask.keep(self.seq_q, self.seq_k, rng, group=b * grid[1] + h)
        if self.mask_shape == "qk":
            return slabs[0, 0]
        if self.mask_shape in QUERY_BROADCAST_SHAPES:
            return slabs[:, :, :1, :]
        if self.mask_shape == "q1":
            return slabs[0, 0, :, :1]
        if self.mask_shape in KEY_BROADCAST_SHAPES:
            return slabs[:, :, :, :1]
        if self.mask_shape in ("1qk", "hqk"):
            return slabs[0]
        return slabs

    def values(self) -> dict[str, np.ndarray]:
        """Float64 Q, K, V before rounding, specials placed."""
        fmt = self.format
        out = {}
        for name, tag, recipe, limit in (
            ("q", _rng.Q, self.q, self.qk_limit),
            ("k", _rng.K, self.k, self.qk_limit),
            ("v", _rng.V, self.v, self.v_limit),
        ):
            b_n, h_n, n, d = self.shapes[name]
            x = sample_groups(recipe.group_recipes(), b_n * h_n, (n, d), fmt, limit,
                              lambda g, tag=tag, h_n=h_n: _rng.stream(self.seed, tag, *divmod(g, h_n)),
                              lambda block, r, tag=tag: _rng.stream(self.seed, _rng.BULK, tag, block, r))
            out[name] = x.reshape(b_n, h_n, n, d)
        for special in self.specials:
            special.place(out[special.tensor])
        return out

    def build(self, device: str = "cpu") -> AttentionInputs:
        arrays = self.values()
        if self.layouts[1] == "kv-packed":
            q = materialize(to_format(arrays["q"], self.format), self.layouts[0], device)
            k, v = pack_kv(to_format(arrays["k"], self.format), to_format(arrays["v"], self.format), device)
        else:
            q, k, v = (
                materialize(to_format(arrays[name], self.format), layout, device)
                for name, layout in zip("qkv", self.layouts, strict=True)
            )
        keep = self.keep()
        mask = None if keep is None else _lay_out_mask(keep, self.mask_layout, self.shapes["q"][:2], device)
        return AttentionInputs(q=q, k=k, v=v, scale=self.effective_scale, causal=self.causal, mask=mask)


#: Extra rows and columns around a ``sliced`` mask, and how many of them come before it.
_MASK_SLACK = (1, 3)
_MASK_LEAD = (1, 1)


def _lay_out_mask(keep: np.ndarray, layout: str, batch_heads: tuple[int, int], device: str) -> torch.Tensor:
    """The boolean mask ``keep`` (in its broadcast shape) as a tensor in ``layout`` (MASK_LAYOUTS)."""
    if layout == "transposed":
        return torch.from_numpy(np.ascontiguousarray(np.swapaxes(keep, -1, -2))).to(device).transpose(-1, -2)
    if layout == "sliced":
        rows, cols = keep.shape[-2] + _MASK_SLACK[0], keep.shape[-1] + _MASK_SLACK[1]
        # The slack holds a checkerboard: a kernel that reads the mask with the wrong row
        # stride sees other values than the true rows hold, whatever those are.
        board = (np.add.outer(np.arange(rows), np.arange(cols)) % 2).astype(bool)
        buffer = np.broadcast_to(board, (*keep.shape[:-2], rows, cols)).copy()
        r0, c0 = _MASK_LEAD
        buffer[..., r0 : r0 + keep.shape[-2], c0 : c0 + keep.shape[-1]] = keep
        return torch.from_numpy(buffer).to(device)[..., r0 : r0 + keep.shape[-2], c0 : c0 + keep.shape[-1]]
    mask = torch.from_numpy(np.ascontiguousarray(keep)).to(device)
    if layout == "expanded":
        return mask.expand(*batch_heads, *keep.shape[-2:])
    return mask


def qk_limit(fmt: FloatFormat, head_dim: int, scale: float) -> float:
    """Largest |entry| of Q and K: no overflow of q.k or scale*q.k in the compute format (see module doc)."""
    return min(fmt.max_finite, math.sqrt(_compute_max(fmt) / (SCORE_HEADROOM * head_dim * max(abs(scale), 1.0))))


def _compute_format(fmt: FloatFormat) -> FloatFormat:
    """The format attention on ``fmt`` inputs computes in: float32 for inputs of 32 bits or
    fewer, float64 for float64 (``Capabilities.compute_format``'s default)."""
    return FORMATS[Capabilities().compute_format(fmt.name)]


def _compute_max(fmt: FloatFormat) -> float:
    """The largest finite value of the format attention on ``fmt`` inputs computes in."""
    return _compute_format(fmt).max_finite


def v_limit(fmt: FloatFormat, seq_k: int) -> float:
    """Largest |entry| of V: an unnormalised sum over Nk keys stays finite in the compute format
    (float32 for inputs of 32 bits or fewer, float64 for float64), and V itself within half the
    format's largest value (a rounding up of a weighted sum of such values cannot overflow).

    Only float16 differs from ``dtype_bound_v_limit`` (bfloat16 shares float32's range): 32752
    whatever Nk, against 65504 / (2 Nk) (204 at 160 keys).  The old bound kept an unnormalised
    sum finite in float16 itself, which hid kernels that hold it there: staging
    sum_j exp(s_j - m) v_j in the output format before dividing by l overflows to inf where
    every output is finite (a blind mutant survived on that, 2026-12-01).  Every kernel that
    accumulates in float32 keeps its headroom.

    The bound is a value of ``fmt`` (rounded down to one): entries are clipped to it and then
    rounded to ``fmt``, and a bound between two of its values let a clipped entry round up past
    it (bfloat16 with 2 keys: float32's largest / 4 rounded to 2**126, 2026-12-03)."""
    limit = _floor_to_format(min(fmt.max_finite / 2.0, _compute_max(fmt) / (2.0 * seq_k)), fmt)
    if limit * seq_k > _compute_max(fmt) / 2.0:  # float64: the division rounded up
        limit = _floor_to_format(math.nextafter(limit, 0.0), fmt)
    return limit


def _floor_to_format(x: float, fmt: FloatFormat) -> float:
    """The largest value of ``fmt`` at most ``x`` (``x`` positive and within its normal range)."""
    _, e = math.frexp(x)  # x = m * 2**e with 0.5 <= m < 1: fmt's spacing there is 2**(e - precision)
    spacing = math.ldexp(1.0, e - fmt.precision)
    return math.floor(x / spacing) * spacing


def dtype_bound_v_limit(fmt: FloatFormat, seq_k: int) -> float:
    """The bound on |V| of cases drawn before 2026-12-01 (``AttentionSpec.v_max`` None): an
    unnormalised sum over Nk keys stays finite in the input format itself."""
    return fmt.max_finite / (2.0 * seq_k)


def _is_pow2(n: int) -> bool:
    return n & (n - 1) == 0


def _score_spread(spec: AttentionSpec) -> float:
    """Rough standard deviation of one query's scores across keys (the softmax's input spread)."""
    q_rms = min(math.hypot(spec.q.spread(), spec.q.offset), spec.qk_limit)
    k_spread = min(spec.k.spread(), spec.qk_limit)
    return abs(spec.effective_scale) * math.sqrt(spec.head_dim) * q_rms * k_spread


def attention_features(spec: AttentionSpec) -> tuple[str, ...]:
    found = [f"dtype:{spec.dtype}", *length_features(spec.seq_k)]
    if spec.seq_k >= 512:
        found.append("attn:long-keys")
    if spec.seq_q >= 512:
        found.append("attn:long-queries")
    if spec.seq_k >= INDEX_WIDTH_LENGTHS[0]:
        found.append("attn:index-width")
    pairs = spec.batch * spec.heads_q * spec.tile
    if pairs >= 16:
        found.append("attn:many-heads")
    if pairs > GRID_AXIS_LIMIT:
        found.append("attn:grid-heads")
    found.extend(offset_features(pairs * min(spec.seq_q, spec.seq_k) * spec.head_dim))
    if (min(spec.seq_q, spec.seq_k) >= TILES_MIN_SEQ
            and spec.batch * spec.heads_q * -(-spec.seq_q // TILES_FEATURE_TILE) > TILES_FEATURE_SMS):
        found.append("attn:many-tiles")
    hq, hkv = spec.heads_q, spec.heads_kv
    found.append("attn:mha" if hq == hkv else "attn:mqa" if hkv == 1 else "attn:gqa")
    if spec.seq_q < spec.seq_k:
        found.append("attn:nq<nk")
    elif spec.seq_q > spec.seq_k:
        found.append("attn:nq>nk")
    if spec.seq_q == 1:
        found.append("attn:decode")
    if spec.causal:
        found.append("attn:causal")
    if spec.mask is not None:
        found.append("attn:bool-mask")
        found.append(f"mask-shape:{spec.mask_shape}")
        if spec.mask_layout != "contiguous":
            found.append(f"mask-layout:{spec.mask_layout}")
        if spec.causal:
            found.append("attn:causal+mask")
        found.extend(spec.mask.kind_features())
        found.extend(keep_features(spec.keep()))
    d = spec.head_dim
    if d <= 8:
        found.append("hdim:small")
    found.append("hdim:pow2" if _is_pow2(d) else "hdim:non-pow2")
    if d >= 160:
        found.append("hdim:large")
    if d > 256:
        found.append("hdim:over-256")
    if spec.scale is None:
        found.append("scale:default")
    else:
        found.append("scale:explicit")
        if spec.scale == 0:
            found.append("scale:zero")
        elif abs(spec.scale) <= 1e-3:
            found.append("scale:tiny")
        if abs(spec.scale) >= 1e2:
            found.append("scale:huge")
        if spec.scale < 0:
            found.append("scale:negative")
    found.extend((f"q:{spec.q.kind}", f"k:{spec.k.kind}", f"v:{spec.v.kind}"))
    spread = _score_spread(spec)
    if spec.seq_k > 1 and spread >= 100.0:
        found.append("qk:one-hot")
    if spec.seq_k > 1 and spread <= 1e-3:
        found.append("qk:flat")
    found.extend(f"special:{s.kind}" for s in spec.specials)
    for layout, (name, shape) in zip(spec.layouts, spec.shapes.items(), strict=True):
        if layout == "misaligned":
            found.append("layout:misaligned")
        elif layout != "contiguous":
            found.append(f"layout:{layout}")
            if is_noncontiguous(layout, shape):
                found.append("layout:noncontiguous")
    return ordered(found)


@dataclass(frozen=True, repr=False)
class AttentionCase(ReplayableRepr):
    """A drawn attention input: its spec and the adversarial features it exercises."""

    spec: AttentionSpec
    features: tuple[str, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", attention_features(self.spec))

    def build(self, device: str = "cpu") -> AttentionInputs:
        return self.spec.build(device)

    def describe(self) -> str:
        s = self.spec
        parts = [
            f"B={s.batch} Hq={s.heads_q} Hkv={s.heads_kv} Nq={s.seq_q} Nk={s.seq_k} D={s.head_dim}",
            short_dtype(s.dtype),
            "scale=1/sqrt(D)" if s.scale is None else f"scale={num(s.scale)}",
        ]
        if s.causal:
            parts.append("causal")
        if s.mask is not None:
            parts.append(f"mask={s.mask.describe()}@{s.mask_shape}"
                         + ("" if s.mask_layout == "contiguous" else f"/{s.mask_layout}"))
        parts.append(f"q={s.q.describe()} k={s.k.describe()} v={s.v.describe()}")
        if s.specials:
            parts.append("specials=[" + ", ".join(sp.describe() for sp in s.specials) + "]")
        if any(layout != "contiguous" for layout in s.layouts):
            parts.append("layout=" + ",".join(f"{n}:{l}" for n, l in zip("qkv", s.layouts) if l != "contiguous"))
        parts.append(f"seed={s.seed}")
        if s.tile > 1:
            b, h, n, d = s.full_shapes["q"]
            parts.append(f"repeated x{s.tile} along the heads to Hq={h} ({b * h * n * d} elements in Q)")
        return " ".join(parts)


# ---- the strategy -------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class _AttentionConfig:
    call: str  # how the public function was called: the strategy's repr in Hypothesis output
    formats: tuple[FloatFormat, ...]
    min_seq: int
    max_seq: int
    max_batch: int
    max_heads: int
    head_dims: tuple[int, ...]
    special_values: bool
    causal: bool
    bool_mask: bool
    causal_with_mask: bool
    causal_square_only: bool
    mask_key_broadcast: bool
    gqa: bool
    noncontiguous: bool
    layout_alignment: int = 1
    unit_last_stride: bool = False
    zero_strides: bool = True  # the batch- and head-broadcast layouts (caps.zero_strides)
    empty_inputs: bool = True  # the empty-batch probe (caps.empty_inputs)
    mask_layouts: tuple[str, ...] = MASK_LAYOUTS
    index_lengths: tuple[int, ...] = ()  # rare key lengths past max_seq (lengths.INDEX_WIDTH_LENGTHS)
    mid_keys_max: int = 0  # rare key lengths in (max_seq, mid_keys_max]; 0: none
    masked_keys_max: int = 0  # the masked probes' longest keys (MASKED_KEYS_MAX within caps); below max_seq: max_seq
    mid_queries_max: int = 0  # rare query lengths in (max_seq, mid_queries_max]; 0: none
    decode_max_keys: int = 0  # most keys of a decode step (see _sequence_lengths); max_seq without probes
    roundoffs: dict = field(default_factory=dict)  # format name -> the target's (u_dot, u_c): _tamed_scale
    many_heads: bool = False  # rare cases with many (batch, head) pairs
    many_heads_pairs: int = 0  # at most this many in such a case (attention_cases' many_heads_pairs)
    grid_pairs: tuple[int, ...] = ()  # pair counts of the grid-heads probe (lengths.GRID_COUNTS)
    grid_axes: tuple[str, ...] = GRID_HEADS_AXES  # where its pairs may go (caps.max_batch, caps.max_heads)
    tiles_seq: int = 0  # the many-tiles probe's longest Nq and Nk (TILES_RUNGS); below TILES_MIN_SEQ: none
    zero_scale_keys: int = 0  # the zero-scale probe's keys past ZERO_SCALE_PROBE_KEYS (ZERO_SCALE_LONG_KEYS); 0: none
    wide_seq: tuple[int, int] | None = None  # the wide-offsets probe's Nq = Nk range; None: no probe
    wide_max_pairs: int | None = None  # the most heads its repetitions may make (caps.max_pairs, max_heads)
    wide_elements: int = WIDE_OFFSET_ELEMENTS  # the elements its repetitions pass
    absorption: bool = False  # rare absorption probes (see ABSORPTION_MIN_KEYS)
    probe: str | None = None  # every case is this probe (ATTENTION_PROBES)

    @property
    def causal_offset(self) -> bool:
        """Whether the target takes the causal flag with Nq != Nk (top-left)."""
        return self.causal and not self.causal_square_only

    def unavailable_probes(self) -> dict[str, str]:
        """The probes these settings cannot draw, each with the reason."""
        out = {}
        if not self.index_lengths:
            out["index-width"] = "index_widths=False, or no key length of 32767..65537 lies past max_seq within caps.max_length"
        if self.mid_keys_max <= self.max_seq:
            out["mid-keys"] = "probes=False, or caps.max_length leaves no key length past max_seq"
        if self.mid_queries_max <= self.max_seq:
            out["mid-queries"] = "probes=False, or caps.max_length leaves no query length past max_seq"
        if not self.many_heads:
            out["many-heads"] = "probes=False"
        if not self.grid_pairs or not self.grid_axes:
            out["grid-heads"] = (f"probes=False, or grid_pairs below {GRID_AXIS_LIMIT + 1} (the search sizes it by "
                                 "the target's speed), or caps.max_pairs, max_batch and max_heads allow no more")
        if not self.causal or self.causal_square_only or self.max_seq < 2:
            out["causal-offset"] = "caps take no causal flag, or causal only with Nq == Nk, or max_seq below 2"
        if self.tiles_seq < TILES_MIN_SEQ:
            out["many-tiles"] = (f"probes=False, or tiles_seq (within caps.max_length) below {TILES_MIN_SEQ} (the "
                                  "search sizes it by the target's speed)")
        if self.wide_seq is None:
            out["wide-offsets"] = ("wide_offsets=False (the search turns it on for CUDA devices), or the target's "
                                   "head dims, lengths and pair limit allow no block that repeats past 2**31")
        if not self.special_values:
            out["single-key"] = "special_values=False (caps take no NaN)"
            out["nan-underflow"] = out["single-key"]
            out["aligned-specials"] = "special_values=False (caps take no NaN)"
        elif not aligned_special_seqs(self.min_seq, self.max_seq):
            out["aligned-specials"] = (f"no power of two of {ALIGNED_SPECIAL_MIN_KEYS} or more within "
                                       "[min_seq, max_seq]")
        if not self.empty_inputs:
            out["empty-batch"] = "caps.empty_inputs=False (the target takes no empty batch)"
        if max(self.max_seq, self.mid_keys_max) < BLOCK_ENDS_MIN_KEYS:
            out["block-ends"] = f"max_seq (and the mid-keys limit, within caps.max_length) below {BLOCK_ENDS_MIN_KEYS}"
        if not self.bool_mask or self.max_batch < 2 or self.max_seq < 2:
            out["coincident-mask"] = "caps take no boolean mask (or masks=False), or max_batch or max_seq below 2"
        if not self.bool_mask or min(self.max_batch, self.max_heads) < 2:
            out["coincident-heads"] = "caps take no boolean mask (or masks=False), or max_batch or max_heads below 2"
            out["coincident-heads-3d"] = out["coincident-heads"]
        if wide_probe_head_dim(self.head_dims) is None:
            out["wide-head"] = "no head dim in (128, 256] within head_dims and caps"
        if wider_probe_head_dim(self.head_dims) is None:
            out["wider-head"] = "no head dim past 256 within head_dims and caps"
        if not self.bool_mask or self.max_seq < 2:
            out["masked-lead"] = "caps take no boolean mask (or masks=False), or max_seq below 2"
            out["broadcast-mask"] = "caps take no boolean mask (or masks=False), or max_seq below 2"
        if not (self.bool_mask or self.causal_offset) or self.max_seq < 2:
            out["masked-tail"] = ("caps take neither a boolean mask nor a causal flag with Nq != Nk (or masks=False), "
                                  "or max_seq below 2")
        if not (self.absorption and self.max_seq >= ABSORPTION_MIN_KEYS):
            out["absorption"] = f"probes=False, or max_seq (within caps) below {ABSORPTION_MIN_KEYS}"
            out["far-tail"] = out["absorption"]
        return out

    def __repr__(self) -> str:
        return self.call

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.call)


def _mask_layouts(caps: Capabilities) -> tuple[str, ...]:
    """The mask layouts a target accepts: only ``contiguous`` without ``caps.noncontiguous``;
    no ``transposed`` (last stride != 1) with ``caps.mask_unit_stride``."""
    if not caps.noncontiguous:
        return MASK_LAYOUTS[:1]
    return tuple(m for m in MASK_LAYOUTS if not (caps.mask_unit_stride and m == "transposed"))


def _allowed_head_dim(d: int, caps: Capabilities) -> bool:
    return caps.head_dim_min <= d <= caps.head_dim_max and d % caps.head_dim_multiple == 0


def _resolve_head_dims(head_dims: object, caps: Capabilities) -> tuple[int, ...]:
    limits = (
        f"caps allow head dims in [{caps.head_dim_min}, {caps.head_dim_max}] "
        f"that are multiples of {caps.head_dim_multiple}"
    )
    if head_dims is None:
        dims = tuple(d for d in INTERESTING_HEAD_DIMS if _allowed_head_dim(d, caps))
        if not dims:
            # Unusual limits: fall back to every allowed dim (smallest first).
            top = min(caps.head_dim_max, 1024)
            dims = tuple(d for d in range(caps.head_dim_min, top + 1) if _allowed_head_dim(d, caps))
        check_argument(bool(dims), f"no head dim satisfies the target's limits: {limits}")
        return dims
    if isinstance(head_dims, int) or not isinstance(head_dims, (tuple, list)):
        raise InvalidArgument(f"head_dims must be a sequence of ints such as (64, 80), got {head_dims!r}")
    check_argument(len(head_dims) > 0, "head_dims must not be empty; pass None to use the built-in list")
    for d in head_dims:
        check_positive_int(d, "each entry of head_dims")
        check_argument(_allowed_head_dim(d, caps), f"head_dims contains {d}, outside the target's limits: {limits}")
    return tuple(dict.fromkeys(head_dims))


def attention_cases(
    *,
    dtypes: tuple[str, ...] | list[str] = ("float32",),
    caps: Capabilities | None = None,
    max_seq: int = 96,
    max_batch: int = 2,
    max_heads: int = 4,
    head_dims: tuple[int, ...] | list[int] | None = None,
    special_values: bool | None = None,
    index_widths: bool = True,
    probes: bool = True,
    probe: str | None = None,
    many_heads_pairs: int = MANY_HEADS_PAIRS,
    grid_pairs: int = 0,
    tiles_seq: int = 0,
    wide_offsets: bool = False,
    zero_scale_keys: int = 0,
    wide_elements: int | None = None,
) -> SearchStrategy[AttentionCase]:
    """Attention inputs within the target's capabilities, rich in adversarial features.

    * ``dtypes``: storage dtypes, intersected with ``caps.dtypes``; shrinking moves to the first.
    * ``caps``: Nq and Nk in ``[caps.min_length, min(max_seq, caps.max_length)]``;
      ``caps.causal``, ``caps.bool_mask``, ``caps.causal_with_mask`` gate the causal
      flag, the boolean mask and both together; ``caps.causal_square_only`` makes
      causal cases take Nq = Nk; ``caps.mask_key_broadcast=False`` draws no mask broadcast
      over the keys; ``caps.mask_unit_stride`` keeps the mask's last
      stride 1 (no ``transposed`` layout); ``caps.neg_inf=False`` turns off
      every mask (causal included); ``caps.gqa=False`` keeps Hq == Hkv;
      ``caps.noncontiguous=False`` keeps all three tensors contiguous; head dims
      stay within ``caps.head_dim_min/max`` and are multiples of ``head_dim_multiple``.
    * ``max_batch``, ``max_heads`` (Hq), ``max_seq`` bound the sizes, keeping a
      high-precision reference cheap.  About one case in ``COINCIDENCE_ODDS`` has Nq or Nk
      equal to B, Hq or D, where a kernel that tells dims apart by size goes wrong.
    * ``head_dims``: the dims to draw from, smallest first; None uses
      ``INTERESTING_HEAD_DIMS`` within the caps limits.  A tier (``HEAD_DIM_TIERS``) is
      drawn first, then a dim in it, so that the largest dims are not starved.
    * ``special_values``: None follows ``caps``; True insists; False gives no NaN/+inf.
    * ``index_widths``: about one example in ``INDEX_WIDTH_ODDS`` is a long-key probe: Nk
      at the edge of 16-bit indexing (32767..65537), past ``max_seq`` but within
      ``caps.max_length``, with a few queries, two K/V heads, a small head dim, the default
      scale, no mask, no causal flag, no NaN/inf, and Q, K, V whose rows tell the key
      positions apart (``position_distinct``), so that a kernel reading the wrong key or
      value row changes the output; False never draws them.
    * ``probes``: about one example in ``PROBE_ODDS`` has Nk past ``max_seq``, up to
      ``MID_KEYS_MAX`` (within ``caps.max_length``), with at most ``MID_KEYS_MAX_QUERIES``
      queries, one batch, two K/V heads and D <= ``MID_KEYS_MAX_HEAD_DIM`` but everything
      else as usual, or (half of those) Nq past ``max_seq`` up to ``MID_QUERIES_MAX``
      against at most ``MID_QUERIES_MAX_KEYS`` keys, the rest kept as small; about one more has many (batch, head) pairs (up to
      ``MANY_HEADS_MAX_BATCH`` x ``MANY_HEADS_MAX_KV_HEADS`` x ``MANY_HEADS_MAX_GROUP``) of
      sequences up to ``MANY_HEADS_MAX_SEQ``; about one more is an absorption probe (one key
      outscores the rest, whose blocks each add just under half an ulp of the input format
      to the running sum: see ``ABSORPTION_MIN_KEYS``).  False never draws them.
    * ``probe``: one of ``ATTENTION_PROBES``: every case is that probe (the rest drawn as
      usual), so that a search can try each probe whatever its luck with the rare draws
      (``attention_probes`` lists those the other arguments allow).  None: drawn rarely.
    * ``many_heads_pairs``: the most (batch, head) pairs of a many-heads probe, and its simplest
      case (``MANY_HEADS_PAIRS``, past every GPU's SM count, by default; the search sizes it by
      the target's speed, up to ``MANY_HEADS_MAX_PAIRS``).  Each pair is a
      program of a Triton kernel, which the interpreter runs one after the other (~18 ms
      each): ``verify.search`` sizes it by the target's measured speed.
    * ``grid_pairs``: the most (batch, head) pairs of a grid-heads case, drawn only when forced
      (``probe="grid-heads"``) and only where it allows ``lengths.GRID_COUNTS``' 65536 (0, the
      default: none).  Past 65535 blocks on a grid's second or third axis a kernel fails to
      launch or leaves pairs unwritten: pairs on the batch alone (the simplest case), on the
      heads alone, or split between them, of up to ``GRID_HEADS_MAX_SEQ`` queries and keys.
      ``verify.search`` sizes it by the target's measured speed.
    * ``tiles_seq``: the most queries and keys of a many-tiles case, drawn only when forced
      (``probe="many-tiles"``) and only from ``TILES_MIN_SEQ`` (0, the default: none): Nq = Nk
      (or Nq about half of Nk) in the hundreds to thousands, causal first, over
      ``tiles_pairs(tiles_seq)`` (batch, head) pairs, D <= ``TILES_MAX_HEAD_DIM``.
      ``verify.search`` climbs ``TILES_RUNGS`` by the target's measured speed.
    * ``wide_offsets``: allow the wide-offsets probe, drawn only when forced
      (``probe="wide-offsets"``): one batch entry of ``lengths.WRAP_REVEALING_COUNTS`` heads
      (Hq = Hkv: 7, 11 or 13, a period no wrapped index hides), Nq = Nk, D up to ``WIDE_HEAD_DIM``, causal or a mask shared
      by the heads, repeated along the heads (``spec.tile``) until Q, K, V and the output each
      pass ``lengths.WIDE_OFFSET_ELEMENTS`` by a block: 4 to 8 GiB a tensor, so only for a
      device that holds it (False, the default: never).  The heads stay within the target's
      ``max_pairs`` and ``max_heads`` (longer sequences make fewer of them).
    * ``wide_elements``: the elements the wide-offsets probe's tensors pass:
      ``lengths.WIDE_OFFSET_ELEMENTS`` (2**31, int32 offsets; None, the default) or, where 8 GiB
      tensors are out of reach (the CPU), ``lengths.FLOAT_OFFSET_ELEMENTS`` (2**24, offsets
      formed in float32): 64 to 128 MiB of float32 a tensor.
    * ``zero_scale_keys``: the zero-scale probe's keys where more than ``ZERO_SCALE_PROBE_KEYS``
      (within ``caps.max_length``; 0, the default: that many): see ZERO_SCALE_LONG_KEYS, which
      the GPU size profile passes.
    * The simplest case of each probe is its strongest (the one a search's probe round tries):
      the most pairs, keys or queries the probe allows, and sequences long enough that Q and K
      matter (more than one key).
    """
    config = _attention_config(dtypes, caps, max_seq, max_batch, max_heads, head_dims, special_values, index_widths,
                               probes, probe, many_heads_pairs, grid_pairs, tiles_seq, wide_offsets, zero_scale_keys,
                               wide_elements)
    check_probe(probe, config.unavailable_probes(), ATTENTION_PROBES)
    return _attention_cases(config)


def attention_probes(**kwargs: Any) -> tuple[str, ...]:
    """The probes (``ATTENTION_PROBES``) that ``attention_cases(**kwargs)`` can draw, in order."""
    unavailable = _attention_config(**{**bound_arguments(attention_cases, kwargs), "probe": None}).unavailable_probes()
    return tuple(p for p in ATTENTION_PROBES if p not in unavailable)


def _attention_config(dtypes, caps, max_seq, max_batch, max_heads, head_dims, special_values,
                      index_widths, probes, probe, many_heads_pairs=MANY_HEADS_PAIRS,
                      grid_pairs=0, tiles_seq=0, wide_offsets=False, zero_scale_keys=0,
                      wide_elements=None) -> "_AttentionConfig":
    """attention_cases' arguments checked and resolved (see there)."""
    check_argument(isinstance(zero_scale_keys, int) and not isinstance(zero_scale_keys, bool) and zero_scale_keys >= 0,
                   f"zero_scale_keys must be a non-negative int (0: ZERO_SCALE_PROBE_KEYS), got {zero_scale_keys!r}")
    check_positive_int(many_heads_pairs, "many_heads_pairs")
    check_argument(isinstance(grid_pairs, int) and not isinstance(grid_pairs, bool) and grid_pairs >= 0,
                   f"grid_pairs must be a non-negative int, got {grid_pairs!r}")
    check_argument(isinstance(tiles_seq, int) and not isinstance(tiles_seq, bool) and tiles_seq >= 0,
                   f"tiles_seq must be a non-negative int (0: no many-tiles probe), got {tiles_seq!r}")
    caps = check_caps(caps)
    formats = resolve_dtypes(dtypes, caps)
    lo, hi = length_bounds(max_seq, "max_seq", caps)
    check_positive_int(max_batch, "max_batch")
    check_positive_int(max_heads, "max_heads")
    dims = _resolve_head_dims(head_dims, caps)
    specials_on = resolve_switch(special_values, caps.special_values, "special_values", "special_values")
    check_optional_bool(index_widths, "index_widths")
    check_optional_bool(probes, "probes")
    masks_on = caps.neg_inf
    config = _AttentionConfig(
        call=call_text(
            "attention_cases",
            dtypes=tuple(f.name for f in formats),
            caps=caps,
            max_seq=max_seq,
            max_batch=max_batch,
            max_heads=max_heads,
            head_dims=head_dims,
            special_values=special_values,
            index_widths=index_widths,
            probes=probes,
            probe=probe,
            many_heads_pairs=many_heads_pairs,
            grid_pairs=grid_pairs,
            tiles_seq=tiles_seq,
            zero_scale_keys=zero_scale_keys,
            wide_offsets=wide_offsets,
            wide_elements=wide_elements,
        ),
        formats=formats,
        min_seq=lo,
        max_seq=hi,
        max_batch=min(max_batch, caps.max_batch or max_batch),
        max_heads=min(max_heads, caps.max_heads or max_heads),
        head_dims=dims,
        special_values=specials_on,
        causal=caps.causal and masks_on,
        bool_mask=caps.bool_mask and masks_on,
        causal_with_mask=caps.causal_with_mask,
        causal_square_only=caps.causal_square_only,
        mask_key_broadcast=caps.mask_key_broadcast,
        gqa=caps.gqa,
        mask_layouts=_mask_layouts(caps),
        noncontiguous=caps.noncontiguous,
        layout_alignment=caps.layout_alignment,
        unit_last_stride=caps.unit_last_stride,
        zero_strides=caps.zero_strides,
        empty_inputs=caps.empty_inputs,
        index_lengths=index_width_lengths(lo, caps.max_length, hi) if index_widths else (),
        mid_keys_max=min(MID_KEYS_MAX, caps.max_length or MID_KEYS_MAX) if probes else 0,
        masked_keys_max=min(MASKED_KEYS_MAX, caps.max_length or MASKED_KEYS_MAX) if probes else 0,
        mid_queries_max=min(MID_QUERIES_MAX, caps.max_length or MID_QUERIES_MAX) if probes else 0,
        decode_max_keys=min(hi * DECODE_KEYS_FACTOR, caps.max_length or hi * DECODE_KEYS_FACTOR) if probes else hi,
        roundoffs={f.name: _score_roundoffs(f, caps) for f in formats},
        many_heads=probes,
        many_heads_pairs=min(many_heads_pairs, caps.max_pairs or many_heads_pairs),
        grid_pairs=_grid_pairs(grid_pairs, caps) if probes else (),
        grid_axes=_grid_axes(caps),
        tiles_seq=min(tiles_seq, caps.max_length or tiles_seq) if probes else 0,
        zero_scale_keys=min(zero_scale_keys, caps.max_length or zero_scale_keys),
        absorption=probes,
        probe=probe,
    )
    check_bool(wide_offsets, "wide_offsets")
    past = wide_elements_or_default(wide_elements)
    if wide_offsets and probes:
        most = min((m for m in (caps.max_pairs, caps.max_heads) if m is not None), default=None)
        wide_dims = [d for d in dims if d <= WIDE_HEAD_DIM]
        floor = min((wide_min_seq(d, most, past) for d in wide_dims), default=hi + 1)
        if floor <= hi:
            config = replace(config, wide_seq=(max(lo, WIDE_MIN_SEQ), max(min(hi, WIDE_MAX_SEQ), floor)),
                             wide_max_pairs=most, wide_elements=past)
    return config


def wide_min_seq(head_dim: int, most_pairs: int | None, past: int) -> int:
    """The least Nq = Nk of a wide-offsets case of ``head_dim`` whose repetitions make at most
    ``most_pairs`` heads (1 where there is no limit): its blocks of up to max(WRAP_REVEALING_COUNTS) heads
    make about ``past`` / (N D) heads (``past``: the probe's edge, wide_elements_or_default),
    and two blocks more."""
    if most_pairs is None:
        return 1
    room = most_pairs - 2 * max(WRAP_REVEALING_COUNTS)
    return -(-past // (room * head_dim)) if room > 0 else past


def _grid_pairs(most: int, caps: Capabilities) -> tuple[int, ...]:
    """The grid-heads probe's pair counts: ``lengths.grid_counts`` within ``caps.max_pairs``."""
    return grid_counts(most if caps.max_pairs is None else min(most, caps.max_pairs))


def _grid_axes(caps: Capabilities) -> tuple[str, ...]:
    """Where the grid-heads probe may put its pairs: the batch or the heads alone where the target
    takes more than GRID_AXIS_LIMIT of them, both (each at most 1024) where it takes 1024."""
    allowed = {"batch": caps.max_batch is None or caps.max_batch > GRID_AXIS_LIMIT,
               "heads": caps.max_heads is None or caps.max_heads > GRID_AXIS_LIMIT,
               "both": all(m is None or m >= 1024 for m in (caps.max_batch, caps.max_heads))}
    return tuple(a for a in GRID_HEADS_AXES if allowed[a])


def _score_roundoffs(fmt: FloatFormat, caps: Capabilities) -> tuple[float, float]:
    """(u_dot, u_c) of a target for inputs in ``fmt``, as the tolerance policy takes them: the
    dot format's unit roundoff where it is narrower than the inputs (TF32), else 0; the
    compute format's."""
    dot, compute = get_format(caps.dot_format(fmt.name)), get_format(caps.compute_format(fmt.name))
    return (dot.unit_roundoff if fmt.precision > dot.precision else 0.0), compute.unit_roundoff


#: One case in KV_PACKED_ODDS (where the target takes non-contiguous inputs at its alignment)
#: passes K and V as views of one buffer (``kv-packed``, features.ATTENTION_KV_LAYOUTS).  Drawn
#: one tensor at a time, Q, K and V never shared a storage (0 of 1,142 calls), and a blind mutant
#: that took K and V sharing one for a packing of its own guess lived through seeds 1-3 of 4 s a
#: dtype (eleventh red team, 2026-12-06).
KV_PACKED_ODDS = 8


def _kv_packed_allowed(c: _AttentionConfig, kv_shape: tuple[int, ...], fmt: FloatFormat) -> bool:
    """Whether K and V of ``kv_shape`` may be drawn ``kv-packed``: non-contiguous inputs allowed,
    and K's view at the target's alignment (V's start, Hkv x D elements in, is a multiple of the
    head stride D that the check covers)."""
    return c.noncontiguous and is_aligned("kv-packed", kv_shape, fmt.torch_dtype.itemsize, c.layout_alignment)


def _layouts_for(c: _AttentionConfig, shape: tuple[int, ...], fmt: FloatFormat) -> tuple[str, ...]:
    """The layouts this tensor may be drawn in: all of them, or those meeting the target's alignment
    and, with ``unit_last_stride``, keeping the head dim's stride 1, and without ``zero_strides``
    none expanded over a dim."""
    if not c.noncontiguous:
        return ("contiguous",)
    return tuple(name for name in ATTENTION_LAYOUTS
                 if is_aligned(name, shape, fmt.torch_dtype.itemsize, c.layout_alignment)
                 and not (c.unit_last_stride and has_strided_last_dim(name, shape))
                 and (c.zero_strides or name not in ATTENTION_BROADCAST_LAYOUTS))


#: One example in this many takes a scale of 0: softmax is uniform over the visible keys
#: there (and ``scale or 1 / sqrt(D)`` silently takes the default).  With at least
#: ZERO_SCALE_MIN_KEYS keys (where max_seq allows): over one key every scale gives the same
#: weights, and the zero-scale probe's simplest case, one query and one key, told a kernel
#: that took the default for 0 from a right one only by luck.
ZERO_SCALE_ODDS = 16
ZERO_SCALE_MIN_KEYS = 8
#: The zero-scale probe's cases take this many keys or more (within the target's max_length;
#: none past WIDE_HEAD_DIM) and a V whose first ZERO_SCALE_ZERO_SHARE of the keys are exactly 0
#: (a ``zero-run``, the rest about 1): a key block of up to 128 keys is then all zero in V
#: whether the blocks are counted from the first key or back from the last, and with scale 0
#: the exact output is the mean of V over the visible keys, about 0.4.  A kernel that skips a
#: key block whose V is all zero (as padding) also drops its weight from the sum l, and
#: answers more.  Drawn, such V blocks were rare: 15 of 1,000 float16 cases had a zero run in V
#: (ZERO_RUN_ODDS) and none of them a whole aligned block of 64 keys (max_seq 160,
#: 2026-12-05); a blind mutant skipping zero V blocks lived through the main job (seventh red
#: team), and one written here for blocks of 64 through 100 examples a dtype (seed 1).
ZERO_SCALE_PROBE_KEYS = 2 * 128 + 3
ZERO_SCALE_ZERO_SHARE = 0.6
#: The zero-scale probe's keys in the GPU size profile (``zero_scale_keys``): with scale 0 every
#: visible key weighs 1, so l is their count, past 65504 here.  A kernel that keeps l, or 1 / l,
#: in float16 then overflows (1 / inf = 0) or loses 1 / l to float16's subnormals (seventh
#: red team, 2026-12-05: a blind mutant computing 1 / l in float16 needs over 1e5 keys); one
#: query tile and a few heads of at most MID_KEYS_MAX_HEAD_DIM keep it cheap on a GPU.  Not on
#: the CPU, where the Triton interpreter takes seconds over 2**17 keys.
ZERO_SCALE_LONG_KEYS = 2**17 + 1


@st.composite
def _scales(draw: st.DrawFn) -> float | None:
    # None (1/sqrt(D)) first; then +-m*10**e from 1e-6 to 1e6 (shrinking to 1.0); rarely 0,
    # drawn apart so that it stays rare (a third branch of one_of would take a third).
    explicit = st.tuples(magnitudes(1e-6, 1e6), st.booleans()).map(lambda p: -p[0] if p[1] else p[0])
    scale = draw(st.one_of(st.just(None), explicit))
    return 0.0 if rare(draw, ZERO_SCALE_ODDS) else scale


def _head_dim_tiers(dims: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """``dims`` split at ``HEAD_DIM_TIERS`` (empty tiers dropped), in order."""
    tiers, low = [], 0
    for high in HEAD_DIM_TIERS:
        tier = tuple(d for d in dims if d > low and (high is None or d <= high))
        if tier:
            tiers.append(tier)
        low = high if high is not None else low
    return tuple(tiers)


def _draw_head_dim(draw: st.DrawFn, dims: tuple[int, ...]) -> int:
    """A head dim from ``dims``: a tier first, then a dim in it; shrinks to the smallest."""
    tiers = _head_dim_tiers(dims)
    return draw(st.sampled_from(tiers[draw(st.integers(0, len(tiers) - 1))]))


def _probe_head_dim(drawn: int, allowed: tuple[int, ...]) -> int:
    """A forced probe's head dim: the drawn one, but never 1 where ``allowed`` holds another (the
    smallest above 1 then).  With D = 1 a score is one product, the default scale 1/sqrt(D) is 1
    and the head dim's stride is never read, so a scale applied twice (or not at all, or as 1/D)
    and a misread D stride cannot show, in the cases that take most of a short search's budget:
    the probes' simplest cases held D = 1 on the CPU profile, and a Triton kernel that scaled
    twice lived through the probe round, killed only at example 16, 7.0 s of float16 (main job,
    seed 20261211, 2026-12-06).  Drawn at random, D = 1 stays (the plain cases, shrinking)."""
    return drawn if drawn != 1 else min(_probe_dims(list(allowed)))


def _probe_dims(dims: list[int]) -> list[int]:
    """The head dims a probe that draws among ``dims`` may take: all but 1 where another is
    there (see _probe_head_dim)."""
    return [d for d in dims if d != 1] or dims


def aligned_special_seqs(min_seq: int, max_seq: int) -> tuple[int, ...]:
    """The aligned-specials probe's lengths: the powers of two of ALIGNED_SPECIAL_MIN_KEYS or
    more within [min_seq, max_seq]."""
    return _powers_of_two(max(min_seq, ALIGNED_SPECIAL_MIN_KEYS), max_seq, 0, 0)


def _small_head_dim(drawn: int, allowed: tuple[int, ...], largest: int) -> int:
    """The drawn head dim if it is at most ``largest``, else the largest allowed one up to
    it (the smallest allowed one if none is that small)."""
    small = [d for d in allowed if d <= largest]
    if drawn in small:
        return drawn
    return max(small) if small else min(allowed)


def _long_key_recipes(q: ValueRecipe, k: ValueRecipe, v: ValueRecipe, fmt: FloatFormat, seq_k: int,
                      head_dim: int, u_c: float) -> tuple[ValueRecipe, ValueRecipe, ValueRecipe]:
    """Q, K, V recipes of a long-key probe: every key gets its own score and every value row
    its own numbers, and a few keys carry most of the weight, so reading key or value row
    j' for j changes the output.

    Q and K become normal with spreads in ``LONG_KEY_QK_SPREAD`` (scores spread 4..16 with
    the default scale); K keeps its offset, kept as ``position_distinct`` keeps it (it adds
    the same amount to every score of a query and cancels), Q is centred (an offset in Q
    widens the scores' spread by ``sqrt(D)`` times the offset).  V becomes
    ``position_distinct`` and centred (an offset is a common part of every value row that
    hides their differences) with its spread within an eighth of ``v_limit``, so that no
    entry is clipped to the same value.

    K's offset cancels in exact arithmetic, not in the target's: the scores' rounding grows with
    it, and the tolerance gives up on a row whose scores' error bound passes
    ILL_CONDITIONED_ARGUMENT_ERROR (any convex combination of the values passes there, a misread
    one too).  So the offset is cut to keep the scores within TAME_MARGIN of that size in the
    compute precision ``u_c``, at the default scale: a float32 K offset of 5.2e5 hid a wrapped Q
    offset from a wide-offsets case (CI, 2026-12-03).
    """
    low, high = LONG_KEY_QK_SPREAD
    # A zero run, or copies of a key, would make positions alike: such a tensor draws plain
    # normal numbers here.
    q, k, v = (ValueRecipe("normal", scale=r.scale, offset=r.offset) if r.kind in ZERO_RUN_KINDS + ("key-ties",)
               else r for r in (q, k, v))
    # |scale q . k_j| <= D * (4 high) * (|offset| + 4 high) / sqrt(D) at the default scale
    limit = _judged_peak(head_dim, 0.0, u_c)
    reach = max(limit / (math.sqrt(head_dim) * 4.0 * high) - 4.0 * high, 0.0)
    k = ValueRecipe(k.kind, scale=k.scale, offset=float(f"{min(max(k.offset, -reach), reach):.3g}"))

    def peaked(r: ValueRecipe, offset: float) -> ValueRecipe:
        base = position_distinct(ValueRecipe("normal", scale=r.scale, offset=offset), fmt)
        return ValueRecipe("normal", scale=min(max(base.scale, low), high), offset=base.offset)

    v = position_distinct(replace(v, offset=0.0), fmt)
    v = ValueRecipe(v.kind, scale=min(v.scale, v_limit(fmt, seq_k) / 8.0))
    return peaked(q, 0.0), peaked(k, k.offset), v


#: The mid-keys probe's full-strength case (its simplest, the one the probe round tries): Q and
#: K rising along their positions, without noise, so that query i's scores rise evenly, from
#: the first key to the last, by GENTLE_RISE 2**-floor(0.8 (15 - i)) nats (2**-9 to 8 over the
#: 16 queries, each at most an octave above the one before; GENTLE_RISE_OCTAVES): the running
#: maximum moves on by the same small step at every key block (from about 2**-15 to 2**-3
#: nats for blocks of 64 of 4097 keys).  Each rescale factor
#: exp(m_old - m_new) is then one number near 1 that no format holds exactly, rounded the same
#: way at every block: one kept in the input format (a packed 16-bit multiply of the
#: accumulator), or a rescale skipped while the maximum moves by little, adds up over the
#: blocks.  V rises from -1 to 1 along the keys, so the output is the balance of the early and
#: the late keys' weight, not a mean that cancels.  Drawn at random, mid-keys cases had K
#: drifting one time in seven, noisy, with rises from 2 to 1e4 (fourth red team, 2026-12-05: a
#: bfloat16 rescale factor passed seed 1; this case shows it at 1.4 times the tolerance, rises
#: of 4 and 32 at 1.1).  The rises were linear over the queries, 0.5 to 8, until 2026-12-07:
#: every step at blocks of 64 was then above 2**-8, and a kernel that skips the rescale for
#: steps below that passed float16 at seeds 1-3 (the fourteenth red team's, and the same one
#: at blocks of 64 or 128 of 2**-8 and 1e-3, `check_cell` with 4 s a cell).  Over three
#: decades of rises the query whose step falls just under such a threshold skips every
#: rescale of its row, so its early keys' weight is off by up to e**(its rise).
GENTLE_RISE = 8.0
#: Octaves between neighbouring queries' rises in that case (``seq-drift``'s ``rate``).
GENTLE_RISE_OCTAVES = 0.8


def _gentle_rise_recipes(head_dim: int) -> tuple[ValueRecipe, ValueRecipe, ValueRecipe]:
    """Q, K and V of the mid-keys probe's full-strength case (see ``GENTLE_RISE``), default scale."""
    # scores: (1 / sqrt(D)) * the sum of D entries of q_i * trend = sqrt(D) q_i trend
    return (ValueRecipe("seq-drift", scale=0.0, gap=1.0, rate=GENTLE_RISE_OCTAVES),
            ValueRecipe("seq-drift", scale=0.0, gap=GENTLE_RISE / math.sqrt(head_dim)),
            ValueRecipe("seq-drift", scale=0.0, offset=-1.0, gap=2.0))


def _absorption_recipes(fmt: FloatFormat, head_dim: int, block: int, fraction: float,
                        end: int) -> tuple[ValueRecipe, ValueRecipe]:
    """Q and K of the absorption probe (see ``ABSORPTION_MIN_KEYS``), default scale: Q = 1,
    K = 0 but for one key of each (batch, head), the first and the last in turn (``end`` 0:
    the first in (batch, head) 0), whose entries are ``g`` so that its score exceeds every
    other by ``ln(B / (u f))`` (to within the rounding of ``g`` to the format)."""
    margin = math.log(block / (fmt.unit_roundoff * fraction))
    gap = margin / math.sqrt(head_dim)  # scores: (1 / sqrt(D)) * D * g
    return ValueRecipe("constant", offset=1.0), ValueRecipe("key-spike", scale=0.0, gap=gap, count=3 + end)


def far_tail_gaps(fmt: FloatFormat, seq_k: int) -> tuple[float, ...]:
    """The FAR_TAIL_GAPS a far-tail case of ``seq_k`` keys in ``fmt`` can take (largest first):
    e^-G inside the normal range of P's format (``fmt`` for 16-bit inputs, else the compute
    format) by FAR_TAIL_NORMAL_MARGIN nats, and the output, about (seq_k - 1) e^-G times V's
    value here, FAR_TAIL_MIN_OUTPUT smallest normals or more."""
    p_format = fmt if fmt.precision < 24 else _compute_format(fmt)
    value = v_limit(fmt, seq_k) / 8.0
    top = min(-math.log(p_format.smallest_normal) - FAR_TAIL_NORMAL_MARGIN,
              math.log((seq_k - 1) * value / (FAR_TAIL_MIN_OUTPUT * fmt.smallest_normal)))
    return tuple(g for g in FAR_TAIL_GAPS if g <= top)


def _far_tail_recipes(fmt: FloatFormat, head_dim: int, seq_k: int,
                      end: int) -> tuple[ValueRecipe, ValueRecipe, ValueRecipe]:
    """Q, K and V of a far-tail case (see FAR_TAIL_GAPS), default scale: Q = 1; K = 0 but for the
    key at ``end`` (0 the first, 1 the last) of each head, whose entries are G / sqrt(D) (its score
    sqrt(D) of them: G, to within their rounding to ``fmt``); V = value but 0 at that key."""
    gaps = far_tail_gaps(fmt, seq_k) or FAR_TAIL_GAPS[-1:]
    value = _floor_to_format(v_limit(fmt, seq_k) / 8.0, fmt)
    q = ValueRecipe("constant", offset=1.0)
    k = ValueRecipe("key-spike", scale=0.0, gap=gaps[0] / math.sqrt(head_dim), count=end)
    v = ValueRecipe("key-spike", scale=0.0, offset=value, gap=-value, count=end)
    return q, k, v


def _negative_scale_recipes(fmt: FloatFormat, head_dim: int, roundoffs: tuple[float, float]
                            ) -> tuple[float, ValueRecipe, ValueRecipe]:
    """The negative-scale probe's scale and Q, K recipes (see NEGATIVE_SCALE): Q and K normal with a
    spread whose peak score, |scale| D (4 spread)^2, is NEGATIVE_SCALE_PEAK or, where that is past
    the tolerance's judgement for these roundoffs, TAME_MARGIN of it (_judged_peak)."""
    peak = min(NEGATIVE_SCALE_PEAK, _judged_peak(head_dim, *roundoffs))
    spread = math.sqrt(peak / (abs(NEGATIVE_SCALE) * head_dim)) / 4.0
    spread = min(float(f"{spread:.3g}"), qk_limit(fmt, head_dim, NEGATIVE_SCALE) / 8.0)
    recipe = ValueRecipe("normal", scale=spread)
    return NEGATIVE_SCALE, recipe, recipe


#: Three cases in four are "tamed": where their scores could be so large that the tolerance
#: gives up on them (a bound on a score's rounding error past ILL_CONDITIONED_ARGUMENT_ERROR:
#: an infinite tolerance, only the hull checked), the scale is cut so that the largest score
#: is TAME_MARGIN of that size.  The fourth keeps its scores whatever their size (huge ranges,
#: the overflow and NaN paths).  Without this, 27% and 35% of 150 float32 cases (seeds 1 and
#: 2, 2026-11-30; tests/test_strategies.py) had every row past that size: cases in which no
#: accuracy bug could show.  Tamed (at 48468c5): 6.0% and 7.3%.
WILD_ODDS = 4
TAME_MARGIN = 1.0 / 8.0


def _peak(r: ValueRecipe) -> float:
    """A rough bound on the largest |entry| of a Q or K recipe: four spreads past the offset,
    where outliers (always one at least) count with their own spread, ``gap`` times the scale."""
    if r.kind == "outliers":
        return abs(r.offset) + 4.0 * r.scale * (1.0 + r.gap)
    return abs(r.offset) + 4.0 * r.spread() + (abs(r.gap) if r.kind == "seq-drift" else 0.0)


def _judged_peak(head_dim: int, u_dot: float, u_c: float) -> float:
    """TAME_MARGIN of the largest |score| whose rounding error bound stays within
    ILL_CONDITIONED_ARGUMENT_ERROR, for a dot of ``head_dim`` products whose inputs round at
    ``u_dot`` (0 where they enter it unrounded) in a compute precision of ``u_c``."""
    return TAME_MARGIN * ILL_CONDITIONED_ARGUMENT_ERROR / (2.0 * u_dot + (head_dim + 3.0) * u_c)


def _tamed_scale(scale: float, q: ValueRecipe, k: ValueRecipe, head_dim: int, qk_bound: float,
                 roundoffs: tuple[float, float]) -> float | None:
    """A smaller scale that keeps every score well-conditioned for the target (see WILD_ODDS),
    or None where ``scale`` does already.  ``roundoffs``: the unit roundoffs of the target's
    dot-product inputs (0 when Q and K enter it unrounded) and of its compute precision."""
    limit = _judged_peak(head_dim, *roundoffs)
    peak = abs(scale) * head_dim * min(_peak(q), qk_bound) * min(_peak(k), qk_bound)
    if peak <= limit:
        return None
    return float(f"{scale * limit / peak:.2g}")


#: The many-heads probe's Q at slab levels: the top level's scores spread about this much,
#: the bottom one's SLAB_LEVELS_DECADES decades less, so that row maxima differ by tens to
#: thousands from one (batch, head) to another while every score stays well-conditioned.
SLAB_LEVELS_TOP_SCORE = 1000.0
SLAB_LEVELS_DECADES = 3.0


def _slab_levels_recipe(k: ValueRecipe, head_dim: int, scale: float, qk_bound: float) -> ValueRecipe | None:
    """Q of the many-heads probe: ``slab-levels`` with the spread that gives its top slabs
    scores of about ``SLAB_LEVELS_TOP_SCORE`` against this K (None where no Q can: a zero
    scale, or K all zeros).  A kernel whose programs carry their running maximum from one
    (batch, head) to the next underflows every row of a lower slab after a higher one; one
    that resets it, but not its sum or accumulator, mixes slabs whose outputs differ."""
    k_rms = math.hypot(k.spread(), k.offset)
    if scale == 0.0 or k_rms == 0.0:
        return None
    spread = SLAB_LEVELS_TOP_SCORE / (abs(scale) * math.sqrt(head_dim) * k_rms)
    spread = float(f"{min(spread, qk_bound / 8.0):.3g}")
    return ValueRecipe("slab-levels", scale=spread, gap=SLAB_LEVELS_DECADES)


def _sequence_lengths(draw: st.DrawFn, lo: int, hi: int, decode_hi: int) -> tuple[int, int, bool]:
    """(Nq, Nk, decode): equal, independent, one far past the other, or a decode step (each a
    quarter of the time; shrinks to equal).

    Under top-left causal, query rows past Nk see every key and the first rows see few: a
    kernel that decides per query tile (skip a tile that starts past the last key, stop at
    the diagonal) goes wrong only when whole tiles lie beyond the other length, which two
    independent lengths rarely give (13 of 600 causal examples had Nq >= Nk + 64).  So the
    third kind draws the shorter length from the lowest quarter of the range and the longer
    one at least 16 past it.

    The fourth is a decode step: at most ``DECODE_MAX_QUERIES`` queries against up to
    ``decode_hi`` keys (``DECODE_KEYS_FACTOR`` times ``hi``: the work is Nq * Nk, so the keys
    may run that much longer).  Kernels take another path there (split-KV "flash decoding":
    the keys cut into splits whose partial results are merged), which ordinary shapes never
    reach: independent lengths gave Nq = 1 in 9 of 300 examples, none with more than 128 keys.
    A decode step seldom takes the causal flag (one causal draw in ``DECODE_CAUSAL_ODDS``):
    top-left, it shows its queries the first few keys only (a decode step's causal mask is
    bottom-right: the mask recipe ``causal`` with offset Nk - Nq draws it).  But never would
    hide a kernel that drops the flag for one query, taking the query for the last position
    (bottom-right), whose output then weighs every key: in three 100-example searches (seeds
    1-3) only the float64 cells of two caught it (a blind mutant, 2026-12-03).  Split-KV paths
    then also get splits that see no key.
    """
    seq_k = draw(lengths(lo, hi))
    relation = draw(st.integers(0, 3))
    if relation == 0:
        return seq_k, seq_k, False
    if relation == 1:
        return draw(lengths(lo, hi)), seq_k, False
    if relation == 3:
        # One query (the shortest allowed) half the time, else up to DECODE_MAX_QUERIES.
        few = draw(st.booleans())
        seq_q = draw(lengths(lo, max(lo, min(hi, DECODE_MAX_QUERIES)))) if few else lo
        return seq_q, draw(lengths(lo, decode_hi)), True
    short = draw(lengths(lo, max(lo, hi // 4)))
    far = draw(lengths(min(hi, short + 16), hi))
    return ((far, short) if draw(st.booleans()) else (short, far)) + (False,)


def _head_counts(draw: st.DrawFn, c: "_AttentionConfig") -> tuple[int, int]:
    """(Hkv, group): Hkv K/V heads, each shared by ``group`` query heads; shrinks to (1, 1).

    Three head mappings behave differently: one K/V head per query head (MHA), one for all
    (MQA), and groups of 2 or more over 2 or more K/V heads.  Only the last tells the right
    mapping, h // group, from h % Hkv, and only there must a kernel that packs a group's query
    heads into one tile (a decode step's packed GQA) keep each head's mask, scale and output
    slot in order.  Drawn as Hkv then a group that fits, it is the rarest: (2, 2) alone under
    four query heads, 400 of 2000 cases, and 35 of them decode steps with one query, none of
    those with a mask that differs per head (2026-12-01).  So one case in ``GROUPED_ODDS``
    draws from it alone."""
    grouped = rare(draw, GROUPED_ODDS)  # shrinks to False: as drawn
    heads_kv = draw(st.integers(1, c.max_heads))
    group = draw(st.integers(1, c.max_heads // heads_kv)) if c.gqa else 1
    if grouped and c.gqa and c.max_heads >= 4:
        heads_kv = min(max(heads_kv, 2), c.max_heads // 2)
        group = max(2, min(group, c.max_heads // heads_kv))
    return heads_kv, group


def wide_probe_head_dim(dims: tuple[int, ...]) -> int | None:
    """The wide-head probe's head dim among ``dims``: the largest in (128, 256] that is not a power
    of two, else 256; None where none lies there (see WIDE_HEAD_PROBE_KEYS)."""
    return _odd_head_dim([d for d in dims if 128 < d <= 256], max)


def wider_probe_head_dim(dims: tuple[int, ...]) -> int | None:
    """The wider-head probe's head dim among ``dims``: the largest past 256 that is not a power
    of two, else the smallest past 256; None where none lies there (see WIDER_HEAD_MIN_DIM)."""
    return _odd_head_dim([d for d in dims if d >= WIDER_HEAD_MIN_DIM], min)


def _odd_head_dim(dims: list[int], else_pick) -> int | None:
    """The largest of ``dims`` that is not a power of two, else ``else_pick`` of them (None if empty)."""
    odd = [d for d in dims if d & (d - 1)]
    return max(odd) if odd else else_pick(dims, default=None)


def one_past_half_tiles(longest: int) -> int:
    """The causal-offset probe's shorter side for a longer one of ``longest`` (>= 2): one past the
    power of two at or below ``longest // 2`` (65 for 160; see CAUSAL_OFFSET_SIDES)."""
    return (1 << (max(1, longest // 2).bit_length() - 1)) + 1


def _past_powers_of_two(group: int) -> int:
    """``group`` query heads a K/V head, or 3/4 of it where it is a power of two from 4 up.

    With a group of 2**k, h // group is a shift, and a kernel that takes the group as the power
    of two below (a shift where a division is due) maps every head right.  A blind mutant that
    rounded the group down to a power of two lived through seeds 2 and 3 of 4 s a dtype
    (2026-12-06): the cpu profile's 4 query heads make groups of 2 over 2 K/V heads at most, and
    the many-heads probe's simplest case had groups of 16."""
    return 3 * group // 4 if group >= 4 and group & (group - 1) == 0 else group


def _differing_per_group(mask: MaskSpec, n_rows: int, n_cols: int) -> MaskSpec:
    """``mask`` made to differ from one group (head) to the next, for the cases drawn to show a
    mask read at the wrong head (B = Hq with a 3-d mask, a mask per query head of a GQA group):
    a staggered kind at stagger 0, key padding with one pad, a mask that hides nothing, and one
    whose kind fills the matrix (a leading block past the last key) are the same for every
    head, so those cases showed nothing (a blind mutant reading a 3-d mask as (B, Nq, Nk) lived
    through seeds 1 and 3 of the main job's 4 s a dtype, 2026-12-06).  Where the kind's own
    parameters cannot make the groups differ, a random mask of density 0.5 does."""
    if mask.kind in STAGGERED_KINDS and mask.stagger == 0:
        mask = replace(mask, stagger=1)
    elif mask.kind == "key-padding" and len(mask.pads) == 1:
        mask = replace(mask, pads=(mask.pads[0], (mask.pads[0] + 1) % (n_cols + 1)))
    if mask.kind == "random":  # its draws differ per group, unless it hides nothing or all
        return replace(mask, density=0.5) if _hides_all_or_none(mask) else mask
    if mask.kind == "single-unmasked":
        return mask
    rng = np.random.default_rng(0)  # unused by the kinds left: they draw no random numbers
    if (mask.keep(n_rows, n_cols, rng, 0) == mask.keep(n_rows, n_cols, rng, 1)).all():
        return MaskSpec("random", density=0.5)
    return mask


def _hides_all_or_none(mask: MaskSpec) -> bool:
    """Whether a mask's kind hides every entry or none (a random mask of density 1 or 0)."""
    return mask.kind == "random" and mask.density in (0.0, 1.0)


def _with_flip(mask: MaskSpec, n_rows: int, n_cols: int, at: tuple[int, int]) -> MaskSpec:
    """``mask`` with one entry inverted inside it (FLIP_ODDS), where its kind has a pattern (a
    random mask only when it hides nothing) and it has an inside: rows and columns 1 to n - 2,
    off the diagonal a causal or sliding-window mask keeps in its first group.  ``at``: two
    draws that pick the row and the column (0, 0: the first inside entry off the diagonal)."""
    if mask.kind not in FLIP_KINDS or (mask.kind == "random" and mask.density > 0) or min(n_rows, n_cols) < 3:
        return mask
    row, col = 1 + at[0] % (n_rows - 2), 1 + at[1] % (n_cols - 2)
    if mask.kind in DIAGONAL_KINDS and col == row + mask.offset:
        col = col + 1 if col + 1 <= n_cols - 2 else col - 1
        if col < 1:
            return mask
    return replace(mask, flips=((row, col),))


def _batch_as_heads(draw: st.DrawFn, batch: int, heads_kv: int, group: int,
                    c: "_AttentionConfig") -> tuple[int, int, int]:
    """(B, Hkv, group), with B = Hq = n >= 2 in about one case in ``COINCIDENCE_ODDS`` (n the
    larger of the drawn B and Hq, within max_batch and max_heads; the group kept where it divides
    n); shrinks to the drawn ones.  Such a case draws a 3-d (Hq, Nq, Nk) mask three times in
    four (see ``_attention_cases``): a kernel that reads a 3-d mask as (B, Nq, Nk) when its first dim
    is B indexes it by batch instead of by head, and drawn as any case the two came together in
    none of 1,500 (ref-naive-attention's float16 strategy, CPU profile, seeds 0-2, 2026-12-05;
    a blind mutant so wrong was caught in float16 only)."""
    same = rare(draw, COINCIDENCE_ODDS)  # shrinks to False: as drawn
    n = min(max(batch, heads_kv * group), c.max_batch, c.max_heads)
    if not same or n < 2:
        return batch, heads_kv, group
    return (n, n // group, group) if n % group == 0 else (n, n, 1)


def _coincident_lengths(draw: st.DrawFn, seq_q: int, seq_k: int, batch: int, heads_q: int, head_dim: int,
                        c: "_AttentionConfig") -> tuple[int, int]:
    """(Nq, Nk), one of them set equal to B, Hq or D in about one case in ``COINCIDENCE_ODDS``
    (where that value is a length the target allows and above 1); shrinks to the drawn ones.

    A kernel that tells its inputs' dims apart by their sizes takes the wrong branch only when
    two of them are equal: a rank-2 mask read as a (B, Nk) key-padding mask when Nq = B, a
    (Hq, Nq, Nk) one as (B, Nq, Nk), K read untransposed when Nk = D.  Where the sizes
    differ, such a kernel fails its shape check or broadcasts, and drawn sizes rarely agree
    (Nq = B = 2 in well under one case in a hundred)."""
    # Both choices drawn either way: Hypothesis shrinks towards fewer choices first.
    coincide = rare(draw, COINCIDENCE_ODDS)  # shrinks to False: as drawn
    side, dim = COINCIDENCES[draw(st.integers(0, len(COINCIDENCES) - 1))]
    if not coincide:
        return seq_q, seq_k
    value = {"batch": batch, "heads": heads_q, "head_dim": head_dim}[dim]
    if value < 2 or not c.min_seq <= value <= c.max_seq:
        return seq_q, seq_k
    return (value, seq_k) if side == "q" else (seq_q, value)


@st.composite
def _attention_cases(draw: st.DrawFn, c: _AttentionConfig) -> AttentionCase:
    fmt = draw(st.sampled_from(c.formats))
    batch = draw(st.integers(1, c.max_batch))
    heads_kv, group = _head_counts(draw, c)
    batch, heads_kv, group = _batch_as_heads(draw, batch, heads_kv, group, c)
    seq_q, seq_k, decode = _sequence_lengths(draw, c.min_seq, c.max_seq, c.decode_max_keys)
    head_dim = _draw_head_dim(draw, c.head_dims)
    if c.probe is not None:
        head_dim = _probe_head_dim(head_dim, c.head_dims)
    seq_q, seq_k = _coincident_lengths(draw, seq_q, seq_k, batch, heads_kv * group, head_dim, c)
    probe = draw(st.integers(0, PROBE_ODDS - 1))  # shrinks to 0: no probe
    levels = pair_masks = False
    if c.probe is not None:
        probe = _PROBE_DRAWS.get(c.probe, 0)
    absorb = probe == PROBE_ODDS - 3 and c.absorption and c.max_seq >= ABSORPTION_MIN_KEYS
    if absorb:
        # The longer the rows, the more blocks are dropped: the upper half of the profile,
        # the longest first (the probe's simplest case is its strongest).
        # The longest is odd: a ragged last block for every block width, which holds the spike
        # in the (batch, head) pairs that have it last.
        low = max(ABSORPTION_MIN_KEYS, c.max_seq // 2)
        seq_k = largest_first(draw, low, c.max_seq - 1 + c.max_seq % 2)
        heads_kv = max(heads_kv, min(ABSORPTION_KV_HEADS, c.max_heads))  # both spike ends, likely
        group = 1
    # One absorption case in two drawn at random is a far-tail case (False first: it shrinks to
    # absorption); forced, the probe decides.  Drawn for every case, so a case costs as many choices.
    far_tail = draw(st.booleans()) if c.probe is None else c.probe == "far-tail"
    far_tail = far_tail and absorb
    long_side, full_keys = None, False
    if probe == PROBE_ODDS - 1:
        sides = [side for side, top in (("keys", c.mid_keys_max), ("queries", c.mid_queries_max)) if top > c.max_seq]
        if c.probe in ("mid-keys", "mid-queries"):
            sides = [c.probe[len("mid-"):]]
        long_side = draw(st.sampled_from(sides)) if sides else None  # shrinks to keys
    if long_side is not None:
        # One probe case in three, and its simplest case (the one the probe round tries), is the
        # longest side against the most of the other; the rest at the edges of lengths.  Drawn at
        # random, only the queries' side (as before 2026-12-01): a failure then shrinks to few keys.
        full = draw(st.integers(0, 2)) == 0
        full_keys = full and c.probe == "mid-keys"
        if long_side == "keys":
            # Many key blocks (a few thousand keys; MID_KEYS_MAX is one past a power of two).
            seq_k = c.mid_keys_max if full_keys else draw(lengths(c.max_seq + 1, c.mid_keys_max))
            seq_q = min(c.max_seq, MID_KEYS_MAX_QUERIES) if full_keys else min(seq_q, MID_KEYS_MAX_QUERIES)
        else:
            # Many query tiles, each against a few keys (see MID_QUERIES_MAX).  The longest is a
            # power of two: an exact multiple of every power-of-two tile, where a grid of
            # Nq // BLOCK_M + 1 tiles runs one too many and a last-tile test of
            # Nq % BLOCK_M != 0 takes the wrong branch.
            top = 1 << (c.mid_queries_max.bit_length() - 1)
            seq_q = top if full and top > c.max_seq else draw(lengths(c.max_seq + 1, c.mid_queries_max))
            seq_k = min(c.max_seq, MID_QUERIES_MAX_KEYS) if full else min(seq_k, MID_QUERIES_MAX_KEYS)
        # Either way the rest of the case is kept small.
        batch, heads_kv, group = 1, min(heads_kv, 2), min(group, 2)
        head_dim = _small_head_dim(head_dim, c.head_dims, MID_KEYS_MAX_HEAD_DIM)
    elif probe == PROBE_ODDS - 2 and c.many_heads:
        # Many (batch, head) pairs: a persistent grid's programs each take several.  The
        # most batches and K/V heads first: the probe's simplest case has the most pairs,
        # and Q at slab levels (see _slab_levels_recipe).
        levels = draw(st.integers(0, 1)) == 0
        # And, as levels, one time in two (the simplest case too), a random mask of its own for
        # every pair (PAIR_MASK_DENSITY): a mask read at another pair's offset, or once for a
        # packed group of query heads, shows.
        pair_masks = draw(st.integers(0, 1)) == 0
        batch = largest_first(draw, 1, MANY_HEADS_MAX_BATCH)
        # The group before the K/V heads, which give way to it under MANY_HEADS_MAX_PAIRS:
        # groups of 3 and more with 2 K/V heads and more (h // group, not h % Hkv) need 6
        # query heads, more than the size profiles give.
        group = largest_first(draw, 1, MANY_HEADS_MAX_GROUP) if c.gqa else 1
        group = max(1, min(group, c.many_heads_pairs // (2 * batch)))  # two K/V heads where it can
        group = _past_powers_of_two(group)
        heads_kv = largest_first(draw, 1, MANY_HEADS_MAX_KV_HEADS)
        heads_kv = max(1, min(heads_kv, c.many_heads_pairs // (batch * group)))
        # The longest first: with one key every query's output is that key's value, whatever Q
        # and K hold, so a pair's misread Q or K would not show.
        # Forced (the probe round) only: a failure drawn at random shrinks to the shortest.
        top = max(c.min_seq, min(c.max_seq, MANY_HEADS_MAX_SEQ))
        if c.probe == "many-heads":
            seq_k, seq_q = largest_first(draw, c.min_seq, top), largest_first(draw, c.min_seq, top)
        else:
            seq_k, seq_q = min(seq_k, top), min(seq_q, top)
        head_dim = _small_head_dim(head_dim, c.head_dims, LONG_KEY_MAX_HEAD_DIM)
    elif c.probe == "grid-heads":
        # More pairs than a grid axis holds: the most first, all on the batch first (the second
        # or third grid axis of any kernel that gives the batch, or batch x heads, one).
        pairs = c.grid_pairs[-1 - draw(st.integers(0, len(c.grid_pairs) - 1))]
        axis = draw(st.sampled_from(c.grid_axes))
        top = max(c.min_seq, min(c.max_seq, GRID_HEADS_MAX_SEQ))
        seq_k, seq_q = largest_first(draw, c.min_seq, top), largest_first(draw, c.min_seq, top)
        head_dim = _small_head_dim(head_dim, c.head_dims, GRID_HEADS_MAX_HEAD_DIM)
        shared = c.gqa and draw(st.booleans())  # the query heads' K/V: one each, or shared (MQA)
        if axis == "batch":
            batch, heads = pairs, 1
        elif axis == "heads":
            batch, heads = 1, pairs
        else:
            batch = 1 << (pairs.bit_length() // 2)
            heads = -(-pairs // batch)
        heads_kv, group = (1, heads) if shared else (heads, 1)
    elif c.probe == "block-ends":
        # See BLOCK_ENDS_MAX_KEYS: few queries and heads against many keys, every tile full.
        seq_k = full_tiles_for(c.min_seq, min(BLOCK_ENDS_MAX_KEYS, max(c.max_seq, c.mid_keys_max)), fmt.name)
        decode = False
        seq_q = max(c.min_seq, min(seq_q, BLOCK_ENDS_QUERIES))
        batch, heads_kv, group = 1, min(heads_kv, 2), min(group, 2)
        head_dim = _small_head_dim(head_dim, c.head_dims, MID_KEYS_MAX_HEAD_DIM)
    elif c.probe == "causal-offset":
        # The longest side at max_seq, the other one past the power of two at or below half of
        # it (see CAUSAL_OFFSET_SIDES).
        longer = draw(st.sampled_from(CAUSAL_OFFSET_SIDES))
        longest, shorter = c.max_seq, max(c.min_seq, one_past_half_tiles(c.max_seq))
        if shorter == longest:
            shorter = longest - 1
        seq_q, seq_k = (shorter, longest) if longer == "keys" else (longest, shorter)
        decode = False
    elif c.probe in ("wide-head", "wider-head"):
        # See WIDE_HEAD_PROBE_KEYS (and WIDER_HEAD_MIN_DIM: past WIDE_HEAD_DIM, the keys of such
        # a case, WIDE_HEAD_MAX_SEQ).
        wider = c.probe == "wider-head"
        seq_k = max(c.min_seq, min(c.max_seq, WIDE_HEAD_MAX_SEQ if wider else WIDE_HEAD_PROBE_KEYS))
        seq_q = seq_k if c.causal_square_only or seq_k < 2 else one_past_half_tiles(seq_k)
        head_dim = (wider_probe_head_dim if wider else wide_probe_head_dim)(c.head_dims)
        decode = False
        batch, heads_kv, group = 1, min(heads_kv, 2), min(group, 2)
    elif c.probe in ("masked-lead", "masked-tail"):
        # The longest keys first (see MASKED_KEYS_MAX); past max_seq the rest is kept small.
        seq_k, decode = largest_first(draw, max(c.min_seq, 2), max(c.max_seq, c.masked_keys_max)), False
        # masked-tail: two queries at least, one that keeps its live quarter and a dead row
        # (DEAD_ROWS_ODDS), a query whose every key block (or split) is empty.  masked-lead keeps
        # the drawn queries, one in its simplest case: a decode step, a kernel's split-KV decode
        # path, which must apply the mask too (with two queries there, a decode path that dropped
        # the mask lived 49 and 63 examples at seeds 3 and 4 of the main job's 4 s a dtype, where
        # one query killed it in 14 and 5; red team, 2026-12-06).
        seq_q = max(seq_q, 2) if c.probe == "masked-tail" else seq_q
        if seq_k > c.max_seq:
            seq_q = min(seq_q, MID_KEYS_MAX_QUERIES)
            batch, heads_kv, group = 1, min(heads_kv, 2), min(group, 2)
            head_dim = _small_head_dim(head_dim, c.head_dims, MID_KEYS_MAX_HEAD_DIM)
    elif c.probe == "many-tiles":
        # Many query tiles against many key blocks over many pairs: the longest first, square
        # first (Nq about half of Nk is the other: causal then cuts the blocks on another diagonal).
        seq_k = largest_first(draw, TILES_MIN_SEQ, c.tiles_seq)
        seq_q = draw(st.sampled_from((seq_k, seq_k // 2 + 1)))
        decode = False
        pairs = tiles_pairs(c.tiles_seq)
        batch = largest_first(draw, 1, min(2, c.max_batch))
        group = largest_first(draw, 1, 2) if c.gqa else 1
        heads_kv = max(1, pairs // (batch * group))
        # The widest head dim up to TILES_MAX_HEAD_DIM first: D = 1 makes each score one product.
        dims = _probe_dims([d for d in c.head_dims if d <= TILES_MAX_HEAD_DIM] or [min(c.head_dims)])
        head_dim = draw(st.sampled_from(dims[::-1]))
    elif c.probe == "wide-offsets":
        # One batch entry of a few heads, Nq = Nk, repeated along the heads below.  The widest
        # head dim first (the fewest heads); a dim whose heads would pass the target's pair limit
        # at every allowed length gives way to the widest.
        batch, group, decode = 1, 1, False
        heads_kv = draw(st.sampled_from(WRAP_REVEALING_COUNTS))
        dims = _probe_dims([d for d in c.head_dims if d <= WIDE_HEAD_DIM])
        head_dim = draw(st.sampled_from(dims[::-1]))
        if wide_min_seq(head_dim, c.wide_max_pairs, c.wide_elements) > c.wide_seq[1]:
            head_dim = max(dims)
        low = max(c.wide_seq[0], wide_min_seq(head_dim, c.wide_max_pairs, c.wide_elements))
        seq_q = seq_k = draw(lengths(low, max(low, c.wide_seq[1])))
    if head_dim > WIDE_HEAD_DIM:
        # Rows this wide cost the oracle's exact fallback seconds each: keep the rest small.
        seq_q, seq_k = min(seq_q, WIDE_HEAD_MAX_SEQ), min(seq_k, WIDE_HEAD_MAX_SEQ)
        if c.probe == "causal-offset" and seq_q == seq_k > 1:  # keep the two lengths apart
            seq_q, seq_k = (one_past_half_tiles(seq_q), seq_k) if seq_q <= seq_k else (seq_q, one_past_half_tiles(seq_k))
        batch, heads_kv, group = 1, min(heads_kv, 2), min(group, 2)
    heads_q = heads_kv * group
    scale = draw(_scales())
    if c.probe == "zero-scale":
        scale = 0.0
    if scale == 0.0:
        # Within the grid probe's own cap on the lengths (its pair count follows from it).
        seq_k = max(seq_k, min(GRID_HEADS_MAX_SEQ if c.probe == "grid-heads" else c.max_seq, ZERO_SCALE_MIN_KEYS))
    if c.probe == "negative-scale":
        seq_k, seq_q = max(seq_k, min(c.max_seq, NEGATIVE_SCALE_KEYS)), max(seq_q, min(c.max_seq, 4))
    if c.probe == "broadcast-mask":
        seq_q = seq_k = max(min(seq_q, seq_k), min(c.max_seq, BROADCAST_MASK_TILED_SEQ))
    if c.probe == "coincident-mask":
        batch = seq_q = min(c.max_batch, 3, c.max_seq)
        seq_k = max(seq_k, min(c.max_seq, COINCIDENT_MASK_KEYS))
    if c.probe in ("coincident-heads", "coincident-heads-3d"):
        batch = heads_kv = heads_q = min(c.max_batch, c.max_heads, COINCIDENT_HEADS)
        group, seq_k = 1, max(seq_k, min(c.max_seq, COINCIDENT_MASK_KEYS))
    if c.probe == "single-key":
        seq_k, seq_q = 1, max(seq_q, min(c.max_seq, SINGLE_KEY_QUERIES))
        batch, heads_kv, group = 1, min(2, c.max_heads), 1
        heads_q = heads_kv
    if c.probe == "aligned-specials":
        # See ALIGNED_SPECIAL_MIN_KEYS; a head dim of the mid-keys probe's at most (the oracle's
        # cost), the position of the NaNs drawn below.
        aligned = aligned_special_seqs(c.min_seq, c.max_seq)
        seq_q = seq_k = aligned[largest_first(draw, 0, len(aligned) - 1)]
        batch, heads_kv, group = 1, min(ALIGNED_SPECIAL_HEADS, c.max_heads), 1
        heads_q = heads_kv
        head_dim = _small_head_dim(head_dim, c.head_dims, MID_KEYS_MAX_HEAD_DIM)
    if c.probe == "nan-underflow":
        seq_k = max(seq_k, min(c.max_seq, NAN_UNDERFLOW_KEYS))
    if c.probe == "underflow-v":
        seq_k = max(seq_k, min(c.max_seq, UNDERFLOW_V_KEYS))
        seq_q = max(seq_q, min(c.max_seq, UNDERFLOW_V_QUERIES))
    if c.probe == "near-ties":
        # several queries: a query row's maximum is a copy for some query directions only
        seq_k = max(seq_k, min(c.max_seq, NEAR_TIES_KEYS))
        seq_q = min(max(seq_q, NEAR_TIES_MIN_QUERIES), NEAR_TIES_MAX_QUERIES, c.max_seq)
    if c.probe == "zero-scale" and head_dim <= WIDE_HEAD_DIM:
        seq_k = max(seq_k, min(ZERO_SCALE_PROBE_KEYS, max(c.max_seq, c.mid_keys_max)))
        if c.zero_scale_keys > seq_k:
            # See ZERO_SCALE_LONG_KEYS: the rest of the case small, as a mid-keys case's.
            seq_k, seq_q = c.zero_scale_keys, min(seq_q, MID_KEYS_MAX_QUERIES)
            batch, heads_kv, group = 1, min(heads_kv, 2), min(group, 2)
            heads_q = heads_kv * group
            head_dim = _small_head_dim(head_dim, c.head_dims, MID_KEYS_MAX_HEAD_DIM)

    # A long-key probe (rare): the key length itself comes from the seed, below.
    wide = draws_index_width(draw, c.index_lengths)
    if c.probe is not None:
        wide = c.probe == "index-width"

    # The many-tiles probe is causal first: its simplest case (the probe round's) is the
    # strongest, and with causal off every tile sees every key.  So is the forced mid-queries
    # probe: with Nq far past Nk, top-left causal shows the first queries a prefix and the rest
    # every key, where bottom-right shows most queries nothing, and a kernel that aligns the
    # diagonal the wrong way differs on every query tile.  The same one draw either way.
    causal_first = c.probe == "many-tiles" or (c.probe == "mid-queries" and not c.causal_square_only)
    causal = (draw(st.booleans()) != causal_first) if c.causal else False
    # A decode step takes the causal flag one time in DECODE_CAUSAL_ODDS (see _sequence_lengths);
    # drawn for every case, so that a decode step costs the choices any case does.
    decode_causal = rare(draw, DECODE_CAUSAL_ODDS)
    causal = causal and (decode_causal or not decode)
    if c.probe == "causal-offset":
        causal = True  # the probe itself (available only where caps take a causal flag)
    if causal and c.causal_square_only:
        # A mid-keys probe's keys are past max_seq; a many-tiles probe's are meant to be.
        seq_q = seq_k = seq_k if c.probe == "many-tiles" else min(seq_k, c.max_seq)
    mask, mask_shape, mask_layout = None, "qk", "contiguous"
    misread = False
    if c.bool_mask:
        # Drawn even when it is then dropped, so that causal=True does not cost
        # fewer choices than causal=False (Hypothesis shrinks towards fewer choices).
        # A mask two times in three (shrinks to none): masks are where most of the paths of a
        # kernel are, and a mask's kind, shape and layout each split the masked cases further.
        # With Nq = B (a coincidence, see _coincident_lengths), one time in two the case has a
        # mask, the rank-2 (Nq, Nk) one that a kernel telling its mask's dims apart by their sizes
        # reads as a (B, Nk) key-padding mask: drawn as any case, the two came together in about
        # one case in 500, and a blind mutant that did so lived through 400 (2026-12-05).
        confusable = draw(st.booleans()) and seq_q == batch >= 2
        # Likewise with B = Hq (see _batch_as_heads), the 3-d (Hq, Nq, Nk) mask three times in four.
        by_head = draw(st.integers(0, 3)) > 0 and batch == group * heads_kv >= 2 and not confusable
        # And one such case in two (the 3-d first: it shrinks to it) the 4-d (B, Hq, Nq, Nk) mask,
        # one for every (batch, head): with B = Hq a kernel that swaps the mask's batch and head
        # indices stays in bounds and reads (h, b) for (b, h).  Drawn as any case, B = Hq = 2 with
        # a 4-d mask came in 7 of 1,254 calls, and such a blind mutant lived through seeds 1 and 2
        # of 4 s a dtype (twelfth red team, 2026-12-06).
        by_head_4d = draw(st.booleans())
        # With groups of query heads (GQA), a mask of its own for each query head one time in two:
        # a kernel that packs a group's heads into one tile and loads the mask once, at the
        # group's first head, reads the wrong rows only there.  Drawn as any case, a mask that
        # differs over the query heads of a group came in a few cases in a hundred, and such a
        # blind mutant lived through 2 of 4 seeds of the main job's 3 s a dtype (2026-12-05).
        per_head = draw(st.booleans()) and group >= 2 and not (confusable or by_head)
        masked = draw(st.integers(0, 2)) > 0 or confusable or by_head or per_head
        mask = draw(mask_specs(seq_q, seq_k, MASK_KINDS[1:]))
        # One masked case in KEEP_ALL_ODDS has a mask that hides nothing (drawn as a random mask
        # it came in about one in 50): a kernel may skip such a mask, and must skip it rightly
        # (not, say, by remembering the verdict under the mask's address).
        if rare(draw, KEEP_ALL_ODDS):
            mask = MaskSpec("random", density=0.0)
        mask = mask if masked else None
        if mask is not None:
            # The rank first (3-d masks are the rarest shape), and for masks over keys the shapes
            # broadcast over queries as one more group, last: Hypothesis draws the first entries
            # of a sampled_from more often than the rest, and with that group first, two 100-example
            # cells (seed 1) held 2 masks of rank 3 each; with it last, 10 and 8.
            groups = (MASK_SHAPES_BY_RANK + ((QUERY_BROADCAST_SHAPES,) if mask.kind in KEY_MASK_KINDS else ())
                      + ((KEY_BROADCAST_SHAPES,) if mask.kind in KEY_BROADCAST_KINDS and c.mask_key_broadcast else ()))
            mask_shape = draw(st.sampled_from(draw(st.sampled_from(groups))))
            mask_shape = "qk" if confusable else ("bhqk" if by_head_4d else "hqk") if by_head else mask_shape
            if per_head:
                mask_shape = draw(st.sampled_from(PER_HEAD_MASK_SHAPES))
            if by_head or per_head:
                mask = _differing_per_group(mask, seq_q, seq_k)
            if c.probe in ("grid-heads", "many-tiles", "wide-offsets"):
                # Masks shared by every pair: one random stream, not one a pair.
                mask_shape = GRID_HEADS_MASK_SHAPES.get(mask_shape, mask_shape)
        if pair_masks:
            mask, mask_shape = MaskSpec("random", density=PAIR_MASK_DENSITY), "bhqk"
        if c.probe == "broadcast-mask":
            shapes = KEY_BROADCAST_SHAPES if c.mask_key_broadcast else QUERY_BROADCAST_SHAPES
            mask, mask_shape, causal = MaskSpec("random", density=0.5), draw(st.sampled_from(shapes)), False
        if c.probe == "coincident-mask":
            mask, mask_shape, causal = MaskSpec("random", density=0.5), "qk", False
        if c.probe in ("coincident-heads", "coincident-heads-3d"):
            mask, mask_shape, causal = MaskSpec("random", density=0.5), COINCIDENT_HEADS_MASKS[c.probe], False
        mask_layout = draw(st.sampled_from(c.mask_layouts))
        if causal and not c.causal_with_mask:
            mask, mask_shape = None, "qk"
        # A mask a kernel could misread (its dims told apart only by their sizes: B = Nq at rank
        # 2, B = Hq at rank 3; or one mask a group of query heads where each has its own), however
        # drawn, keeps its rank: expanded to (B, Hq, Nq, Nk) it would not.
        misread = mask is not None and ((mask_shape == "qk" and seq_q == batch >= 2)
                                        or (mask_shape in ("hqk", "bhqk") and batch == group * heads_kv >= 2)
                                        or (mask_shape in PER_HEAD_MASK_SHAPES and group >= 2))
        if misread and mask_layout == "expanded":
            mask_layout = "contiguous"
        if c.probe in ("masked-lead", "masked-tail"):
            # All but the last (lead) or the first (tail) quarter of the keys masked in every row
            # (see MASKED_LEAD_VISIBLE_SHARE), on the drawn shape where it takes such a mask.
            causal, masked_keys = False, seq_k - max(1, seq_k // MASKED_LEAD_VISIBLE_SHARE)
            if c.probe == "masked-lead":
                mask = MaskSpec("leading-block", block=masked_keys, stagger=1)
                mask_shape = "qk" if mask_shape in BROADCAST_MASK_SHAPES else mask_shape
            else:
                mask = MaskSpec("key-padding", pads=(masked_keys,), side="end")
                mask_shape = "qk" if mask_shape in KEY_BROADCAST_SHAPES else mask_shape
        # Self-attention's pattern (see SELF_ATTENTION_ODDS) and an entry off the mask's pattern
        # (see FLIP_ODDS); drawn for every case (the same choices either way), where the mask
        # holds a pattern and an inside and no probe's lengths are at stake.
        self_attention = draw(st.integers(0, SELF_ATTENTION_ODDS - 1)) == 0  # shrinks to True
        flip, flip_at = rare(draw, FLIP_ODDS), draw(st.tuples(st.integers(0, 2**16), st.integers(0, 2**16)))
        broadcast = mask_shape in BROADCAST_MASK_SHAPES
        square = min(seq_q, seq_k)
        no_probe = c.probe is None and probe < min(_PROBE_DRAWS.values())  # the draws below take no probe
        if (broadcast and mask is not None and no_probe and square >= 2 and scale != 0.0 and not _hides_all_or_none(mask)
                and draw(st.integers(0, SQUARE_BROADCAST_ODDS - 1)) > 0):  # shrinks to not square
            # A mask broadcast over the queries, (..., 1, Nk), or over the keys, (..., Nq, 1), on
            # square lengths (the shorter), where it hides some entries and not all: only there
            # does a kernel that tells the singleton axis by the sizes (or reads a key-broadcast
            # column as a key-padding row) take the right shape and the wrong axis.  Drawn as any
            # case, the two met only where the mask was trivial (Nq = Nk = 1, or all True), and a
            # blind mutant that read an (N, 1) mask as (1, N) when Nq = Nk lived through seeds 1-3
            # of 4 s a dtype (ninth red team, 2026-12-06).  Wherever no probe was drawn, all but one
            # time in SQUARE_BROADCAST_ODDS (at one in two the mutant still lived through 273
            # examples at 20 s a dtype, seed 1); the rest keep Nq != Nk, where such a misreading
            # reads out of bounds.  The broadcast-mask probe tries one such mask in every cell.
            seq_q = seq_k = square
        if mask is not None and no_probe and not broadcast:
            if (self_attention and mask.kind in DIAGONAL_KINDS and square >= 3 and scale != 0.0
                    and not misread):
                # See SELF_ATTENTION_ODDS.  The shorter length for both: no case grows (with the
                # keys' length for both, the attention cells' examples fell by 40%, main job,
                # 2026-12-06); not where the keys have a floor (scale 0, a probe drawn or forced)
                # or the heads' masks are meant to differ.
                seq_q = seq_k = square
                mask = replace(mask, offset=0, stagger=0)
            if flip:
                mask = _with_flip(mask, seq_q, seq_k, flip_at)
        # A dead query row over the mask (see DEAD_ROWS_ODDS), where the mask has a query axis
        # and another query row to keep alive; drawn for every case (the same choices either way).
        dead = rare(draw, DEAD_ROWS_ODDS) or pair_masks or c.probe in ("masked-lead", "masked-tail")
        place = draw(st.sampled_from(DEAD_ROW_PLACES))
        if dead and mask is not None and seq_q >= 2 and mask_shape not in QUERY_BROADCAST_SHAPES:
            row = {"last": seq_q - 1, "first": 0, "middle": seq_q // 2}[place]
            mask = replace(mask, dead_rows=(row,))
        if mask is None:
            mask_layout = "contiguous"
    if c.probe == "masked-tail":
        # One time in two (the mask first), and always where the target takes no boolean mask, the
        # tail is hidden by the causal flag instead: top-left, query i sees keys 0 to i, so with at
        # most a quarter as many queries as keys every row's last three quarters are invisible.  A
        # kernel's causal path for long keys (a split that sees nothing, blocks skipped past the
        # diagonal) is then checked where targets without a boolean mask (SDPA's flash) run too.
        by_causal = draw(st.booleans())
        if c.causal_offset and (by_causal or not c.bool_mask):
            causal, mask, mask_shape, mask_layout = True, None, "qk", "contiguous"
            seq_q = min(seq_q, max(1, seq_k // MASKED_LEAD_VISIBLE_SHARE))

    effective = 1.0 / math.sqrt(head_dim) if scale is None else scale
    qk_bound = qk_limit(fmt, head_dim, effective)
    q = draw(value_recipes(fmt, QK_VALUE_KINDS, qk_bound))
    k = draw(value_recipes(fmt, K_VALUE_KINDS, qk_bound))
    v = draw(value_recipes(fmt, V_VALUE_KINDS, v_limit(fmt, seq_k)))
    if misread and mask is not None and v.kind not in MISREAD_MASK_V_KINDS:
        # A case whose mask could be misread keeps V spread out: a constant V hides which keys a
        # query saw, a full-range or cancelling V makes the output's tolerance wide enough to
        # hide another mask's keys.  The 8 such cases of a blind mutant's two 100-example cells
        # (float16, float32, seed 1, 2026-12-05) had a cancelling or full-range V, or a mask
        # expanded to 4-d, and none failed.
        v = ValueRecipe("normal", scale=1.0)
    if rare(draw, ZERO_RUN_ODDS):
        # See ZERO_RUN_ODDS: one of Q, K, V (V first: a zero block of V skipped as padding).
        which = draw(st.sampled_from(("v", "k", "q")))
        if misread and mask is not None and which == "v":
            which = "k"  # a V zero over a run of keys would hide which of them a misread mask lets in
        start, share = draw(st.sampled_from(ZERO_RUN_STARTS)), draw(st.sampled_from(ZERO_RUN_SHARES))
        base = {"q": q, "k": k, "v": v}[which]
        run = ValueRecipe("zero-run", scale=base.spread(), offset=base.offset, rate=start, gap=share)
        q, k, v = (run if name == which else r for name, r in (("q", q), ("k", k), ("v", v)))
    if c.probe == "zero-scale" and seq_k >= ZERO_SCALE_PROBE_KEYS:
        # See ZERO_SCALE_PROBE_KEYS: V drawn as usual, then replaced (the same choices).
        v = ValueRecipe("zero-run", scale=0.25, offset=1.0, rate=0.0, gap=ZERO_SCALE_ZERO_SHARE)
    if c.probe in ("masked-lead", "masked-tail") and v.kind == "normal":
        # Plain V (the simplest case's) rises along the keys by MASKED_V_RISE spreads: the live
        # quarter's mean then differs from that of any other set of keys by a spread or more,
        # where a centred V's means over many keys all lie near 0 and a read of the masked keys
        # is near the tolerance of the output's cancellation.
        rise = min(MASKED_V_RISE * v.scale, v_limit(fmt, seq_k) / 2.0)
        v = ValueRecipe("seq-drift", scale=v.scale, offset=v.offset, gap=float(f"{rise:.3g}"))
    if levels:
        q = _slab_levels_recipe(k, head_dim, effective, qk_bound) or q
    if not rare(draw, WILD_ODDS) and effective != 0.0:
        tamed = _tamed_scale(effective, q, k, head_dim, qk_bound, c.roundoffs[fmt.name])
        scale = scale if tamed is None else tamed
    if c.probe == "negative-scale":
        scale, q, k = _negative_scale_recipes(fmt, head_dim, c.roundoffs[fmt.name])
    if c.probe == "block-ends":
        # See BLOCK_ENDS_MAX_KEYS: drawn as usual, then replaced (the same choices).
        scale, causal, mask, mask_shape, mask_layout = None, False, None, "qk", "contiguous"
        lift = (math.log(seq_k) + 1.0) / math.sqrt(head_dim)  # scores: (1 / sqrt(D)) * D * gap
        q = ValueRecipe("constant", offset=1.0)
        k = ValueRecipe("key-spike", scale=BLOCK_ENDS_K_SPREAD, gap=float(f"{lift:.3g}"),
                        count=KEY_SPIKE_AT.index("block-ends"))
        v = position_distinct(ValueRecipe("normal", scale=1.0), fmt)
    if c.probe == "underflow-v":
        # See UNDERFLOW_V_SIGNS: drawn as usual, then V replaced (the same choices).
        signs = draw(st.sampled_from(UNDERFLOW_V_SIGNS))
        v = ValueRecipe("near-underflow", scale=fmt.smallest_normal, gap=2 * fmt.smallest_subnormal,
                        count=UNDERFLOW_SIGNS.index(signs))
    if c.probe == "near-ties":
        jitter = draw(st.sampled_from(NEAR_TIES_JITTERS))
        causal, scale = False, None
        q, v = ValueRecipe("normal", scale=1.0), ValueRecipe("normal", scale=1.0)
        k = ValueRecipe("key-ties", scale=1.0, count=3, gap=jitter)

    shapes = (
        ("q", (batch, heads_q, seq_q, head_dim)),
        ("k", (batch, heads_kv, seq_k, head_dim)),
        ("v", (batch, heads_kv, seq_k, head_dim)),
    )
    kinds = special_kinds(fmt, c.special_values)
    specials = tuple(draw(st.lists(special_specs(kinds, shapes), max_size=MAX_SPECIALS)))
    if c.probe == "single-key":
        # See SINGLE_KEY_QUERIES: a NaN query row in the first head, a NaN key in the second; V
        # past float16's range where the format allows it (SINGLE_KEY_V).
        scale, causal, mask, mask_shape, mask_layout = None, False, None, "qk", "contiguous"
        q = k = ValueRecipe("normal", scale=1.0)
        big = min(SINGLE_KEY_V, _floor_to_format(v_limit(fmt, seq_k) / 2.0, fmt))
        v = ValueRecipe("uniform", scale=big / 2.0, offset=big)
        specials = ((SpecialSpec("nan", "q", (0, 0, min(1, seq_q - 1), 0)),)
                    + ((SpecialSpec("nan", "k", (0, heads_kv - 1, 0, 0)),) if heads_kv >= 2 else ()))
    if c.probe in ("block-ends", "underflow-v"):
        specials = ()
    if c.probe == "nan-underflow":
        # See NAN_UNDERFLOW_GAP: drawn as usual, then replaced (the same choices).
        scale, causal, mask, mask_shape, mask_layout = None, False, None, "qk", "contiguous"
        q = ValueRecipe("constant", offset=1.0)
        k = ValueRecipe("key-spike", scale=0.0, gap=float(f"{NAN_UNDERFLOW_GAP / math.sqrt(head_dim):.4g}"),
                        count=KEY_SPIKE_AT.index("first"))
        v = ValueRecipe("normal", scale=1.0)
        specials = (SpecialSpec("nan", "v", (0, 0, seq_k - 1, 0)),)
    if c.probe == "aligned-specials":
        scale, causal, mask, mask_shape, mask_layout = None, False, None, "qk", "contiguous"
        q = k = v = ValueRecipe("normal", scale=1.0)
        at = draw(st.integers(0, seq_k - 1))
        specials = ((SpecialSpec("nan", "q", (0, 0, at, at % head_dim)),)
                    + ((SpecialSpec("nan", "k", (0, 1, (at + seq_k // 2) % seq_k, 0)),) if heads_kv >= 2 else ()))
    if c.probe in ("wide-head", "wider-head"):
        # See WIDE_HEAD_PROBE_KEYS: the causal flag and a mask where allowed, the caller's scale.
        scale, causal, specials = WIDE_HEAD_SCALE_FACTOR / math.sqrt(head_dim), c.causal, ()
        mask, mask_shape, mask_layout = None, "qk", "contiguous"
        if c.bool_mask and (c.causal_with_mask or not causal):
            mask = MaskSpec("random", density=0.5)
        q = k = v = ValueRecipe("normal", scale=1.0)
    turn = ATTENTION_PROBES.index(c.probe) if c.probe and c.probe not in PLAIN_LAYOUT_PROBES else None
    layouts = tuple(draw(st.sampled_from(_layouts_for(c, shape, fmt) if turn is None
                                         else probe_layout_order(_layouts_for(c, shape, fmt), turn + i)))
                    for i, (_, shape) in enumerate(shapes))
    if rare(draw, KV_PACKED_ODDS) and _kv_packed_allowed(c, shapes[1][1], fmt):
        layouts = (layouts[0], "kv-packed", "kv-packed")
    seed = draw(st.integers(0, _rng.SEED_MAX))
    if absorb:
        # B <= Nk / 4: the dropped weight, about (Nk / B) f u of the spike's, is then
        # several roundings, whatever the kernel's block width (up to B) is.
        # The widest first: every kernel block of up to B keys then adds under half an ulp.
        block = draw(st.sampled_from([b for b in ABSORPTION_BLOCKS if 4 * b <= seq_k][::-1] or [ABSORPTION_BLOCKS[0]]))
        fraction = draw(st.sampled_from(ABSORPTION_FRACTIONS))
        # Every key visible and no special values, so the spike reaches every query; the
        # spike's value opposite to every other key's (ends-opposed), so that what a kernel
        # drops from l and from the accumulator adds up in the output.
        scale, causal, mask, mask_shape, mask_layout, specials = None, False, None, "qk", "contiguous", ()
        # The spike at the first key (a kernel walking the keys forward sees the maximum first
        # and every later block far below it) or the last (the tail's sum is then rescaled by
        # e^-G at once, and a kernel that skips the ragged last key block loses it): absorption
        # cases put it at each end in turn over the (batch, head) pairs, the first in pair 0 in
        # the simplest case; a far-tail case at one end, the same in K and V.
        end = draw(st.integers(0, 1))
        q, k = _absorption_recipes(fmt, head_dim, block, fraction, end)
        value = min(max(v.scale, ABSORPTION_MIN_V_VALUE), v_limit(fmt, seq_k) / 8.0)
        v = ValueRecipe("ends-opposed", scale=value / 16.0, offset=value)
        if far_tail:
            q, k, v = _far_tail_recipes(fmt, head_dim, seq_k, end)
    if full_keys:
        # Every key visible to every query (a top-left causal flag would leave 16 of them), at
        # the default scale, no special value: see GENTLE_RISE.
        scale, causal, mask, mask_shape, mask_layout, specials = None, False, None, "qk", "contiguous", ()
        q, k, v = _gentle_rise_recipes(head_dim)
    if wide:
        seq_k = index_width_length(c.index_lengths, seed)
        # Within the target's head limit (c.max_heads, from caps.max_heads): two K/V heads where it
        # allows them, grouped by two where it allows four.
        heads_kv = min(LONG_KEY_KV_HEADS, c.max_heads)
        batch, heads_q = 1, heads_kv * max(1, min(group, 2, c.max_heads // heads_kv))
        seq_q = min(seq_q, LONG_KEY_MAX_QUERIES)
        head_dim = _small_head_dim(head_dim, c.head_dims, LONG_KEY_MAX_HEAD_DIM)
        scale, causal, mask, mask_shape, mask_layout, specials = None, False, None, "qk", "contiguous", ()
        q, k, v = _long_key_recipes(q, k, v, fmt, seq_k, head_dim, c.roundoffs[fmt.name][1])
        # The layouts were drawn for the ordinary shapes: redraw none, keep those still allowed,
        # but K and V stored once for both heads (head-broadcast) would make the other head's
        # rows the same numbers, where a wrapped key offset lands: no misread could show (a
        # test of the probe saw it once Hypothesis drew so, 2026-12-03).
        long_shapes = ((batch, heads_q, seq_q, head_dim), (batch, heads_kv, seq_k, head_dim))
        layouts = tuple(layout if layout in _layouts_for(c, long_shapes[i > 0], fmt)
                        and not (i > 0 and layout == "head-broadcast") else "contiguous"
                        for i, layout in enumerate(layouts))
    if c.probe == "score-floor":
        # See SCORE_HEADROOM: scores -SCORE_FLOOR_SCALE D a**2, a the largest Q and K entry allowed.
        scale, specials = SCORE_FLOOR_SCALE, ()
        a = _floor_to_format(qk_limit(fmt, head_dim, scale), fmt)
        q, k = ValueRecipe("constant", offset=a), ValueRecipe("constant", offset=-a)
        value = _floor_to_format(min(max(v.scale, ABSORPTION_MIN_V_VALUE), v_limit(fmt, seq_k) / 8.0), fmt)
        v = ValueRecipe("uniform", scale=value / 2.0, offset=value)
    if c.probe == "empty-batch":
        batch, specials = EMPTY_BATCH, ()  # see EMPTY_BATCH: the rest as drawn
    tile = 1
    if c.probe == "wide-offsets":
        layouts = ("contiguous",) * 3  # the engine makes the repetitions, contiguous
        # Rows that tell positions apart and peaked scores, as the long-key probe's, at the
        # default scale: a constant Q, a zero scale or a NaN row would hide a misread (a Q read
        # from another head's rows of the same numbers); causal and masks stay.
        scale, specials = None, ()
        if mask is not None and _rows_weighing_keys(mask, causal, seq_q, seq_k) < WIDE_MIN_WEIGHING_ROWS:
            # A row with one visible key outputs that key's V row whatever Q was read, and one
            # with none outputs 0: a single-unmasked mask (a CI run drew one, 2026-12-05) and a
            # leading block of every key under the causal flag (CI, 2026-12-07) let a Q offset
            # that wrapped pass.
            mask, mask_shape, mask_layout = None, "qk", "contiguous"
        q, k, v = _long_key_recipes(q, k, v, fmt, seq_k, head_dim, c.roundoffs[fmt.name][1])
        tile = wide_repetitions(heads_q * min(seq_q, seq_k) * head_dim, c.wide_elements)
    spec = AttentionSpec(
        dtype=fmt.name,
        batch=batch,
        heads_q=heads_q,
        heads_kv=heads_kv,
        seq_q=seq_q,
        seq_k=seq_k,
        head_dim=head_dim,
        scale=scale,
        causal=causal,
        mask=mask,
        mask_shape=mask_shape,
        mask_layout=mask_layout,
        q=q,
        k=k,
        v=v,
        specials=specials,
        layouts=layouts,
        seed=seed,
        v_max=v_limit(fmt, seq_k),
        tile=tile,
    )
    return AttentionCase(spec)
