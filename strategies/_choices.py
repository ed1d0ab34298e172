"""Choice helpers shared by the strategies (one idea: a rare switch that shrinks away)."""

from __future__ import annotations

from hypothesis import strategies as st


def rare(draw: st.DrawFn, odds: int) -> bool:
    """True for about one draw in ``odds`` (less in practice: Hypothesis draws the top of a
    small integer range less often than uniformly); shrinks towards False."""
    return draw(st.integers(0, odds - 1)) == odds - 1
