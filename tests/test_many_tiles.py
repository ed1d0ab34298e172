"""The many-tiles probe: attention over hundreds to thousands of queries and keys and many
(batch, head) pairs, climbed rung by rung (``strategies.attention.TILES_RUNGS``) as far as the
target's measured speed allows (``verify.search.climb_tiles``).  CPU only, about half a minute.
"""

from __future__ import annotations

import pytest
import torch

from kernels.reference import naive_attention
from kernels.registry import Target, get_target
from strategies import attention as A
from verify import search

#: The emulated kernel's grid: one program a SM of an H200, query tiles of 64.
PROGRAMS, TILE = 132, 64


def _stale_causal_bound(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float, causal: bool = False,
                        mask: torch.Tensor | None = None) -> torch.Tensor:
    """A persistent causal FlashAttention, emulated: PROGRAMS programs take the (pair, query tile)
    items in turn, and each computes its causal key bound once, from its first item's tile.  Items
    past the first round that lie further down their pair's diagonal lose their latest keys."""
    batch, heads, seq_q, _ = q.shape
    seq_k = k.shape[2]
    visible = torch.ones(batch, heads, seq_q, seq_k, dtype=torch.bool, device=q.device)
    if mask is not None:
        visible = visible & mask.to(torch.bool).expand(batch, heads, seq_q, seq_k)
    if causal:
        tiles = -(-seq_q // TILE)
        item = torch.arange(batch * heads * tiles, device=q.device).view(batch, heads, tiles)
        first_tile = (item % PROGRAMS) % tiles  # the tile of the item the program started on
        bound = ((first_tile + 1) * TILE).clamp(max=seq_k).repeat_interleave(TILE, dim=2)[:, :, :seq_q]
        keys = torch.arange(seq_k, device=q.device)
        rows = torch.arange(seq_q, device=q.device)
        visible = visible & (keys <= rows[:, None]) & (keys < bound[..., None])
    return naive_attention(q, k, v, scale=scale, mask=visible, compute_dtype=torch.float64)


def _mutant() -> Target:
    caps = get_target("ref-naive-attention").caps
    return Target(name="persistent-stale-causal-bound", op="attention", fn=_stale_causal_bound, caps=caps,
                  description="persistent grid whose causal key bound is its first item's", kind="mutant")


def _opts(**kw) -> search.CheckOptions:
    # 52: the probe round runs only where its probes (25 for attention) fit in half the examples.
    return search.CheckOptions(max_examples=52, seed=1, shrink=False, compare_naive=False,
                               profile=search.PROFILES["cpu"], **kw)


def test_expected_seconds_grow_faster_than_the_work_past_the_caches() -> None:
    small = (A.TILES_RUNGS[0][0] ** 2, 1.0)  # a pilot under TILES_CACHE_WORK: linear below it
    assert search.tiles_seconds((1000, 0.01), (10, 10)) == pytest.approx(0.01 * search.tiles_work(10, 10) / 1000)
    first, second = A.TILES_RUNGS[0], A.TILES_RUNGS[1]
    pilot = (search.tiles_work(*first), 1.0)
    ratio = search.tiles_work(*second) / search.tiles_work(*first)
    # A little faster than the work (the CPU measured 2.8x the time for 3x the work, 24x for 13.6x).
    assert ratio < search.tiles_seconds(pilot, second) < ratio ** 1.5
    assert search.tiles_seconds(small, first) > 0
    assert not search.tiles_rung_fits(None, first, 0.0, None)
    assert search.tiles_rung_fits((search.tiles_work(*first), 1.0), first, 0.0, None)
    assert not search.tiles_rung_fits((search.tiles_work(*first), 1.0), first, search.TILES_SECONDS - 0.5, None)
    assert not search.tiles_rung_fits((search.tiles_work(*first), 1.0), first, 0.0, 5.0)  # GRID_SHARE of 5 s
    # A long budget's share may pass TILES_SECONDS: a rung of 10 s fits in a tenth of 300 s.
    ten = (search.tiles_work(*first), 10.0)
    assert search.tiles_rung_fits(ten, first, 0.0, 300.0) and not search.tiles_rung_fits(ten, first, 0.0, None)
    for (length, pairs), (longer, _) in zip(A.TILES_RUNGS, A.TILES_RUNGS[1:]):
        assert longer > length and search.tiles_work(longer, A.tiles_pairs(longer)) < 4.1 * search.tiles_work(length, pairs)
        assert pairs * -(-length // 64) > 148 and pairs * -(-length // 128) > 132 and 132 % -(-length // 64)


def test_a_fixed_cost_a_check_is_not_scaled_with_the_work() -> None:
    first = A.TILES_RUNGS[0]
    # A pilot of a fifth of the rung's work whose 1.5 s are 1.2 s of fixed cost (the H200's small
    # GPU checks): the whole time scaled says over 7.5 s (the work ratio is 5, weighed more past
    # the caches), past a 60 s cell's 6 s; only the 0.3 s beyond the fixed cost scaled, under 4 s.
    pilot = (search.tiles_work(*first) // 5, 1.5)
    whole = search.tiles_seconds(pilot, first)
    assert whole > 7.5
    assert search.tiles_seconds(pilot, first, 1.2) == pytest.approx(1.2 + 0.3 * whole / 1.5)
    assert not search.tiles_rung_fits(pilot, first, 0.0, 60.0) and search.tiles_rung_fits(pilot, first, 0.0, 60.0, 1.2)
    # The fixed cost is clipped to the pilot's time, and a negative one counts as none.
    assert search.tiles_seconds(pilot, first, 9.0) == pytest.approx(1.5)
    assert search.tiles_seconds(pilot, first, -1.0) == pytest.approx(whole)
    # A pilot whose time grows with its work (an interpreted kernel) stays out of reach.
    slow = (search.tiles_work(*first) // 5, 20.0)
    assert not search.tiles_rung_fits(slow, first, 0.0, None, 0.2)


@pytest.fixture
def one_rung(monkeypatch) -> tuple[int, int]:
    """The first rung alone, and time enough for it whatever the machine's load: the estimates
    scale the pilot's whole time, which load stretches (a CPU-heavy run beside this one made the
    first rung's 1 s look like 15)."""
    monkeypatch.setattr(A, "TILES_RUNGS", A.TILES_RUNGS[:1])
    monkeypatch.setattr(search, "TILES_SECONDS", 120.0)
    return A.TILES_RUNGS[0]


def test_a_fast_target_climbs_what_its_speed_affords_and_a_budget_stops_it(one_rung) -> None:
    target = get_target("ref-naive-attention")
    seen: list = []
    with search.observing_cases(before=seen.append):
        cell = search.check_cell(target, "float32", _opts())
    assert cell.status == "passed"
    first = one_rung
    assert cell.tiles_probe.startswith(f"many-tiles: up to {first[0]} x {first[0]} over {first[1]} pairs"), \
        cell.tiles_probe
    tiles = [c for c in seen if "attn:many-tiles" in c.features]
    assert tiles and tiles[0].spec.causal and tiles[0].spec.seq_q == first[0]
    assert cell.features["attn:many-tiles"] >= 1
    tried: list = []
    with search.observing_cases(before=tried.append):
        budgeted = search.check_cell(target, "float32", _opts(budget_s=4.0))  # GRID_SHARE: 0.4 s
    # Not tried, or (on a loaded machine) the budget spent before the probe's turn came.
    assert budgeted.status == "passed" and tried and not any("attn:many-tiles" in c.features for c in tried)
    assert budgeted.tiles_probe == "" or budgeted.tiles_probe.startswith("many-tiles not tried"), \
        budgeted.tiles_probe


def test_a_persistent_grid_that_keeps_its_first_causal_bound_is_caught_only_by_the_probe(monkeypatch,
                                                                                       one_rung) -> None:
    cell = search.check_cell(_mutant(), "float32", _opts())
    assert cell.status == "violated", cell.tiles_probe
    assert "causal" in cell.counterexample and f"Nq={one_rung[0]}" in cell.counterexample
    # The ordinary draws (at most 96 queries, 8 pairs: 16 items) never give a program a second item.
    monkeypatch.setattr(search, "TILES_SECONDS", 0.0)
    assert search.check_cell(_mutant(), "float32", _opts()).status == "passed"
