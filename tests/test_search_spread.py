"""How a cell's search spends its examples: no shape many times over in its plain runs
(``SHAPE_REPEATS``), and the climb towards the largest error only in its last share
(``TARGET_SHARE``)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from kernels.registry import get_target
from verify import search


def _cases(name: str, dtype: str, opts: search.CheckOptions) -> list:
    seen: list = []
    with search.observing_cases(before=seen.append):
        cell = search.check_cell(get_target(name), dtype, opts)
    assert cell.status == "passed", cell.violation
    return seen


def _shapes(name: str, dtype: str, opts: search.CheckOptions) -> list[tuple]:
    return [search.shape_signature(case) for case in _cases(name, dtype, opts)]


@pytest.mark.parametrize(("name", "n"), [("ref-online-softmax", 120), ("ref-blocked-attention", 60)])
def test_a_plain_run_repeats_no_shape_past_the_limit(monkeypatch, name: str, n: int) -> None:
    monkeypatch.setattr(search, "TARGET_SHARE", 0.0)  # one plain run: no probe round, no climb
    opts = search.CheckOptions(max_examples=n, seed=5, probe_examples=0, shrink=False, compare_naive=False)
    cases = _cases(name, "float32", opts)
    seen = [search.shape_signature(case) for case in cases]
    limit = max(search.SHAPE_REPEATS, math.ceil(search.SHAPE_REPEAT_SHARE * n))
    assert len(seen) == n
    # Hypothesis's mutations of an example keep its seed: each seed comes once
    assert max(Counter(case.spec.seed for case in cases).values()) <= search.SEED_REPEATS
    assert max(Counter(seen).values()) <= limit
    assert len(set(seen)) >= n // limit
    # and no row length (Nk for attention: the first entry for softmax, the second else)
    lengths = Counter(s[1] if name.endswith("attention") else s[0] for s in seen)
    assert max(lengths.values()) <= max(search.LENGTH_REPEATS, math.ceil(search.LENGTH_REPEAT_SHARE * n))


def test_a_full_search_keeps_its_example_count_and_limits_its_plain_runs() -> None:
    n = 50
    opts = search.CheckOptions(max_examples=n, seed=5, shrink=False, compare_naive=False)
    seen = _shapes("ref-online-softmax", "float32", opts)
    assert len(seen) == n
    # first tenth, one example of each probe (shapes forced), the rest, the climbing share
    first = int(n * search.PROBE_ROUND_AT)
    probes = len(search.probe_round(get_target("ref-online-softmax"), "float32", opts))
    climbing = int(n * search.TARGET_SHARE)
    assert probes and climbing
    plain = Counter(seen[:first] + seen[first + probes:n - climbing])
    assert max(plain.values()) <= search.SHAPE_REPEATS


def test_shape_signatures_name_lengths_causality_and_mask_kind() -> None:
    from strategies.attention import AttentionCase, AttentionSpec
    from strategies.masks import MaskSpec
    from strategies.softmax import SoftmaxCase, SoftmaxSpec

    spec = AttentionSpec(dtype="float16", batch=1, heads_q=2, heads_kv=1, seq_q=5, seq_k=9, head_dim=8, causal=True,
                         mask=MaskSpec("key-padding", pads=(2,)))
    assert search.shape_signature(AttentionCase(spec)) == (5, 9, True, "key-padding")
    assert search.shape_signature(SoftmaxCase(SoftmaxSpec(dtype="float32", rows=3, length=17))) == (17, "none")


def test_many_heads_pairs_follow_the_measured_speed_within_the_floor_and_the_cap() -> None:
    cap = search.strategies.attention.MANY_HEADS_MAX_PAIRS
    # 1,000 pairs in 0.1 s: 1e-4 s a pair, so a 1 s allowance affords 10,000 pairs: the cap
    assert search.many_heads_pairs(64, 0.1, 1000, None) == cap
    # 50 ms a pair (an interpreted kernel): 20 pairs in 1 s, so the floor
    assert search.many_heads_pairs(64, 50.0, 1000, None) == 64
    # with a budget, MANY_HEADS_SHARE of it: 10 s -> 1 s -> 200 pairs at 5 ms a pair
    assert search.many_heads_pairs(64, 5.0, 1000, 10.0) == int(search.MANY_HEADS_SHARE * 10.0 / 5e-3)
    # nothing measured yet: the floor
    assert search.many_heads_pairs(64, 0.0, 0, None) == 64


@pytest.mark.parametrize(("seconds", "pairs"), [(1e6, search.strategies.attention.MANY_HEADS_MAX_PAIRS), (1e-9, 64)])
def test_the_probe_round_sizes_the_many_heads_probe_by_the_targets_speed(monkeypatch, seconds: float,
                                                                         pairs: int) -> None:
    # A fast target gets up to MANY_HEADS_MAX_PAIRS on the CPU profile, a slow one the profile's 64:
    # the allowance stands in for the speed.
    monkeypatch.setattr(search, "MANY_HEADS_SECONDS", seconds)
    opts = search.CheckOptions(max_examples=52, seed=3, shrink=False, compare_naive=False)  # a probe round (25 probes)
    assert search.PROFILES["cpu"].attention_many_heads_pairs == 64
    cases = _cases("ref-blocked-attention", "float16", opts)
    # up to the allowance: the probe's simplest case has 3/4 of it or more (a group of query heads
    # that is no power of two, strategies.attention._past_powers_of_two)
    assert 3 * pairs // 4 <= max(case.spec.batch * case.spec.heads_q for case in cases) <= pairs
