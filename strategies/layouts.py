"""Memory layouts: how a logical tensor is laid out in the storage a kernel receives.

Each layout is a *plan*: the shape of a contiguous base allocation and a view
function that maps the base to the logical shape.  Building fills the base with
NaN, writes the logical values through the view, moves the base to the device
and only then takes the view there, so the strides (and the NaN poison in the
gaps) survive ``.to(device)``.  A kernel that reads outside the view or ignores
the strides picks up NaN or scrambled values and fails visibly.

Softmax (2-D / 3-D / 4-D, last axis = the softmax axis):
  contiguous    plain row-major.
  row-padded    each row followed by a gap: row stride > length, last dim dense.
  transposed    stored column-major: the softmax axis has stride = rows.
  strided       every other element: last-dim stride 2.
  misaligned    contiguous, but starting one element into the allocation (the
                data pointer is not 16-byte aligned).
  lead-broadcast the batch stored once and expanded (stride 0), as a bias or logits shared
                across the batch are passed: every batch entry holds entry 0's values (the
                rest of the drawn values, and specials placed there, are dropped), while the
                rows (and heads) within it differ.
                A kernel that takes its row offsets from the shape, or that treats any
                stride-0 dim as "every row is the same", gets them wrong.
  row-broadcast one row stored per leading entry and expanded over the rows (stride 0 on
                the rows' dim, the innermost leading one), as a bias row shared by every
                query is passed: every row holds row 0's values.  A zero stride inside the
                leading dims, where a check of the outermost one (lead-broadcast) sees
                none; with a batch, the rows' dim no longer collapses with the batch's.
 3-D (batch, rows, length) and 4-D (batch, heads, rows, length) only, where the leading
 dims no longer collapse into one row stride (row r of the flattened input is not at
 r * stride(-2)):
  batch-sliced  each (rows, length) slab followed by a gap of whole rows, as when the
                batch is sliced out of a larger buffer: batch (and head) strides exceed
                rows x row stride.
  lead-permuted the leading dims (all but the softmax axis) stored in reverse order and
                permuted back: row stride = batch (x heads) x length, last dim dense.
Attention (B, H, N, D):
  contiguous, misaligned as above;
  bnhd             stored as (B, N, H, D) and transposed, as after a fused QKV projection.
  head-dim-padded  head dim followed by a gap: a sliced view of a wider last dim.
  strided-seq      every other sequence position: stride along N doubled.
  dim-major        stored as (B, H, D, N) and transposed (K^T kept as such): the head dim
                   has stride N, not 1.  Kernels that hard-code a unit stride there read
                   the wrong entries; ``Capabilities.unit_last_stride`` keeps it from targets
                   that refuse it.
  seq-sliced       the first N positions of a longer (B, H, N + 3, D) buffer, as K and V are
                   sliced out of a preallocated KV cache: rows dense (stride D), but the head
                   and batch strides are not N x D, so a kernel that derives them from the
                   shape reads the next head's rows from the cache's unused tail.
  batch-broadcast  batch entry 0 stored once and expanded over the batch (batch stride 0), as
                   a prefix's K and V shared by every sequence of a batch are passed.
  head-broadcast   head 0 stored once and expanded over the heads (head stride 0), as
                   grouped-query K and V are handed to a kernel by ``expand`` instead of a copy
                   (torch's SDPA efficient backend was reported wrong on such K/V, pytorch
                   #191937).  Every batch entry (head) then holds entry 0's values: the rest
                   of the drawn values, and specials placed there, are dropped.  Caught: an
                   output allocated with an input's strides (its batch entries, or heads, all
                   written to one place), a "broadcast" fast path that tests one zero stride
                   and assumes the others, a flattening ``view`` that refuses the input.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import torch

from strategies.features import ATTENTION_LAYOUTS, SOFTMAX_LAYOUTS

_GAP = 3  # odd on purpose: padded rows break every power-of-two alignment

Plan = tuple[tuple[int, ...], Callable[[torch.Tensor], torch.Tensor]]
#: The layouts stored once along one dim and expanded over it (stride 0), and that dim.
BROADCAST_DIM = {"lead-broadcast": 0, "row-broadcast": -2, "batch-broadcast": 0, "head-broadcast": 1}


def plan(layout: str, shape: tuple[int, ...]) -> Plan:
    """Base shape and base -> view function for ``layout`` and logical ``shape``."""
    *lead, n = shape
    if layout == "contiguous":
        return shape, lambda b: b
    if layout == "misaligned":
        numel = 1
        for s in shape:
            numel *= s
        return (numel + 1,), lambda b: b[1:].view(shape)
    if layout in ("row-padded", "head-dim-padded"):
        return (*lead, n + _GAP), lambda b: b[..., :n]
    if layout == "strided":
        return (*lead, 2 * n), lambda b: b[..., ::2]
    if layout == "transposed":
        return (*lead[:-1], n, lead[-1]), lambda b: b.transpose(-1, -2)
    if layout == "batch-sliced":
        *outer, rows = lead
        return (*outer, rows + _GAP, n), lambda b: b[..., :rows, :]
    if layout == "lead-permuted":
        order = tuple(reversed(range(len(lead)))) + (len(lead),)
        return (*reversed(lead), n), lambda b: b.permute(order)
    if layout in BROADCAST_DIM:
        dim = BROADCAST_DIM[layout]
        return shape[:dim] + (1,) + shape[dim + 1:], lambda b: b.expand(shape)
    if layout == "bnhd":
        bsz, heads, seq, dim = shape
        return (bsz, seq, heads, dim), lambda b: b.permute(0, 2, 1, 3)
    if layout == "dim-major":
        bsz, heads, seq, dim = shape
        return (bsz, heads, dim, seq), lambda b: b.transpose(-1, -2)
    if layout == "seq-sliced":
        bsz, heads, seq, dim = shape
        return (bsz, heads, seq + _GAP, dim), lambda b: b[:, :, :seq, :]
    if layout == "strided-seq":
        bsz, heads, seq, dim = shape
        return (bsz, heads, 2 * seq, dim), lambda b: b[:, :, ::2, :]
    if layout == "kv-packed":  # K's view; V is the same one H x D elements further in (pack_kv)
        bsz, heads, seq, dim = shape
        return (bsz, seq, 2, heads, dim), lambda b: b[:, :, 0].permute(0, 2, 1, 3)
    raise ValueError(f"unknown layout {layout!r}; use one of {SOFTMAX_LAYOUTS + ATTENTION_LAYOUTS}")


def materialize(x: torch.Tensor, layout: str, device: str = "cpu") -> torch.Tensor:
    """``x`` (on CPU, any dtype) in ``layout`` on ``device``, with NaN in the gaps."""
    if x.numel() == 0:
        # An empty array from numpy has every stride 0; torch allocates (3, 0, 8) with (8, 8, 1),
        # and a kernel may check x.stride(-1) == 1: give it what a caller's torch.empty gives.
        x = torch.empty(x.shape, dtype=x.dtype)
    if layout == "contiguous":
        return x.contiguous().to(device)
    if layout in BROADCAST_DIM:
        # Index 0 of the broadcast dim, once, expanded: no gaps to poison.  A copy of that
        # entry alone (a narrowed view would keep the dropped entries in its storage).
        dim = BROADCAST_DIM[layout]
        if x.shape[dim] == 0:  # an empty batch (the empty-batch probe): one stand-in entry, expanded to none
            entry = x.new_zeros(x.shape[:dim] + (1,) + x.shape[dim + 1:])
        else:
            entry = x.narrow(dim, 0, 1).clone(memory_format=torch.contiguous_format)
        return entry.to(device).expand(x.shape)
    base_shape, view = plan(layout, tuple(x.shape))
    # Filled in float64 (exact for every supported dtype), then converted once.
    base = torch.full(base_shape, float("nan"), dtype=torch.float64)
    view(base).copy_(x.to(torch.float64))
    return view(base.to(x.dtype).to(device))


def pack_kv(k: torch.Tensor, v: torch.Tensor, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """``k`` and ``v`` (CPU, (B, H, N, D) each, one dtype) as the two halves of one (B, N, 2, H, D)
    buffer on ``device`` (``kv-packed``): views that share a storage, V's H x D elements in."""
    if k.shape != v.shape or k.dtype != v.dtype:
        raise ValueError(f"kv-packed needs K and V of one shape and dtype, got {tuple(k.shape)} {k.dtype} "
                         f"and {tuple(v.shape)} {v.dtype}")
    base = torch.stack((k.transpose(1, 2), v.transpose(1, 2)), dim=2).contiguous().to(device)
    return base[:, :, 0].permute(0, 2, 1, 3), base[:, :, 1].permute(0, 2, 1, 3)


