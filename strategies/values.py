"""Value recipes: how the numbers of one softmax row, or of one Q/K/V tensor, are drawn.

A :class:`ValueRecipe` is a small, exact, JSON-able description (kind and a few
numbers); :meth:`ValueRecipe.sample` turns it into float64 numbers with a seeded
generator.  The caller clips to the dtype's finite range and rounds.

Kinds (each targets a known failure of softmax / attention kernels):

normal, uniform
    ``offset + scale * N(0,1)`` / ``offset + scale * U(-1,1)``; the scale is drawn
    log-uniformly from 1e-6 to the dtype's largest finite value, so both
    "everything equal" and "exp overflows without the max shift" are reached.
constant
    every entry equal: the exact answer is uniform, 1/n, and any rounding in
    ``x - max`` or the sum shows.
ties
    several entries equal to the row maximum: argmax-based shortcuts and
    online-softmax rescaling with equal running maxima.
dominant
    one entry exceeds the rest by ``gap``: a one-hot result whose small entries
    must underflow gracefully rather than become NaN.  The entry is at a random
    position (``count`` 0), the row's last (1) or its first (2).
cancellation
    a large offset with a spread of a few ulps of that offset: ``x - max`` is
    computed from nearly equal large numbers (e.g. 3e4 +- 1e-2 in float32).
near-max
    values within ``scale`` of +-max_finite: sums and differences overflow unless
    the kernel shifts by the maximum first.
very-negative
    every entry below -1.25e4: ``exp(x)`` underflows to 0 for all entries, so a
    kernel that does not subtract the max divides 0 by 0.
full-range
    magnitudes log-uniform over the whole normal range with both +-max present.
outliers
    FA3-style ``scale * (N(0,1) + gap * N(0,1) * Bernoulli(rate))``; at least one
    outlier is always present.
subnormal-output
    ``offset - U(0, scale)`` with one entry at ``offset``, where ``scale`` slightly
    exceeds ``-ln(smallest subnormal)``: some outputs land in the dtype's
    subnormal range, where flush-to-zero and poor exp implementations differ.
drift
    ``offset + scale * N(0,1)`` plus a linear trend that rises by ``gap`` (falls, when
    negative) from the first entry to the last: the row maximum moves on block after
    block (an online softmax rescales at every block, and a maximum taken over a prefix
    misses the peak by up to ``gap``), or stays in the first block (every later block's
    exponentials shrink).
plateau
    ``offset + scale * N(0,1)``, and the entries from position ``round(rate * n)`` on (at least
    one, at most ``n - 1``) raised by a step ``h``, just high enough that their exponentials,
    taken relative to the first part, sum past the largest finite value ``F`` of the
    statistics format: ``h = ln(F) - ln(count of them) + gap``, the level rounded up to the
    input format's grid.  ``count`` picks ``F``: 0, the format an online softmax keeps its
    running sum in (float64 for float64 input, float32 otherwise); 1, the input format.  A
    kernel whose maximum stays at the first part's overflows its sum: a lazy rescale that
    moves the running maximum only when a block beats it by more than a threshold (below
    ``ln(F)``, so that one block's sum cannot overflow: such a kernel is right on every row but
    one with thousands of entries on a step under its threshold), or a maximum taken over a
    prefix.  A correct one computes a near-uniform row over the plateau.
seq-drift
    (Q, K and V of attention) ``offset + scale * N(0,1)`` plus a trend along the sequence
    axis: every entry of position i gains ``gap * i / (n - 1)``.  In K, one query's scores
    then rise (or fall, with the sign of the sum of its entries) from the first key to the
    last, so its running maximum grows at every key block (the rescale of the accumulator by
    ``exp(m_old - m_new)`` runs each time, with every size of step), or stays in the first;
    in Q, the scores' size grows from one query tile to the next; in V, the values do.
    With ``rate`` > 0 the trend is geometric instead: position i gains ``gap * 2**-floor(rate
    * (n - 1 - i))``, the last ``gap`` and each earlier one at most an octave less, so a Q of
    16 positions at ``rate`` 0.8 spans 2**-12 to 1: its queries' scores rise along the keys by
    amounts over three decades, and every small-step threshold a kernel may test its running
    maximum's moves against lies within an octave of some query's step.
slab-levels
    (Q, K and V of attention) ``level * (offset + scale * N(0,1))`` where each (batch, head)
    slab draws its own level, from 1 down to about ``10**-gap`` (``gap`` decades, in whole
    octaves times a mantissa in [1, 2)): the slabs' scores,
    row maxima and sums differ by orders of magnitude, so state a kernel carries from one
    (batch, head) to the next (a persistent grid's running maximum) or a read of the wrong
    slab shows.
key-ties
    (K of attention only) ``offset + scale * N(0,1)``, and in every (batch, head) ``count``
    keys at distinct random positions replaced by one key: the slab's key farthest from the
    offset, moved KEY_TIE_BOOST times as far, each copy scaled by ``1 + gap * U(-1, 1)``.
    Every query's scores against the copies then tie, or nearly (``gap`` relative), and for
    the queries that point the copied key's way they are the row's maximum, in several key
    blocks at once: where a split-KV merge or an online rescale compares two blocks' maxima
    (a tie-break, a skipped rescale for "equal" maxima) the answer turns on bits.
key-spike
    (K of attention only) ``offset + scale * N(0,1)``, and one key of every (batch, head),
    the first (``count`` 0), the last (``count`` 1), either (``count`` 2: drawn for each
    (batch, head)) or alternately (``count`` 3: the first in (batch, head) pairs 0, 2, 4, ...,
    the last in 1, 3, 5, ...; ``count`` 4: the other way round; see ``group_recipes``) adds
    ``gap`` to each of its entries: with a constant Q, that key
    outscores all the others by the same margin (see the absorption probe in
    ``strategies.attention``).  Either end, because a kernel may walk the key blocks in
    either order.  In V (the far-tail probe), the same key's value moved by ``gap``:
    with ``scale`` 0 and ``gap = -offset``, 0 there and ``offset`` at every other key.
ends-opposed
    (V of attention only) ``-offset + scale * N(0,1)`` for every key but the first and the
    last of each (batch, head), which take ``+offset + scale * N(0,1)``: the absorption
    probe's V.  The spike key (at either end) then carries the opposite sign of every
    other key's value, so weight a kernel drops from its running sum and weight it drops
    from its accumulator move the output the same way instead of cancelling.
near-underflow
    (V of attention) magnitudes log-uniform from ``gap`` (twice the input format's smallest
    subnormal) to ``scale`` (its smallest normal times 1, 2, 4 or 8): of the binades drawn, the
    p - 1 subnormal ones against 1 to 4 normal ones, so that most entries are subnormal in the
    input format (from two in three, bfloat16's 7 binades against 4, up); signs mixed
    (``count`` 0), all positive (1) or all negative (2).  The output then lies near the
    format's smallest normal too, where a kernel that flushes subnormal values or products to
    zero (an FTZ compile flag, a cast that drops them) loses most of it, while a correct
    kernel's gradual underflow costs at most half a float32 subnormal a product
    (``verify.tolerance.underflow_bound``).
zero-run
    (Q, K or V of attention) ``offset + scale * N(0,1)``, but every entry of the positions
    from ``floor(rate * n)`` on, ``ceil(gap * n)`` of them (n the positions of a (batch,
    head)), exactly 0: data that looks like padding (a zeroed cache page, a padded query) but
    is visible.  A kernel that skips zero blocks of V or K, or zero query rows, as padding
    loses their weight.
"""

