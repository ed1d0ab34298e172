"""Choice helpers shared by the strategies: a rare switch that shrinks away, and an integer
that shrinks towards its top."""

from __future__ import annotations

from hypothesis import strategies as st


def rare(draw: st.DrawFn, odds: int) -> bool:
    """True for about one draw in ``odds`` (less in practice: Hypothesis draws the top of a
    small integer range less often than uniformly); shrinks towards False."""
    return draw(st.integers(0, odds - 1)) == odds - 1


def largest_first(draw: st.DrawFn, low: int, high: int) -> int:
    """An integer in ``[low, high]`` whose simplest (shrunk) value is ``high``: for the sizes of
    a probe, whose first example (a forced probe's only one) should be its strongest."""
    return high - draw(st.integers(0, high - low))