def is_aligned(layout: str, shape: tuple[int, ...], itemsize: int, alignment: int) -> bool:
    """Whether ``layout`` keeps the data pointer and every stride but the last at multiples of
    ``alignment`` bytes, with a unit last stride (where the last dim is longer than 1), as
    vectorized kernels (16-byte loads) assume.  Contiguous always qualifies: it is the layout
    every kernel must take.  The strides of size-1 dims count too: SDPA's efficient backend
    refused a K of one key whose row stride was 19 elements ("cutlassF: no kernel found to
    launch!", H200, 2026-12-01), though torch calls such a tensor contiguous.
    """
    if layout == "contiguous" or alignment <= 1:
        return True
    if has_strided_last_dim(layout, shape):
        return False
    strides, offset = _view_strides(layout, shape)
    if (offset * itemsize) % alignment:
        return False
    return all((st * itemsize) % alignment == 0 for st in strides[:-1])


def has_strided_last_dim(layout: str, shape: tuple[int, ...]) -> bool:
    """Whether the view's last dim (longer than 1) has a stride other than 1."""
    return shape[-1] > 1 and _view_strides(layout, shape)[0][-1] != 1


# Cached: the strategies ask for every layout of every tensor they draw.
@lru_cache(maxsize=4096)
def _view_strides(layout: str, shape: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """(strides, storage offset) of ``layout``'s view of ``shape``, read off a meta tensor."""
    base_shape, view = plan(layout, shape)
    t = view(torch.empty(base_shape, device="meta"))
    return t.stride(), t.storage_offset()


def is_noncontiguous(layout: str, shape: tuple[int, ...]) -> bool:
    """Whether the view is non-contiguous for this shape (size-1 dims can make a layout trivial)."""
    base_shape, view = plan(layout, shape)
    return not view(torch.empty(base_shape, device="meta")).is_contiguous()


def probe_layout_order(allowed: tuple[str, ...], turn: int) -> tuple[str, ...]:
    """``allowed`` reordered for a probe's case, so that its simplest draw (the first) is the
    layout ``turn`` places among those that keep every value (not ``BROADCAST_DIM``'s, which
    keep one entry's values), then the rest.

    A probe's case is tried once a cell, in its simplest form, and drawn plainly that form was
    contiguous everywhere: the probe round (about two dozen examples) never saw a stride, an
    offset view or a padded row, and the ordinary examples after it are few in a short cell.  A
    blind mutant that took K's last stride for 1 lived in 2 cells of 9 and one that ignored a
    softmax view's storage offset in 1 (fourteenth red team, 2026-12-07).  Turned by the probe
    (and, for attention, the tensor), the round's cases walk through the layouts instead."""
    keeping = [name for name in allowed if name not in BROADCAST_DIM]
    if not keeping:
        return allowed
    k = turn % len(keeping)
    first = keeping[k:] + keeping[:k]
    return tuple(first) + tuple(name for name in allowed if name not in first)
