"""Mask recipes: which (row, column) entries are masked out.

For softmax a masked entry is a ``-inf`` logit; for attention it is a ``False``
in the boolean mask (``True`` = attend).  A :class:`MaskSpec` is the recipe and
:meth:`MaskSpec.keep` expands it into a boolean "keep" matrix with a seeded
generator.

Kinds, simplest first:

none             nothing masked.
random           each entry masked with probability ``density`` (up to 1.0: every row
                 fully masked), the classic test of the running max being -inf.
fully-masked-row the rows listed in ``rows`` (modulo the row count) entirely masked:
                 0/0 in the normalisation, whose result the contract must define.  Group g
                 (a batch entry or head) masks those rows shifted by g, so a kernel that
                 takes one group's dead rows for all of them goes wrong.
leading-block    the first ``block`` (16/32/64/128) columns masked: a whole first tile
                 of -inf, so the running max starts at -inf and ``exp(-inf - -inf)`` is NaN
                 unless the kernel guards it.
single-unmasked  one random column per row kept: the result must be exactly one-hot.
causal           row i keeps columns ``j <= i + offset``; offset 0 is top-left aligned,
                 ``n_cols - n_rows`` bottom-right; negative offsets mask whole leading rows.
sliding-window   row i keeps ``i + offset - window < j <= i + offset``.
key-padding      the last ``pads[g]`` columns masked, for group g (a row or a batch
                 entry, the caller decides), pads up to the full width; with
                 ``side="start"`` the first ``pads[g]`` (left padding, as batched
                 generation pads its prompts): every row then opens with masked tiles and
                 the live keys start at an offset, which a kernel that takes the mask for a
                 valid length, or skips tiles past the last live key, gets wrong.

``dead_rows`` lays fully masked rows over any kind: the rows listed (shifted by the group,
as fully-masked-row's) see nothing whatever the kind keeps.  A row with no visible key beside
rows with a mask's structure (a padded tail, a staggered diagonal, a random pattern per pair)
is where a kernel's guard for the empty row meets its other paths: the store of a dead row
skipped, one pair's dead rows taken for another's, an LSE of 0 for an empty sum.

``flips`` inverts single entries after the kind (and before ``dead_rows``): (row, column) pairs,
taken modulo the matrix's size, the same in every group.  A structured mask with one entry off
its pattern (a causal mask with a hole below the diagonal or a key above it, a padding mask
with a live entry among its pads, a mask that hides nothing but one entry) is where a kernel
that dispatches on the mask's shape, and tells that shape by a few entries (the first row, the
diagonal, the corners), runs the structured path and is wrong inside.

``stagger`` makes the kinds that draw no random numbers (leading-block, causal,
sliding-window) differ from one group (a batch entry or head of the mask) to the next:
group g masks ``stagger * g`` more leading columns, or moves its diagonal that far right.
The other kinds already differ per group (random draws, shifted dead rows, alternating
pads).  Without it a per-head mask of those kinds was the same for every head, and a
kernel that reads one head's mask for a whole GQA group went unseen (a blind mutant that
did so passed 100 examples a dtype at seed 1, 2026-12-03).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from strategies._text import num
from strategies._validation import check_argument, check_positive_int, spec_error

MASK_KINDS = (
    "none",
    "random",
    "fully-masked-row",
    "leading-block",
    "single-unmasked",
    "causal",
    "sliding-window",
    "key-padding",
)
MASK_BLOCKS = (16, 32, 64, 128)
#: Shares of entries a random mask hides: 1.0 hides every one (every row fully masked), 0.0
#: none (a mask that hides nothing, which a kernel may skip, and must then skip rightly).
DENSITIES = (0.5, 0.1, 0.9, 0.99, 1.0, 0.01, 0.0)
PAD_SIDES = ("end", "start")  # where key-padding pads go: right padding first (the common one)
#: Key padding's pads as drawn, or the first group's none ("longest-first": a batch sorted by
#: length, longest first, as servers batch prompts).  There the first row, or the first batch
#: entry, hides nothing while the next one does: a kernel or dispatcher that judges the whole
#: mask by its first row ("all visible: no mask") drops it for the rest.  Drawn as two pads in
#: [0, Nk], a first pad of 0 came about once in Nk + 1 key-padding masks, and a blind mutant
#: that dropped a mask whose first row hid nothing lived through seeds 2 and 3 of 4 s a dtype
#: (tenth red team, 2026-12-06).
PAD_ORDERS = ("as-drawn", "longest-first")
#: The kinds whose recipe draws no random numbers, staggered per group (see the module doc).
STAGGERED_KINDS = ("leading-block", "causal", "sliding-window")
#: Stagger values, the first the one shrinking moves to: one column a group is enough for a
#: head to differ from its neighbour; 0 (every group the same) comes second.
STAGGERS = (1, 0)

# Kind -> feature for the kinds whose shape is not already told by a data feature.
_KIND_FEATURE = {
    "random": "mask:random",
    "leading-block": "mask:leading-block",
    "causal": "mask:causal",
    "sliding-window": "mask:sliding-window",
    "key-padding": "mask:key-padding",
}


@dataclass(frozen=True)
class MaskSpec:
    """A mask recipe.  Fields a kind does not use stay at their defaults."""

    kind: str = "none"
    density: float = 0.0
    block: int = 0
    window: int = 0
    offset: int = 0
    rows: tuple[int, ...] = ()
    pads: tuple[int, ...] = ()
    side: str = "end"  # key-padding only: PAD_SIDES
    stagger: int = 0  # leading-block, causal, sliding-window: the shift from one group to the next
    dead_rows: tuple[int, ...] = ()  # rows fully masked on top of the kind (shifted by the group)
    flips: tuple[tuple[int, int], ...] = ()  # (row, column) entries inverted after the kind

    def __post_init__(self) -> None:
        if self.kind not in MASK_KINDS:
            raise spec_error("mask", f"kind must be one of {MASK_KINDS}", self.kind)
        object.__setattr__(self, "rows", tuple(int(r) for r in self.rows))
        object.__setattr__(self, "pads", tuple(int(p) for p in self.pads))
        object.__setattr__(self, "dead_rows", tuple(int(r) for r in self.dead_rows))
        object.__setattr__(self, "flips", tuple((int(r), int(c)) for r, c in self.flips))
        object.__setattr__(self, "density", float(self.density))
        if not 0.0 <= self.density <= 1.0:
            raise spec_error("mask", "density must lie in [0, 1]", self.density)
        if (self.block < 0 or self.window < 0 or self.stagger < 0 or any(r < 0 for r in self.rows)
                or any(p < 0 for p in self.pads) or any(r < 0 for r in self.dead_rows)
                or any(r < 0 or c < 0 for r, c in self.flips)):
            raise spec_error("mask", "block, window, stagger, rows, pads, dead_rows and flips must be non-negative",
                             self)
        if self.stagger and self.kind not in STAGGERED_KINDS:
            raise spec_error("mask", f"stagger applies to the kinds {STAGGERED_KINDS} only", self)
        if self.kind == "fully-masked-row" and not self.rows:
            raise spec_error("mask", "fully-masked-row needs at least one row index", self)
        if self.side not in PAD_SIDES:
            raise spec_error("mask", f"side must be one of {PAD_SIDES}", self.side)
        if self.kind == "key-padding" and not self.pads:
            raise spec_error("mask", "key-padding needs at least one pad", self)
        if self.kind == "sliding-window" and self.window < 1:
            raise spec_error("mask", "sliding-window needs window >= 1", self)
        if self.kind == "leading-block" and self.block < 1:
            raise spec_error("mask", "leading-block needs block >= 1", self)

    # ---- replay -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The kind plus the fields that differ from their defaults."""
        full = {
            "kind": self.kind,
            "density": self.density,
            "block": self.block,
            "window": self.window,
            "offset": self.offset,
            "rows": list(self.rows),
            "pads": list(self.pads),
            "side": self.side,
            "stagger": self.stagger,
            "dead_rows": list(self.dead_rows),
            "flips": [list(f) for f in self.flips],
        }
        return {k: v for k, v in full.items() if k == "kind" or v not in (0, 0.0, [], "end")}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MaskSpec":
        d = dict(d)
        d["rows"] = tuple(d.get("rows", ()))
        d["pads"] = tuple(d.get("pads", ()))
        d["dead_rows"] = tuple(d.get("dead_rows", ()))
        d["flips"] = tuple(tuple(f) for f in d.get("flips", ()))
        return cls(**d)

    def describe(self) -> str:
        text = self._describe_kind()
        text = text + f"-staggered-{self.stagger}" if self.stagger else text
        text = text + f"+flips{[list(f) for f in self.flips]}" if self.flips else text
        return text + f"+dead-rows{list(self.dead_rows)}" if self.dead_rows else text

    def _describe_kind(self) -> str:
        k = self.kind
        if k == "random":
            return f"random({num(self.density)})"
        if k == "fully-masked-row":
            return f"fully-masked-rows{list(self.rows)}"
        if k == "leading-block":
            return f"leading-block-{self.block}"
        if k == "causal":
            return f"causal(offset={self.offset})"
        if k == "sliding-window":
            return f"sliding-window(window={self.window}, offset={self.offset})"
        if k == "key-padding":
            return f"key-padding{list(self.pads)}" + ("-at-start" if self.side == "start" else "")
        return k

    def kind_features(self) -> tuple[str, ...]:
        found = (_KIND_FEATURE[self.kind],) if self.kind in _KIND_FEATURE else ()
        found += ("mask:flipped",) if self.flips else ()
        return found + (("mask:left-padding",) if self.kind == "key-padding" and self.side == "start" else ())

    # ---- building ---------------------------------------------------------------------
    def keep(
        self, n_rows: int, n_cols: int, rng: np.random.Generator, group: int = 0, per_row: bool = False
    ) -> np.ndarray:
        """Boolean ``(n_rows, n_cols)``: True where the entry is kept.

        ``group`` picks the key-padding pad for the whole matrix, shifts the fully masked
        rows (the kind's and ``dead_rows``), and shifts a staggered kind by ``stagger * group``; with ``per_row`` each row i
        uses ``pads[i]`` instead (rows of a 2-D softmax are separate sequences).
        """
        keep = self._kind_keep(n_rows, n_cols, rng, group, per_row)
        if self.flips and keep.size:
            at = np.array(self.flips)
            rows, cols = at[:, 0] % n_rows, at[:, 1] % n_cols
            keep[rows, cols] = ~keep[rows, cols]
        return _hide_rows(keep, self.dead_rows, group) if self.dead_rows else keep

    def _kind_keep(self, n_rows: int, n_cols: int, rng: np.random.Generator, group: int, per_row: bool
                   ) -> np.ndarray:
        k = self.kind
        i = np.arange(n_rows)[:, None]
        j = np.arange(n_cols)[None, :]
        if k == "none":
            return np.ones((n_rows, n_cols), dtype=bool)
        if k == "random":
            return ~(rng.random((n_rows, n_cols)) < self.density)
        if k == "fully-masked-row":
            return _hide_rows(np.ones((n_rows, n_cols), dtype=bool), self.rows, group)
        shift = self.stagger * group
        if k == "leading-block":
            return np.broadcast_to(j >= self.block + shift, (n_rows, n_cols)).copy()
        if k == "single-unmasked":
            keep = np.zeros((n_rows, n_cols), dtype=bool)
            keep[np.arange(n_rows), rng.integers(0, n_cols, n_rows)] = True
            return keep
        if k == "causal":
            return j <= i + self.offset + shift
        if k == "sliding-window":
            return (j <= i + self.offset + shift) & (j > i + self.offset + shift - self.window)
        if k == "key-padding":
            if per_row:
                pads = np.array([self.pads[r % len(self.pads)] for r in range(n_rows)])[:, None]
            else:
                pads = self.pads[group % len(self.pads)]
            live = j >= pads if self.side == "start" else j < n_cols - pads
            return np.broadcast_to(live, (n_rows, n_cols)).copy()
        raise AssertionError(k)


