"""Special entries placed into an otherwise finite input: NaN, +inf and -0.0.

A kernel must propagate NaN and +inf (a row holding one has a defined, non-finite
answer) and must not let -0.0 change anything.  The contract checker finds these
entries in the tensor itself; the case lists them in its features.

``-inf`` is not a special here: it is how softmax inputs are masked (see
``strategies.masks``).  Formats without infinities (float8_e4m3fn) never get +inf.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from strategies._validation import spec_error
from strategies.lengths import TILE_WIDTHS
from verify.dtypes import FloatFormat

#: Simplest first: -0.0 is finite and always allowed.
SPECIAL_KINDS = ("neg-zero", "nan", "+inf")
_VALUE = {"neg-zero": -0.0, "nan": math.nan, "+inf": math.inf}


@dataclass(frozen=True)
class SpecialSpec:
    """One special entry: ``kind`` at ``index`` of input ``tensor`` (``"x"``, ``"q"``, ``"k"`` or ``"v"``).

    Indices are taken modulo the input's shape when built, so a spec stays valid
    while shrinking makes the input smaller.
    """

    kind: str
    tensor: str
    index: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.kind not in SPECIAL_KINDS:
            raise spec_error("special entry", f"kind must be one of {SPECIAL_KINDS}", self.kind)
        if self.tensor not in ("x", "q", "k", "v"):
            raise spec_error("special entry", "tensor must be 'x', 'q', 'k' or 'v'", self.tensor)
        object.__setattr__(self, "index", tuple(int(i) for i in self.index))
        if any(i < 0 for i in self.index):
            raise spec_error("special entry", "index entries must be non-negative", self.index)

    @property
    def value(self) -> float:
        return _VALUE[self.kind]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "tensor": self.tensor, "index": list(self.index)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SpecialSpec":
        return cls(d["kind"], d["tensor"], tuple(d["index"]))

    def describe(self) -> str:
        name = {"neg-zero": "-0.0", "nan": "nan", "+inf": "+inf"}[self.kind]
        if self.tensor == "x":
            return f"{name}@row{self.index[0]},col{self.index[1]}"
        return f"{name}@{self.tensor}[{','.join(map(str, self.index))}]"

    def place(self, array: np.ndarray) -> None:
        """Write the entry into ``array`` (whose shape the index is reduced modulo)."""
        where = tuple(i % n for i, n in zip(self.index, array.shape, strict=True))
        array[where] = self.value


def special_kinds(fmt: FloatFormat, allow_special_values: bool) -> tuple[str, ...]:
    """Kinds allowed for ``fmt``: -0.0 always; NaN and +inf when special values are allowed."""
    if not allow_special_values:
        return ("neg-zero",)
    return tuple(k for k in SPECIAL_KINDS if k != "+inf" or fmt.has_inf)


def edge_positions(n: int) -> tuple[int, ...]:
    """Indices of a dim of ``n`` where blocked kernels change path (smallest first): the last
    one, the first of each tiling's last tile (``lengths.TILE_WIDTHS``; its ragged tail, where
    the row has one), and either side of each tile's first edge.

    Drawn uniformly, a NaN landed in the last tile of a row of 65..300 too rarely for a search
    to see a kernel whose tail loop dropped NaN (``where(x > -inf, x, -inf)`` on the tail
    only; 4 of 9 cells, fourteenth red team, 2026-12-07).
    """
    found = {n - 1}
    for b in TILE_WIDTHS:
        if b < n:
            found.update((b - 1, b, (n - 1) // b * b))
    return tuple(sorted(i for i in found if 0 <= i < n))


@lru_cache(maxsize=1024)
def _positions(n: int) -> SearchStrategy[int]:
    """An index into a dim of ``n``: uniform, the last (in the ragged tail of every tiling), or
    one of its ``edge_positions``; shrinks to 0."""
    if n <= 1:
        return st.just(0)
    return st.one_of(st.integers(0, n - 1), st.just(n - 1), st.sampled_from(edge_positions(n)))


@lru_cache(maxsize=1024)
def special_specs(
    kinds: tuple[str, ...], shapes: tuple[tuple[str, tuple[int, ...]], ...]
) -> SearchStrategy[SpecialSpec]:
    """One special entry of one of ``kinds`` at a position inside one of ``shapes`` ((name, shape)
    pairs): each index uniform or at an edge of its dim (``edge_positions``)."""
    per_tensor = [
        st.builds(
            SpecialSpec,
            st.sampled_from(kinds),
            st.just(name),
            st.tuples(*(_positions(n) for n in shape)),
        )
        for name, shape in shapes
    ]
    return st.one_of(per_tensor)