from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import asdict, dataclass, replace
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from strategies._text import num
from strategies._validation import check_argument, spec_error
from strategies.lengths import TILE_WIDTHS
from strategies.features import (K_VALUE_KINDS, PROBE_K_VALUE_KINDS, PROBE_V_VALUE_KINDS, SOFTMAX_VALUE_KINDS,
                                 V_VALUE_KINDS, ZERO_RUN_KINDS)
from verify.dtypes import FloatFormat, get_format

ALL_VALUE_KINDS = tuple(dict.fromkeys(SOFTMAX_VALUE_KINDS + V_VALUE_KINDS + K_VALUE_KINDS + PROBE_K_VALUE_KINDS
                                      + PROBE_V_VALUE_KINDS + ZERO_RUN_KINDS))

#: Entries of a very-negative row stay below this (-1e4 with room for rounding).
VERY_NEGATIVE_CEILING = -1.25e4

#: Kinds whose ``scale`` is a spread around ``offset``: tiny/huge-scale features apply.
#: Where a ``dominant`` row's large entry is, by its ``count``: ``block-ends`` lifts every entry
#: at a block's edge (``block_end_keys``: power-of-two blocks, and the last tile of the tilings
#: the row fills) to the row's maximum plus the gap, less
#: BLOCK_END_SPREAD times its own distance below the highest of them: near-equal shares, each
#: about 1 / (edges) of their weight (0.017 to 0.030 in the softmax block-ends probe's first
#: float32 case: 43 edges of 14400 entries, scale 1; CPU, 2026-12-08).
DOMINANT_AT = ("random", "last", "first", "block-ends")
BLOCK_END_SPREAD = 0.125
#: Which key of a (batch, head) a ``key-spike`` recipe lifts, by its ``count``: ``block-ends``
#: lifts every key at a power-of-two block's edge, 2**j - 1 and 2**j for j >= 4 (15, 16, 31, 32,
#: ...), and at the last tile's edges of each tiling the keys fill, see ``block_end_keys``.
KEY_SPIKE_AT = ("first", "last", "either", "alternate", "alternate-last", "block-ends")
#: near-underflow's signs, by ``count``.
UNDERFLOW_SIGNS = ("mixed", "positive", "negative")
SPREAD_KINDS = ("normal", "uniform", "ties", "dominant", "outliers", "drift", "seq-drift", "slab-levels")


def block_end_keys(n_keys: int) -> tuple[int, ...]:
    """The key positions at the edges of power-of-two blocks below ``n_keys``: 2**j - 1 (a
    block's last key) and 2**j (the next block's first) for j >= 4, e.g. 15, 16, ..., 2047, 2048
    for 2049 keys.  A kernel whose loop bounds, tail masks or split boundaries lose or double a
    key at such an edge (every 1024th key skipped, a block's last column left out of its
    maximum) does it at one of them, whatever its block width.

    Where ``n_keys`` is a multiple of some of ``lengths.TILE_WIDTHS`` (the block-ends probes take
    ``lengths.full_tiles_length``), also the edges of each such tiling's last tile, which is
    full: its first key and the key before it, and the last key, which the exact-fit path (no
    ragged tail) holds, e.g. 3647, 3648, ..., 3823, 3824 and 3839 for 3840 keys (tiles of 16
    to 192), in order."""
    edges = {p for j in range(4, n_keys.bit_length()) for p in (2**j - 1, 2**j) if p < n_keys}
    filled = [w for w in TILE_WIDTHS if n_keys % w == 0 and n_keys > w]
    edges.update(p for w in filled for p in (n_keys - w - 1, n_keys - w))
    if filled:
        edges.add(n_keys - 1)
    return tuple(sorted(edges))


