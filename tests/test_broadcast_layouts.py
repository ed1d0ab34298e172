"""The zero-stride attention layouts (strategies.layouts: batch-broadcast, head-broadcast): what
they build, who may be given them (Capabilities.zero_strides), and the bug they exist for."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given

from kernels.reference import naive_attention
from kernels.registry import Target, get_target
from strategies.attention import AttentionCase, attention_cases
from strategies.features import ATTENTION_BROADCAST_LAYOUTS
from strategies.layouts import BROADCAST_DIM, materialize
from tests.test_strategies import checks
from verify import search
from verify.capabilities import Capabilities


@pytest.mark.parametrize("layout", ATTENTION_BROADCAST_LAYOUTS)
def test_a_broadcast_layout_stores_one_entry_and_expands_it(layout: str) -> None:
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).view(2, 3, 4, 5)
    t = materialize(x, layout)
    dim = BROADCAST_DIM[layout]
    assert t.shape == x.shape and t.stride(dim) == 0 and not t.is_contiguous()
    assert t.untyped_storage().nbytes() == x.numel() // x.shape[dim] * 4
    assert torch.equal(t, x.narrow(dim, 0, 1).expand(x.shape))


@checks(60)
@given(attention_cases(dtypes=("float32",), max_seq=12, caps=Capabilities(zero_strides=False)))
def test_a_target_without_zero_strides_gets_none(case: AttentionCase) -> None:
    assert not set(case.spec.layouts) & set(ATTENTION_BROADCAST_LAYOUTS)
    x = case.build()
    assert all(0 not in t.stride() or 1 in t.shape for t in (x.q, x.k, x.v))


def _output_in_the_querys_layout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float,
                                 causal: bool = False, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Right values written into an output laid out with Q's strides, as a kernel that keeps its
    input's layout does (``torch.empty_strided(q.shape, q.stride())``): fine for every layout
    with distinct addresses; for an expanded Q every batch entry (or head) lands in one place and
    the last one written wins."""
    right = naive_attention(q, k, v, scale=scale, causal=causal, mask=mask, compute_dtype=torch.float64).to(q.dtype)
    out = torch.empty_strided(q.shape, q.stride(), dtype=q.dtype, device=q.device)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            out[b, h] = right[b, h]  # one (b, h) slab at a time: a kernel's programs, in order
    return out


def _mutant() -> Target:
    return Target(name="output-in-the-querys-layout", op="attention", fn=_output_in_the_querys_layout,
                  caps=get_target("ref-naive-attention").caps, kind="mutant",
                  description="allocates its output with the query's strides")


def test_an_output_laid_out_like_an_expanded_query_is_caught_by_the_broadcast_layouts(monkeypatch) -> None:
    opts = search.CheckOptions(max_examples=120, seed=3, shrink=False, compare_naive=False,
                               profile=search.PROFILES["cpu"])
    monkeypatch.setattr(search, "TILES_SECONDS", 0.0)  # the ordinary draws are the point here
    cell = search.check_cell(_mutant(), "float32", opts)
    assert cell.status == "violated", cell.counterexample
    assert "broadcast" in cell.counterexample
    caps = get_target("ref-naive-attention").caps
    without = Target(name="no-zero-strides", op="attention", fn=_output_in_the_querys_layout,
                     caps=Capabilities(**{**caps.__dict__, "zero_strides": False}), kind="mutant",
                     description="the same, never given an expanded input")
    # The control: the same kernel, never handed an expanded input, passes.  40 examples: the
    # 120 above are the search's budget to find the violation, and passing ones cost it all.
    control = dataclasses.replace(opts, max_examples=40)
    assert search.check_cell(without, "float32", control).status == "passed"
