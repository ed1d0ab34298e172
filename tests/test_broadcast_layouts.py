"""The zero-stride layouts (strategies.layouts: batch-broadcast, head-broadcast, lead-broadcast,
row-broadcast): what they build, who may be given them (Capabilities.zero_strides), and the bugs
they exist for."""

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


@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 5), (2, 2, 3, 5)])
def test_the_row_broadcast_layout_stores_a_row_per_leading_entry(shape: tuple[int, ...]) -> None:
    x = torch.randn(shape)
    t = materialize(x, "row-broadcast")
    assert t.shape == x.shape and t.stride(-2) == 0 and t.stride(-1) == 1
    assert t.untyped_storage().nbytes() == x.numel() // shape[-2] * 4
    assert torch.equal(t, x.narrow(-2, 0, 1).expand(shape))


def _softmax_deduped_on_the_first_dim(x: torch.Tensor) -> torch.Tensor:
    """Right for an input expanded over its first dim, and only there: a zero stride anywhere
    in the leading dims is taken for "every entry of dim 0 is the same", and the softmax of
    entry 0 is handed out for all of them."""
    if x.dim() >= 2 and 0 in x.stride()[:-1]:
        return torch.softmax(x[:1].double(), -1).to(x.dtype).expand(x.shape).contiguous()
    return torch.softmax(x.double(), -1).to(x.dtype)


def test_a_zero_stride_taken_for_the_first_dims_is_caught_by_the_row_broadcast_layout(monkeypatch) -> None:
    caps = get_target("torch.softmax").caps
    mutant = Target(name="deduped-on-dim-0", op="softmax", fn=_softmax_deduped_on_the_first_dim, caps=caps,
                    kind="mutant", description="a zero stride anywhere taken for one on dim 0")
    opts = search.CheckOptions(max_examples=150, seed=3, shrink=False, compare_naive=False,
                               profile=search.PROFILES["cpu"])
    cell = search.check_cell(mutant, "float32", opts)
    assert cell.status == "violated", cell.counterexample
    assert "row-broadcast" in cell.counterexample
    without = dataclasses.replace(mutant, caps=Capabilities(**{**caps.__dict__, "zero_strides": False}))
    assert search.check_cell(without, "float32", dataclasses.replace(opts, max_examples=40)).status == "passed"