@dataclass(frozen=True)
class ValueRecipe:
    """How to draw the numbers of one row or tensor.  Fields unused by a kind stay at their defaults."""

    kind: str = "normal"
    scale: float = 1.0
    offset: float = 0.0
    count: int = 0  # ties: entries equal to the maximum; dominant: where (DOMINANT_AT); key-spike: which end
    gap: float = 0.0  # dominant: margin over the rest; outliers: outlier std in units of scale; ties: jitter
    rate: float = 0.0  # outliers: probability of an outlier

    def __post_init__(self) -> None:
        if self.kind not in ALL_VALUE_KINDS:
            raise spec_error("value recipe", f"kind must be one of {ALL_VALUE_KINDS}", self.kind)
        for name in ("scale", "offset", "gap", "rate"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise spec_error("value recipe", f"{name} must be a finite number", value)
            object.__setattr__(self, name, float(value))
        if not isinstance(self.count, int) or isinstance(self.count, bool):
            raise spec_error("value recipe", "count must be an int", self.count)
        if self.scale < 0 or not 0 <= self.rate <= 1 or self.count < 0:
            raise spec_error("value recipe", "need scale >= 0, 0 <= rate <= 1, count >= 0", self)
        if self.kind == "dominant" and self.count >= len(DOMINANT_AT):
            raise spec_error("value recipe", f"a dominant entry's count picks {DOMINANT_AT} (0 to {len(DOMINANT_AT) - 1})", self.count)
        if self.kind == "zero-run" and not 0 < self.gap <= 1:
            raise spec_error("value recipe", "a zero run's share (gap) must lie in (0, 1]", self.gap)
        if self.kind == "near-underflow" and not (0 < self.gap <= self.scale and self.count < len(UNDERFLOW_SIGNS)):
            raise spec_error("value recipe", "near-underflow needs 0 < gap (the smallest magnitude) <= scale "
                             f"(the largest) and a count picking {UNDERFLOW_SIGNS} (0 to 2)", self)
        if self.kind == "key-spike" and self.count >= len(KEY_SPIKE_AT):
            raise spec_error("value recipe", f"a key spike's count picks {KEY_SPIKE_AT} (0 to 5)", self.count)

    # ---- replay -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The kind plus the fields that differ from their defaults (short counterexamples)."""
        default = _DEFAULT_FIELDS
        return {k: v for k, v in asdict(self).items() if k == "kind" or v != default[k]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ValueRecipe":
        return cls(**d)

    def describe(self) -> str:
        k = self.kind
        off = f", offset={num(self.offset)}" if self.offset else ""
        if k == "constant":
            return f"constant({num(self.offset)})"
        if k == "full-range":
            return "full-range"
        if k == "ties":
            jitter = f", jitter={num(self.gap)}" if self.gap else ""
            return f"ties(scale={num(self.scale)}{off}, count={self.count}{jitter})"
        if k == "key-ties":
            return f"key-ties(scale={num(self.scale)}{off}, copies={self.count}, jitter={num(self.gap)})"
        if k == "dominant":
            at = f", at={DOMINANT_AT[self.count]}" if self.count else ""
            return f"dominant(scale={num(self.scale)}{off}, gap={num(self.gap)}{at})"
        if k == "outliers":
            return f"outliers(scale={num(self.scale)}{off}, std={num(self.gap)}, rate={num(self.rate)})"
        if k in ("drift", "seq-drift"):
            octaves = f", octaves={num(self.rate)}" if k == "seq-drift" and self.rate else ""
            return f"{k}(scale={num(self.scale)}{off}, rise={num(self.gap)}{octaves})"
        if k == "slab-levels":
            return f"slab-levels(scale={num(self.scale)}{off}, decades={num(self.gap)})"
        if k == "key-spike":
            at = KEY_SPIKE_AT[self.count]
            return f"key-spike(scale={num(self.scale)}{off}, gap={num(self.gap)}, at={at})"
        if k == "ends-opposed":
            return f"ends-opposed(value={num(self.offset)}, spread={num(self.scale)})"
        if k == "zero-run":
            return f"zero-run(scale={num(self.scale)}{off}, from={num(self.rate)}, share={num(self.gap)})"
        if k == "plateau":
            edge = ("statistics", "input")[min(self.count, 1)]
            return f"plateau(scale={num(self.scale)}{off}, first={num(self.rate)}, margin={num(self.gap)}, edge={edge})"
        if k in ("cancellation", "near-max", "very-negative", "subnormal-output", "near-uniform"):
            return f"{k}(offset={num(self.offset)}, spread={num(self.scale)})"
        if k == "near-underflow":
            return f"near-underflow(from={num(self.gap)}, to={num(self.scale)}, signs={UNDERFLOW_SIGNS[self.count]})"
        return f"{k}(scale={num(self.scale)}{off})"

    def features(self) -> tuple[str, ...]:
        found = [f"mag:{self.kind}"]
        if self.kind in SPREAD_KINDS:
            if self.scale <= 1e-3:
                found.append("mag:tiny-scale")
            if self.scale >= 1e4:
                found.append("mag:huge-scale")
        return tuple(found)

    def spread(self) -> float:
        """Typical standard deviation of the drawn numbers (for score estimates)."""
        if self.kind == "constant":
            return 0.0
        if self.kind == "uniform":
            return self.scale / math.sqrt(3.0)
        if self.kind == "outliers":
            return self.scale * math.sqrt(1.0 + self.rate * self.gap**2)
        if self.kind == "key-spike":
            return math.hypot(self.scale, self.gap)
        if self.kind == "ends-opposed":
            return math.hypot(self.scale, self.offset)
        return self.scale

    # ---- building ---------------------------------------------------------------------
    def group_recipes(self) -> tuple["ValueRecipe", ...]:
        """The recipes that draw a tensor's groups ((batch, head) slabs) in turn, for
        ``sample_groups``: this one alone, but for a key spike at alternating ends (``count`` 3
        or 4), which is the first-key and the last-key spike in turn.  A kernel that walks its
        key blocks forward, and one that walks them backward, then both meet the spike first in
        some (batch, head) and last in another, whatever the seed."""
        if self.kind == "key-spike" and self.count in (3, 4):
            first, last = replace(self, count=0), replace(self, count=1)
            return (first, last) if self.count == 3 else (last, first)
        return (self,)

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...], fmt: FloatFormat, limit: float) -> np.ndarray:
        """Float64 numbers of ``shape`` (row semantics along the last axis), clipped to ``[-limit, limit]``.

        ``fmt`` only bounds the full-range kind from below (its smallest subnormal).
        """
        # Huge scales in float64 may overflow to +-inf on the way; clipping maps
        # those to +-limit.  The offset is finite, so inf - inf (NaN) cannot occur.
        with np.errstate(over="ignore"):
            x = self._sample(rng, shape, fmt, limit)
        np.clip(x, -limit, limit, out=x)
        if np.isnan(x).any():
            raise AssertionError(f"{self} produced NaN")
        return x

    def _sample(self, rng: np.random.Generator, shape: tuple[int, ...], fmt: FloatFormat, limit: float) -> np.ndarray:
        k = self.kind
        n = shape[-1]
        if k == "constant":
            return np.full(shape, self.offset)
        if k in ("uniform", "near-uniform"):
            return self.offset + self.scale * rng.uniform(-1.0, 1.0, shape)
        if k in ("normal", "cancellation"):
            return self.offset + self.scale * rng.standard_normal(shape)
        if k == "near-max":
            # From +-max towards zero.
            return self.offset - math.copysign(1.0, self.offset) * self.scale * np.abs(rng.standard_normal(shape))
        if k == "very-negative":
            return self.offset - self.scale * np.abs(rng.standard_normal(shape))
        if k == "subnormal-output":
            x = self.offset - self.scale * rng.random(shape)
            rows = x.reshape(-1, n)
            # One entry per row at the top, so exp(x - max) spans [exp(-scale), 1].
            rows[np.arange(rows.shape[0]), rng.integers(0, n, rows.shape[0])] = self.offset
            return x
        if k == "full-range":
            return _full_range(rng, shape, fmt, limit)
        if k == "near-underflow":
            # 2**e * (1 + u), e uniform over the binades from gap's to scale's: ldexp only (exact).
            e = rng.integers(math.frexp(self.gap)[1] - 1, math.frexp(self.scale)[1], shape)
            mag = np.minimum(np.ldexp(1.0 + rng.random(shape), e), self.scale)
            if self.count == 0:
                return np.where(rng.random(shape) < 0.5, -mag, mag)
            return mag if self.count == 1 else -mag
        if k == "outliers":
            hits = rng.random(shape) < self.rate
            x = rng.standard_normal(shape) + self.gap * rng.standard_normal(shape) * hits
            if self.gap > 0 and self.rate > 0 and not hits.any():
                # Bernoulli(0.001) rarely fires in a short row: guarantee one outlier.
                flat = x.reshape(-1)
                flat[rng.integers(0, flat.size)] += self.gap * (4.0 if rng.random() < 0.5 else -4.0)
            return self.offset + self.scale * x
        if k == "ties":
            x = self.offset + self.scale * rng.standard_normal(shape)
            rows = x.reshape(-1, n)
            for row in rows:
                top = row.max()
                at = rng.choice(n, size=min(max(self.count, 2), n), replace=False)
                # Near ties (gap > 0) lie within gap below the maximum; exact ties draw no more.
                row[at] = top - self.gap * rng.random(at.size) if self.gap else top
            return x
        if k == "key-ties":
            if len(shape) < 2:
                raise AssertionError("key-ties draws a K tensor: shape (..., keys, head_dim)")
            x = self.offset + self.scale * rng.standard_normal(shape)
            for slab in x.reshape(-1, shape[-2], n):
                away = slab - self.offset
                far = away[np.argmax((away * away).sum(axis=-1))] * KEY_TIE_BOOST
                at = rng.choice(shape[-2], size=min(max(self.count, 2), shape[-2]), replace=False)
                slab[at] = self.offset + far * (1.0 + self.gap * rng.uniform(-1.0, 1.0, (at.size, 1)))
            return x
        if k == "dominant":
            x = self.offset + self.scale * rng.standard_normal(shape)
            rows = x.reshape(-1, n)
            if DOMINANT_AT[self.count] == "block-ends":
                at = list(block_end_keys(n))
                for row in rows if at else ():  # rows of 16 entries or fewer have no such edge
                    # each edge near an equal share (BLOCK_END_SPREAD), none tied
                    row[at] = row.max() + self.gap + BLOCK_END_SPREAD * (row[at] - row[at].max())
                return x
            for row in rows:
                at = (rng.integers(0, n), n - 1, 0)[self.count]
                row[at] = row.max() + self.gap
            return x
        if k == "key-spike":
            if len(shape) < 2:
                raise AssertionError("key-spike draws a K tensor: shape (..., keys, head_dim)")
            x = self.offset + self.scale * rng.standard_normal(shape)
            heads = x.reshape(-1, shape[-2], n)
            if KEY_SPIKE_AT[self.count] == "block-ends":
                heads[:, list(block_end_keys(shape[-2])), :] += self.gap
                return x
            # Which end, for each (batch, head): the first (0) or the last key.
            slabs = np.arange(heads.shape[0])
            if self.count < 2:
                last = np.full(heads.shape[0], self.count == 1)
            elif self.count == 2:
                last = rng.integers(0, 2, heads.shape[0]) == 1
            else:  # alternately, counted within this tensor (group_recipes counts over the groups)
                last = slabs % 2 == (1 if self.count == 3 else 0)
            heads[slabs, np.where(last, shape[-2] - 1, 0), :] += self.gap
            return x
        if k == "zero-run":
            if len(shape) < 2:
                raise AssertionError("zero-run draws a Q, K or V tensor: shape (..., positions, head_dim)")
            x = self.offset + self.scale * rng.standard_normal(shape)
            n_pos = shape[-2]
            start = min(n_pos - 1, math.floor(self.rate * n_pos))
            x[..., start:start + max(1, math.ceil(self.gap * n_pos)), :] = 0.0
            return x
        if k == "ends-opposed":
            if len(shape) < 2:
                raise AssertionError("ends-opposed draws a V tensor: shape (..., keys, head_dim)")
            x = -self.offset + self.scale * rng.standard_normal(shape)
            heads = x.reshape(-1, shape[-2], n)
            heads[:, [0, shape[-2] - 1], :] += 2.0 * self.offset
            return x
        if k == "drift":
            # Division and multiplication only: bit-exact on every CPU (see strategies._rng).
            trend = self.gap * (np.arange(n, dtype=np.float64) / max(n - 1, 1))
            return self.offset + self.scale * rng.standard_normal(shape) + trend
        if k == "plateau":
            x = self.offset + self.scale * rng.standard_normal(shape)
            if n > 1:
                first = min(n - 1, max(1, round(self.rate * n)))
                x[..., first:] += plateau_level(self, fmt, n - first) - self.offset
            return x
        if k == "slab-levels":
            # The level first: it is the slab's (every slab has its own stream).  A power of two
            # times [1, 2), built with ldexp (exact): pow may differ in the last bit between
            # CPUs, and a replay must not.
            octaves = int(round(self.gap * _OCTAVES_PER_DECADE))
            level = math.ldexp(1.0 + float(rng.random()), -1 - int(rng.integers(0, octaves + 1)))
            return level * (self.offset + self.scale * rng.standard_normal(shape))
        if k == "seq-drift":
            if len(shape) < 2:
                raise AssertionError("seq-drift draws a Q, K or V tensor: shape (..., positions, head_dim)")
            steps = shape[-2]
            if self.rate:
                # Geometric: whole octaves (ldexp, exact on every CPU), floor(rate * j) of them
                # below the last position's gap, j positions before it.
                octaves = np.floor(self.rate * np.arange(steps - 1, -1, -1, dtype=np.float64)).astype(np.int64)
                trend = np.ldexp(self.gap, -octaves)
            else:
                trend = self.gap * (np.arange(steps, dtype=np.float64) / max(steps - 1, 1))
            return self.offset + self.scale * rng.standard_normal(shape) + trend[:, None]
        raise AssertionError(k)