def _hide_rows(keep: np.ndarray, rows: tuple[int, ...], group: int) -> np.ndarray:
    """``keep`` with the ``rows`` (shifted by ``group``, modulo the row count: other rows in other
    groups) wholly masked, in place."""
    if len(keep):
        keep[[(r + group) % len(keep) for r in rows], :] = False
    return keep


def keep_features(keep: np.ndarray) -> tuple[str, ...]:
    """Features read off a keep array whose last axis is the masked axis."""
    if keep.size == 0:
        return ()
    found = []
    per_row = keep.reshape(-1, keep.shape[-1]).sum(axis=1)
    if (per_row == 0).any():
        found.append("mask:fully-masked-row")
    if (per_row == 1).any() and keep.shape[-1] > 1:
        found.append("mask:single-unmasked-row")
    if (~keep).mean() >= 0.9:
        found.append("mask:dense")
    return tuple(found)


def mask_specs(n_rows: int, n_cols: int, kinds: Sequence[str] = MASK_KINDS) -> SearchStrategy[MaskSpec]:
    """A mask recipe for an ``n_rows x n_cols`` matrix; ``kinds`` in the order to shrink towards."""
    check_positive_int(n_rows, "n_rows")
    check_positive_int(n_cols, "n_cols")
    kinds = tuple(kinds)
    unknown = set(kinds) - set(MASK_KINDS)
    check_argument(bool(kinds) and not unknown, f"kinds must be a non-empty selection of {MASK_KINDS}, got {kinds!r}")
    return _mask_specs(n_rows, n_cols, kinds)


