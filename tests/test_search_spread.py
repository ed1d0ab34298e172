"""How a cell's search spends its examples: no shape many times over in its plain runs
(``SHAPE_REPEATS``), and the climb towards the largest error only in its last share
(``TARGET_SHARE``)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from kernels.registry import get_target
from verify import search


def _shapes(name: str, dtype: str, opts: search.CheckOptions) -> list[tuple]:
    seen: list[tuple] = []
    with search.observing_cases(before=lambda case: seen.append(search.shape_signature(case))):
        cell = search.check_cell(get_target(name), dtype, opts)
    assert cell.status == "passed", cell.violation
    return seen


@pytest.mark.parametrize(("name", "n"), [("ref-online-softmax", 120), ("ref-blocked-attention", 60)])
def test_a_plain_run_repeats_no_shape_past_the_limit(monkeypatch, name: str, n: int) -> None:
    monkeypatch.setattr(search, "TARGET_SHARE", 0.0)  # one plain run: no probe round, no climb
    opts = search.CheckOptions(max_examples=n, seed=5, probe_examples=0, shrink=False, compare_naive=False)
    seen = _shapes(name, "float32", opts)
    limit = max(search.SHAPE_REPEATS, math.ceil(search.SHAPE_REPEAT_SHARE * n))
    assert len(seen) == n
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