_DEFAULT_FIELDS = asdict(ValueRecipe())

#: Building a spec draws each softmax row, and each (batch, head) pair of Q, K and V, from a
#: stream of its own (strategies._rng), so that shrinking one part leaves the others' numbers
#: as they were.  A stream costs about 40 us to set up: 65537 one-entry rows took 4-5 s to
#: build (2026-12-01).  Past BULK_FROM groups (no case drawn before that date had more than
#: 600) the rest come BULK_BLOCK at a time, one stream per block and recipe.
BULK_FROM = 1024
BULK_BLOCK = 4096


def sample_groups(recipes: tuple[ValueRecipe, ...], n_groups: int, shape: tuple[int, ...], fmt: FloatFormat,
                  limit: float, own: Callable[[int], np.random.Generator],
                  bulk: Callable[[int, int], np.random.Generator]) -> np.ndarray:
    """Float64 ``(n_groups, *shape)``: group ``g`` drawn by ``recipes[g % len(recipes)]`` and
    clipped to ``[-limit, limit]``; groups below ``BULK_FROM`` from ``own(g)``, the rest in blocks
    of ``BULK_BLOCK`` from ``bulk(block, recipe_index)`` (a recipe that draws one number per
    call, as ``slab-levels`` draws its level, then draws it once for its groups of a block)."""
    out = np.empty((n_groups, *shape))
    n_recipes = len(recipes)
    for g in range(min(n_groups, BULK_FROM)):
        out[g] = recipes[g % n_recipes].sample(own(g), shape, fmt, limit)
    for block, start in enumerate(range(BULK_FROM, n_groups, BULK_BLOCK)):
        stop = min(n_groups, start + BULK_BLOCK)
        for r, recipe in enumerate(recipes):
            first = start + (r - start) % n_recipes  # the block's first group of recipe r
            if first < stop:
                count = (stop - 1 - first) // n_recipes + 1
                out[first:stop:n_recipes] = recipe.sample(bulk(block, r), (count, *shape), fmt, limit)
    return out