# Cached: building the strategy costs more than drawing from it.
@lru_cache(maxsize=1024)
def _mask_specs(n_rows: int, n_cols: int, kinds: tuple[str, ...]) -> SearchStrategy[MaskSpec]:
    # All kinds draw the same parameters and use the ones they need, so every
    # kind costs as many choices and shrinking follows the order of ``kinds``
    # (Hypothesis prefers fewer choices before anything else).
    row_bits = min(n_rows, 8)
    # Blocks shorter than the row first: a masked first tile followed by live entries.
    blocks = tuple(b for b in MASK_BLOCKS if b < n_cols) + tuple(b for b in MASK_BLOCKS if b >= n_cols)
    parts = st.tuples(
        st.sampled_from(kinds),
        st.sampled_from(DENSITIES),
        st.integers(1, 2**row_bits - 1),  # which rows are fully masked, as a bit set
        st.sampled_from(blocks),
        st.integers(1, n_cols),  # window
        st.sampled_from(("top-left", "bottom-right", "other")),
        st.integers(-n_rows, n_cols),  # the "other" diagonal offset
        st.integers(0, n_cols),  # pads for even and odd groups
        st.integers(0, n_cols),
        st.sampled_from(PAD_SIDES),
        st.sampled_from(STAGGERS),
        st.sampled_from(PAD_ORDERS),
    )
    return parts.map(lambda p: _interpret(n_rows, n_cols, *p))


def _interpret(
    n_rows: int,
    n_cols: int,
    kind: str,
    density: float,
    row_set: int,
    block: int,
    window: int,
    diagonal: str,
    other: int,
    pad_a: int,
    pad_b: int,
    side: str,
    stagger: int,
    pad_order: str = "as-drawn",
) -> MaskSpec:
    offset = {"top-left": 0, "bottom-right": n_cols - n_rows, "other": other}[diagonal]
    if kind == "random":
        return MaskSpec(kind, density=density)
    if kind == "fully-masked-row":
        return MaskSpec(kind, rows=tuple(r for r in range(min(n_rows, 8)) if row_set >> r & 1))
    if kind == "leading-block":
        return MaskSpec(kind, block=block, stagger=stagger)
    if kind == "causal":
        return MaskSpec(kind, offset=offset, stagger=stagger)
    if kind == "sliding-window":
        return MaskSpec(kind, window=window, offset=offset, stagger=stagger)
    if kind == "key-padding":
        if pad_order == "longest-first":
            pad_a, pad_b = 0, max(pad_b, 1)  # the first group unpadded, the next one padded
        return MaskSpec(kind, pads=(pad_a,) if pad_a == pad_b else (pad_a, pad_b), side=side)
    return MaskSpec(kind)