def _full_range(rng: np.random.Generator, shape: tuple[int, ...], fmt: FloatFormat, limit: float) -> np.ndarray:
    # 2**e * (1 + u) with e uniform from the smallest subnormal's exponent to the limit's:
    # log-uniform magnitudes, computed with ldexp only (exact), never with pow/exp.
    e_hi = math.frexp(limit)[1] - 1
    e_lo = min(fmt.emin - fmt.precision + 1, e_hi)
    e = rng.integers(e_lo, e_hi + 1, shape)
    mag = np.ldexp(1.0 + rng.random(shape), e)
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    x = np.minimum(mag, limit) * sign
    rows = x.reshape(-1, shape[-1])
    n = shape[-1]
    for row in rows:
        # Both ends of the range, so the row spans -max .. +max.
        where = rng.choice(n, size=min(2, n), replace=False)
        row[where[0]] = limit
        if n > 1:
            row[where[1]] = -limit
    return x


# ---- strategies ---------------------------------------------------------------------------


def _decimal(mantissa: float, exponent: int) -> float:
    # Parsing the decimal text gives the float nearest to m * 10**e, whose repr is short.
    return float(f"{mantissa:g}e{exponent}")


@lru_cache(maxsize=1024)
def magnitudes(lo: float, hi: float) -> SearchStrategy[float]:
    """Positive numbers spread log-uniformly over ``[lo, hi]``, ``hi`` itself included.

    Drawn as ``m * 10**e`` with ``m`` in (1, 2, 5): readable in a counterexample,
    and shrinking moves ``e`` towards 0, i.e. towards 1.  Half the draws come from
    the moderate band 1e-2 .. 1e2 (where most real inputs live); without it a
    float64 range of 600 decades would almost never produce an ordinary number.
    """
    check_argument(0 < lo <= hi, f"need 0 < lo <= hi, got lo={lo!r}, hi={hi!r}")
    e_lo = math.ceil(math.log10(lo) - 1e-12)
    e_hi = math.floor(math.log10(hi) + 1e-12)
    if e_lo > e_hi:
        return st.just(hi)

    def assemble(pair: tuple[int, float]) -> float:
        e, m = pair
        if e > e_hi:
            return hi
        return min(max(_decimal(m, e), lo), hi)

    exponents = st.integers(e_lo, e_hi + 1)
    moderate_lo, moderate_hi = max(e_lo, -2), min(e_hi, 2)
    if moderate_lo <= moderate_hi:
        exponents = st.one_of(st.integers(moderate_lo, moderate_hi), exponents)
    return st.tuples(exponents, st.sampled_from((1.0, 2.0, 5.0))).map(assemble)


def signed(magnitude: SearchStrategy[float]) -> SearchStrategy[float]:
    return st.tuples(magnitude, st.booleans()).map(lambda p: -p[0] if p[1] else p[0])


@lru_cache(maxsize=1024)
def offsets(limit: float) -> SearchStrategy[float]:
    """0 (the shrink target), else a signed magnitude up to ``limit``.

    The magnitude and sign are drawn in both cases, so "no offset" costs as many
    choices as an offset: Hypothesis orders examples by the number of choices
    first, and a cheaper branch would attract shrinking whatever its meaning.
    """
    parts = st.tuples(st.booleans(), magnitudes(min(1e-3, limit), limit), st.booleans())
    return parts.map(lambda p: (-p[1] if p[2] else p[1]) if p[0] else 0.0)


def available_kinds(fmt: FloatFormat, kinds: tuple[str, ...], limit: float) -> tuple[str, ...]:
    """Kinds that make sense within ``limit`` (very-negative needs room below -1.25e4)."""
    return tuple(k for k in kinds if k != "very-negative" or limit > -VERY_NEGATIVE_CEILING * 1.5)


def value_recipes(
    dtype: str | FloatFormat,
    kinds: tuple[str, ...] = SOFTMAX_VALUE_KINDS,
    limit: float | None = None,
) -> SearchStrategy[ValueRecipe]:
    """A recipe drawn for ``dtype``, with every magnitude within ``limit`` (default: the max finite).

    ``kinds`` are listed simplest first.  Parameters are expressed in terms of the
    dtype (ulps for cancellation, its subnormal range for subnormal-output) but
    stored as plain numbers, so a recipe replays without the dtype table.
    """
    fmt = get_format(dtype)
    unknown = set(kinds) - set(ALL_VALUE_KINDS)
    check_argument(not unknown, f"unknown value kinds {sorted(unknown)}; use some of {ALL_VALUE_KINDS}")
    limit = fmt.max_finite if limit is None else min(limit, fmt.max_finite)
    usable = available_kinds(fmt, tuple(kinds), limit)
    check_argument(bool(usable), f"none of the value kinds {tuple(kinds)} fits within {limit!r}")
    return _value_recipes(fmt, usable, limit)


#: Margins of a dominant entry over the rest, and rises of a drift: a ladder, so that the
#: other entries' weights exp(-gap) land at every scale a kernel may cut at, from a sizeable
#: share (2) through the 16-bit and float32 roundoffs (10: 4.5e-5; 15: 3.1e-7; 20: 2.1e-9)
#: to underflow (1e3, 1e4).  A kernel that drops terms below a fixed threshold is wrong
#: only where many of them sit just under it, so a dominant margin is a rung times one of
#: ``_GAP_STEPS`` (2**(j/8), j < 8): from 2 to 110, margins that can be drawn lie at most 1.37x
#: apart (at most 1.09x from 5 on), whichever threshold a kernel cuts at.  The rung itself
#: comes first (the draw shrinks to it).
_GAPS = (20.0, 100.0, 1e3, 1e4, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0)
#: How far below the maximum a ``ties`` row's tied entries may lie (absolute, in logits; 0: exact
#: ties, the first), and by how much, relative, a ``key-ties`` K's copies may differ.  Maxima of
#: two blocks that differ by less than a threshold are where a merge that takes them for equal
#: (and skips the exp(m1 - m2) correction, or keeps the wrong block's statistics) is wrong by
#: about the difference: a blind mutant whose split-KV merge skipped it below 2**-7 lived through
#: seeds 1-3 of 4 s a dtype; its trigger came in 13 of 521 calls, all inside the tolerance of
#: thousands of keys (ninth red team, 2026-12-06).  The rungs span the 16-bit and float32 grids.
TIE_JITTERS = (0.0, 2.0**-12, 2.0**-9, 2.0**-6)
KEY_TIE_JITTERS = (0.0, 2.0**-14, 2.0**-11, 2.0**-8)
#: A key-ties K's copied key lies this much farther from the offset than the slab's farthest.
KEY_TIE_BOOST = 2.0
_GAP_STEPS = tuple(2.0 ** (j / 8) for j in range(8))
_OUTLIER_STDS = (10.0, 100.0)
_OUTLIER_RATES = (0.001, 0.01, 0.1)
#: A near-uniform row's entries lie within eps 2**j of an offset of at most 1 in size (j <
#: NEAR_UNIFORM_STEPS, the spread at most NEAR_UNIFORM_MAX_SPREAD): from a few ulps of 1 apart
#: to a few thousand, every softmax output is 1/n to within about the spread.  A kernel that
#: takes a row whose maximum and minimum lie within some threshold for uniform, and answers
#: 1/n, is wrong by about the spread: past the tolerance once the spread is ten ulps or so,
#: and hidden under it at large offsets (a cancellation row's).  Otherwise such rows are
#: uniform or normal ones of a scale in [eps, 1/16] around |offset| <= 1: 15 of 1,547 recipes
#: in 1,000 float32 cases (softmax_cases' defaults, 2026-12-05, the new kind 131 of them), few
#: of them in a given shortcut's window; a blind mutant lived in float32 (seventh red team).
NEAR_UNIFORM_STEPS = 14
NEAR_UNIFORM_MAX_SPREAD = 2.0**-4
#: Slab levels span 1 to this many decades.
SLAB_LEVEL_DECADES = 4
_OCTAVES_PER_DECADE = 10.0 / 3.0  # about log2(10)


# Strategies are cached per argument tuple: building them afresh on every draw
# costs more than drawing from them.
@lru_cache(maxsize=1024)
def _value_recipes(fmt: FloatFormat, kinds: tuple[str, ...], limit: float) -> SearchStrategy[ValueRecipe]:
    # Every kind draws the same parameters (a magnitude, an offset, a small integer)
    # and interprets them its own way.  With equally many choices per kind,
    # shrinking is decided by the kind's position in ``kinds``: simplest first.
    parts = st.tuples(
        st.sampled_from(kinds),
        magnitudes(min(1e-6, limit), limit),
        offsets(limit),
        st.integers(0, 255),
    )
    return parts.map(lambda p: _interpret(fmt, limit, *p))


def _interpret(fmt: FloatFormat, limit: float, kind: str, a: float, b: float, p: int) -> ValueRecipe:
    """The recipe of ``kind`` from the shared draws: magnitude ``a``, offset ``b``, integer ``p``."""
    sign = -1.0 if math.copysign(1.0, b) < 0 else 1.0
    if kind in ("normal", "uniform"):
        return ValueRecipe(kind, scale=a, offset=b)
    if kind == "constant":
        return ValueRecipe(kind, scale=0.0, offset=b)
    if kind == "ties":
        return ValueRecipe(kind, scale=a, offset=b, count=2 + p % 7, gap=TIE_JITTERS[(p // 7) % len(TIE_JITTERS)])
    if kind == "key-ties":
        return ValueRecipe(kind, scale=a, offset=b, count=2 + p % 3,
                           gap=KEY_TIE_JITTERS[(p // 3) % len(KEY_TIE_JITTERS)])
    if kind == "dominant":
        rung, step = _GAPS[p % len(_GAPS)], _GAP_STEPS[(p // len(_GAPS)) % len(_GAP_STEPS)]
        return ValueRecipe(kind, scale=a, offset=b, gap=min(float(f"{rung * step:.4g}"), limit))
    if kind == "outliers":
        std, rate = _OUTLIER_STDS[p % 2], _OUTLIER_RATES[(p // 2) % 3]
        return ValueRecipe(kind, scale=a, offset=b, gap=std, rate=rate)
    if kind == "slab-levels":
        return ValueRecipe(kind, scale=a, offset=b, gap=float(1 + p % SLAB_LEVEL_DECADES))
    if kind in ("drift", "seq-drift"):
        rise = min(_GAPS[p % len(_GAPS)], limit)
        return ValueRecipe(kind, scale=a, offset=b, gap=-rise if (p // len(_GAPS)) % 2 else rise)
    if kind == "plateau":
        share = PLATEAU_SHARES[p % len(PLATEAU_SHARES)]
        margin = PLATEAU_MARGINS[(p // len(PLATEAU_SHARES)) % len(PLATEAU_MARGINS)]
        edge = (p // (len(PLATEAU_SHARES) * len(PLATEAU_MARGINS))) % 2
        # Little noise: the first part's maximum, which the step is measured from, stays near
        # the offset, and so does the plateau's (a threshold kernel compares the two).  The
        # offset within 2**-4 / eps, where the step keeps a fine grid (bfloat16: 8 + 80, 0.5).
        bound = min(max(1.0, 2.0**-4 / fmt.eps), limit / 4)
        return ValueRecipe(kind, scale=min(a, PLATEAU_MAX_NOISE), offset=min(max(b, -bound), bound),
                           count=edge, gap=margin, rate=share)
    if kind == "cancellation":
        # A large offset with a spread of 2**j ulps of it: x - max subtracts nearly equal numbers.
        offset = sign * min(max(a, min(1e2, limit / 2)), limit / 2)
        return ValueRecipe(kind, scale=abs(offset) * fmt.eps * 2.0 ** (p % 11), offset=offset)
    if kind == "near-max":
        return ValueRecipe(kind, scale=limit * 2.0 ** -(1 + p % 20), offset=sign * limit)
    if kind == "near-uniform":
        # See NEAR_UNIFORM_STEPS.
        spread = min(fmt.eps * 2.0 ** (p % NEAR_UNIFORM_STEPS), NEAR_UNIFORM_MAX_SPREAD)
        return ValueRecipe(kind, scale=spread, offset=min(max(b, -1.0), 1.0))
    if kind == "very-negative":
        offset = -min(max(a, -VERY_NEGATIVE_CEILING), limit)
        return ValueRecipe(kind, scale=abs(b) if b else 1.0, offset=offset)
    if kind == "full-range":
        return ValueRecipe(kind, scale=0.0)
    if kind == "near-underflow":
        return ValueRecipe(kind, scale=fmt.smallest_normal * 2.0 ** (p % 4), gap=2 * fmt.smallest_subnormal,
                           count=(p // 4) % len(UNDERFLOW_SIGNS))
    if kind == "subnormal-output":
        # -ln(smallest subnormal): ~103 in float32, ~17 in float16; 5-25 % more puts some outputs below it.
        width = float(f"{-math.log(fmt.smallest_subnormal) * (1.05, 1.25)[p % 2]:.4g}")
        # The offset must stay small enough for the spread to be resolved in the dtype.
        bound = max(1.0, min(limit / 4, width / (16 * fmt.eps)))
        return ValueRecipe(kind, scale=width, offset=sign * min(abs(b), bound) if b else 0.0)
    raise AssertionError(kind)


#: Kinds whose entries differ from position to position (given enough spread).
POSITION_DISTINCT_KINDS = ("normal", "uniform")
#: The spread of a position-distinct row: at least this many ulps of its offset...
POSITION_SPREAD_ULPS = 64
#: ...and within these bounds: wide enough that neighbours differ, narrow enough that no
#: output underflows (exp(-8 * 4) / 65537 is still a normal float32 and bfloat16).
POSITION_SPREAD = (1.0, 4.0)


#: A well-mixed row's half-width: entries in [offset - s, offset + s] with s at most this, so
#: every probability is within exp(2 s) < 16 of the row's largest (exp(2.7) = 14.9).
MIXED_SPREAD = (0.2, 1.35)


#: A plateau row's first part, as a share of the row, most first: half the row holds the first
#: blocks of every blocked loop over rows up to twice the block.
PLATEAU_SHARES = (0.5, 0.25, 0.75, 0.0625, 0.9375)
#: Its margins past the overflow edge, in nats: the least first (the step then sits under the
#: most thresholds a lazy rescale may use).
PLATEAU_MARGINS = (2.0**-6, 2.0**-3, 0.5, 2.0, 0.0)
#: The most noise a plateau row's entries take (its scale).
PLATEAU_MAX_NOISE = 2.0**-4


def plateau_level(recipe: ValueRecipe, fmt: FloatFormat, count: int) -> float:
    """The level of a plateau row's ``count`` raised entries (see the ``plateau`` kind): the
    offset plus ``ln(F) - ln(count) + gap``, rounded up to ``fmt``'s grid, so that the rounded
    row still sums past ``F`` relative to its first part."""
    stats = fmt if recipe.count >= 1 else get_format("float64" if fmt.name == "float64" else "float32")
    level = recipe.offset + math.log(stats.max_finite) - math.log(count) + recipe.gap
    # The spacing of fmt's numbers at level: a power of two, so the rounding up is exact.
    step = math.ldexp(1.0, max(math.frexp(level)[1] - 1, fmt.emin) - fmt.precision + 1)
    return math.ceil(level / step) * step


def stale_plateau(fmt: FloatFormat) -> ValueRecipe:
    """The plateau-row probe's recipe at full strength: no noise and no offset, the first half of
    the row at 0 and the second on a step past the statistics format's overflow edge by
    ``PLATEAU_MARGINS[0]`` (rounding up to the grid adds to it: bfloat16's 0.5 at 80)."""
    return ValueRecipe("plateau", scale=0.0, offset=0.0, count=0, gap=PLATEAU_MARGINS[0], rate=PLATEAU_SHARES[0])


#: The rise of a full-strength drift: past the exponential's range in every format (the
#: natural log of float64's largest finite value is 709.8).
FULL_DRIFT_RISE = 1e4


def near_uniform_ladder(fmt: FloatFormat) -> tuple[ValueRecipe, ...]:
    """NEAR_UNIFORM_STEPS near-uniform recipes, one a row: row j's entries within
    ``fmt.eps * 2**j`` (capped at NEAR_UNIFORM_MAX_SPREAD) of an offset of +1 (even j) or -1
    (odd j), so that its spread relative to the entries is about its absolute spread.

    Whatever threshold a "these entries are all equal" shortcut compares the spread with, from
    a few ulps up to NEAR_UNIFORM_MAX_SPREAD, one row lies within a factor two below it, where
    the shortcut's 1/n is off by about half the threshold (the softmax probe spread-ladder)."""
    return tuple(ValueRecipe("near-uniform", scale=min(fmt.eps * 2.0**j, NEAR_UNIFORM_MAX_SPREAD),
                             offset=1.0 if j % 2 == 0 else -1.0) for j in range(NEAR_UNIFORM_STEPS))


def is_near_uniform_ladder(recipes: tuple[ValueRecipe, ...], fmt: FloatFormat) -> bool:
    """Whether ``recipes`` are :func:`near_uniform_ladder`'s for ``fmt`` (never drawn at random)."""
    return tuple(recipes) == near_uniform_ladder(fmt)


def full_drift(fmt: FloatFormat) -> ValueRecipe:
    """A drift that rises by ``FULL_DRIFT_RISE`` over the row (half the format's largest value
    where that is less): the row maximum moves on at every block, by more over the row than
    ``exp`` can span, so a maximum taken over a prefix or one block, a running maximum not
    carried to the next block, or a rescale skipped at a block boundary overflows, or drops the
    mass of the row, wherever the row's blocks end."""
    return ValueRecipe("drift", scale=1.0, offset=0.0, gap=min(FULL_DRIFT_RISE, fmt.max_finite / 2))


def well_mixed(recipe: ValueRecipe, fmt: FloatFormat) -> ValueRecipe:
    """``recipe`` made into a well-mixed row: uniform entries with the drawn half-width clipped
    to ``MIXED_SPREAD``, around the drawn offset clipped so that a 2**-10 share of the half-width
    is at least an ulp of it (about 2**11 distinct values in the row's range).  The sum of such
    a row's exponentials, rounded to nearest in any order, stays within a few sqrt(n) u; rounded
    toward zero it is ~n u / 3 low (``verify.tolerance.softmax_bias_bound``)."""
    scale = min(max(recipe.scale, MIXED_SPREAD[0]), MIXED_SPREAD[1])
    bound = scale * 2.0 ** -10 / fmt.eps
    return ValueRecipe("uniform", scale=scale, offset=min(max(recipe.offset, -bound), bound))


def position_distinct(recipe: ValueRecipe, fmt: FloatFormat) -> ValueRecipe:
    """``recipe`` made to tell the positions of a row apart, for rows drawn to probe index width.

    An index-width bug (an offset that wraps or is truncated) reads or writes another
    position of the row, and shows only where the output there changes.  A constant, tied
    or tiny-spread row hides it (the other position holds the same value), and so does a
    huge spread or outliers (nearly every output underflows to 0 either way).  So the kind
    becomes ``normal`` unless it is ``uniform``; the offset is kept within
    ``1 / (16 eps)``, where ``POSITION_SPREAD_ULPS`` ulps of it stay below the upper spread;
    the spread is clipped to ``POSITION_SPREAD``.  Softmax does not depend on the offset.
    """
    kind = recipe.kind if recipe.kind in POSITION_DISTINCT_KINDS else "normal"
    bound = 1.0 / (16.0 * fmt.eps)
    offset = min(max(recipe.offset, -bound), bound)
    low, high = POSITION_SPREAD
    scale = min(max(recipe.scale, low, POSITION_SPREAD_ULPS * abs(offset) * fmt.eps), high)
    return ValueRecipe(kind, scale=scale, offset=offset)
