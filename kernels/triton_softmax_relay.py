"""The relay schedule of the Triton softmax: long rows cut into chunks that wait in the L2.

The cooperative schedule (``kernels.triton_softmax``) holds each chunk in registers from
its load to its store, so a program can have one or two chunks in flight and a SM only as
many programs as its registers allow; every program waits for its row's partners with
little else to do.  Here a chunk goes through a program twice, ``LAG`` work items apart:

* **first visit** -- load the chunk from HBM, compute its ``(m_c, l_c)`` and publish them
  (one 64-bit word a chunk, as the cooperative schedule does).  On the precise float32 path
  with ``KEEP_P`` the exponentials ``p = exp(x - safe_max(m_c))`` are written to the output
  (they stay in the L2) and the input is not read again.
* **second visit** -- read the row's published statistics, merge them in float64, read the
  chunk again (the input, or with ``KEEP_P`` its kept exponentials) from the L2 and write
  ``y = p exp(m_c - shift) / l``.

Work items are ``(row, chunk)`` pairs in row-major order, dealt round-robin to a persistent
grid of ``P`` programs: program ``q`` visits items ``q, q + P, q + 2P, ...``.  In iteration
``t`` it issues the loads of its next item, of item ``t - LAG``'s second read and of that
item's slots, then does item ``t``'s first visit and item ``t - LAG``'s second.  With rows of
at most ``P`` chunks and ``LAG = 2`` a row's partners finished their first visits an iteration
ago, so the slots are normally complete at the first read.  Only ``(LAG + 1) P`` chunks are in
flight (the launch keeps them within half the L2), and a program holds at most three chunks,
so a SM runs many programs and their waits overlap each other's memory traffic.

A partner that is not resident, or late past ``spin_limit`` polls, is rebuilt from the input
by the waiting program (``_cooperative_row_stats``): the kernel never deadlocks.

Contract and error: those of ``_softmax_cooperative_kernel``, on the same code: the chunk
statistics come from ``_chunk_stats`` and the output from ``_coop_finish``.  On the fast
float32 and 16-bit paths the second visit recomputes ``p`` from the input it reads again
(the same code on the same bits, so the same ``p``); on the precise path ``p`` is kept
(``KEEP_P``) or recomputed the same way.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.triton_softmax import (
    _COOP_EMPTY,
    _chunk_stats,
    _coop_publish,
    _exp,
    _gather_chunk_stats,
    _lse,
    _merge_f64,
    _poll_slots,
    _times_f64,
    programs_per_sm,
)
from kernels.triton_support import device_properties, num_sms, safe_max


@triton.jit
def _relay_load(base, row, stride, cols, ok, POLICY: tl.constexpr):
    return tl.load(base + row * stride + cols, mask=ok, other=float("-inf"), eviction_policy=POLICY)


@triton.jit
def _relay_finish(x_row, y_row, lse_at, slots, packed, r, n_cols, n_chunks, c, cols, in_row, spin_limit,
                  CHUNK: tl.constexpr, BLOCK_S: tl.constexpr, KEEP_P: tl.constexpr, PRECISE: tl.constexpr,
                  WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr):
    """Second visit of chunk c: merge the row's statistics (every chunk's, ours included, as
    published) and write ``y = p exp(m_c - shift) / l`` from ``r``, the chunk read again (its
    kept exponentials with ``KEEP_P``, else its input)."""
    idx = tl.arange(0, BLOCK_S)
    valid = idx < n_chunks
    mc, lc = _gather_chunk_stats(x_row, slots, packed, n_cols, n_chunks, -1, spin_limit, slots,
                                 CHUNK, BLOCK_S, PRECISE, False)
    mc = tl.where(valid, mc, float("-inf"))
    lc = tl.where(valid, lc, 0.0)
    shift, l = _merge_f64(mc, lc)
    if WRITE_Y:
        # Our own statistics as published (or rebuilt from the same bits): the m_c that
        # the kept exponentials were shifted by.
        m_c = tl.max(tl.where(idx == c, mc, float("-inf")), axis=0)
        scale = tl.exp(m_c.to(tl.float64) - shift.to(tl.float64)) / tl.where(l == 0.0, 1.0, l)
        if KEEP_P:
            p = r
        else:
            p = _exp(r.to(tl.float32), safe_max(m_c), PRECISE)
        if PRECISE:
            y = _times_f64(p, scale)
        else:
            y = p * scale.to(tl.float32)
        tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=in_row, eviction_policy="evict_first")
    if WRITE_LSE:
        if c == 0:
            tl.store(lse_at, _lse(shift.to(tl.float64), l).to(tl.float32))


@triton.jit
def _softmax_relay_kernel(
    X, Y, LSE, SLOTS, n_rows, n_cols, stride_xr, stride_yr, n_chunks, n_items, spin_limit,
    CHUNK: tl.constexpr, BLOCK_S: tl.constexpr, LAG: tl.constexpr, KEEP_P: tl.constexpr,
    PRECISE: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr, FIRST: tl.constexpr,
):
    pid = tl.program_id(0)
    n_progs = tl.num_programs(0)
    offs = tl.arange(0, CHUNK)
    n_steps = (n_items - pid + n_progs - 1) // n_progs  # items of this program
    item = tl.zeros([], tl.int64) + pid
    row = item // n_chunks
    cols = (item - row * n_chunks) * CHUNK + offs
    x = _relay_load(X, row, stride_xr, cols, cols < tl.where(item < n_items, n_cols, 0), FIRST)
    for t in range(0, n_steps + LAG):
        # Everything this iteration reads is issued first: the next item's input from HBM,
        # the lagged item's second read and its row's slots from the L2.
        a_item = tl.zeros([], tl.int64) + pid + t * n_progs
        a_row = a_item // n_chunks
        a_cols = (a_item - a_row * n_chunks) * CHUNK + offs
        nxt = a_item + n_progs
        nxt_row = nxt // n_chunks
        nxt_cols = (nxt - nxt_row * n_chunks) * CHUNK + offs
        x_next = _relay_load(X, nxt_row, stride_xr, nxt_cols, nxt_cols < tl.where(nxt < n_items, n_cols, 0), FIRST)
        # Before the lag has passed there is no second visit: a clamped item (integer division
        # truncates toward zero, so a negative item would give negative columns) and empty masks.
        b_ok = t >= LAG
        b_item = tl.maximum(a_item - LAG * n_progs, 0)
        b_row = b_item // n_chunks
        b_c = b_item - b_row * n_chunks
        b_cols = b_c * CHUNK + offs
        b_in = b_cols < tl.where(b_ok, n_cols, 0)
        r = tl.zeros([CHUNK], tl.float32)
        if WRITE_Y:
            if KEEP_P:
                r = tl.load(Y + b_row * stride_yr + b_cols, mask=b_in, other=0.0, eviction_policy="evict_first")
            else:
                r = _relay_load(X, b_row, stride_xr, b_cols, b_in, "evict_first").to(tl.float32)
        packed = _poll_slots(SLOTS + b_row * n_chunks, tl.where(b_ok, n_chunks, 0), -1, BLOCK_S)

        if t < n_steps:
            m_a, p_a, l_a = _chunk_stats(x.to(tl.float32), PRECISE)
            if KEEP_P:
                tl.store(Y + a_row * stride_yr + a_cols, p_a, mask=a_cols < n_cols, eviction_policy="evict_last")
            _coop_publish(SLOTS + a_row * n_chunks, a_item - a_row * n_chunks, m_a, l_a, a_item < n_items)
        if b_ok:
            _relay_finish(X + b_row * stride_xr, Y + b_row * stride_yr, LSE + b_row, SLOTS + b_row * n_chunks,
                          packed, r, n_cols, n_chunks, b_c, b_cols, b_in, spin_limit,
                          CHUNK, BLOCK_S, KEEP_P, PRECISE, WRITE_Y, WRITE_LSE)
        x = x_next


def relay_constexprs(chunk: int, warps: int, n_chunks: int, lag: int, keep_p: bool, precise: bool,
                     write_y: bool, write_lse: bool) -> dict:
    """Compile-time arguments (and ``num_warps``) of ``_softmax_relay_kernel``."""
    keep_p = keep_p and precise and write_y
    # The first read keeps its lines in the L2 for the second, unless p is kept instead.
    return dict(CHUNK=chunk, BLOCK_S=max(32 * warps, triton.next_power_of_2(n_chunks)), LAG=lag,
                KEEP_P=keep_p, PRECISE=precise, WRITE_Y=write_y, WRITE_LSE=write_lse,
                FIRST="evict_first" if keep_p or not write_y else "evict_last", num_warps=warps)


_RESIDENT: dict = {}


def resident_per_sm(device: torch.device, args: tuple, consts: dict) -> int | None:
    """Programs of the relay kernel compiled for ``consts`` that one SM holds at once, or None
    where Triton does not say (cached per device and compilation)."""
    key = (device, tuple(sorted(consts.items())), args[0].dtype, args[1].dtype)
    if key not in _RESIDENT:
        fit = None
        try:
            kernel = _softmax_relay_kernel.warmup(*args, grid=(1,), **consts)
            kernel._init_handles()
            n_regs, shared, warps = kernel.n_regs, kernel.metadata.shared, kernel.metadata.num_warps
        except (AttributeError, TypeError):
            n_regs = None
        if n_regs:
            props = device_properties(device)
            fit = programs_per_sm(n_regs, warps, shared,
                                  regs=getattr(props, "regs_per_multiprocessor", 65536),
                                  threads=getattr(props, "max_threads_per_multi_processor", 2048),
                                  shared_per_sm=getattr(props, "shared_memory_per_multiprocessor", 233472))
        _RESIDENT[key] = fit
    return _RESIDENT[key]


def launch_relay(x2: torch.Tensor, y_arg: torch.Tensor, lse_arg: torch.Tensor, stride_y: int, *, precise: bool,
                 write_y: bool, write_lse: bool, chunk: int, warps: int, per_sm: int, lag: int, keep_p: bool,
                 l2_bytes: int, spin_limit: int, interpreted: bool, programs: int | None = None) -> bool:
    """Launch the relay kernel on ``x2`` (rows); False (nothing launched) where a row has more
    chunks than the grid may hold at once.  ``programs`` overrides the grid's size (tests: the
    interpreter runs programs one after another, so a few programs visit many items each)."""
    n_rows, n_cols = x2.shape
    chunk = min(chunk, triton.next_power_of_2(n_cols))
    n_chunks = triton.cdiv(n_cols, chunk)
    n_items = n_rows * n_chunks
    slots = torch.full((n_items,), _COOP_EMPTY, device=x2.device, dtype=torch.int64)
    args = (x2, y_arg, lse_arg, slots, n_rows, n_cols, x2.stride(0), stride_y, n_chunks, n_items, spin_limit)
    consts = relay_constexprs(chunk, warps, n_chunks, lag, keep_p, precise, write_y, write_lse)
    if programs is not None:
        pass
    elif interpreted:
        programs = n_items
    else:
        fit = resident_per_sm(x2.device, args, consts) or 1
        programs = num_sms(x2.device) * min(fit, per_sm)
        # Chunks in flight: (lag + 1) per program, each read from HBM and kept in the L2
        # (the kept exponentials too, float32), within half the L2.
        item_bytes = chunk * (x2.element_size() + (4 if consts["KEEP_P"] else 0))
        programs = min(programs, max(1, l2_bytes // (2 * (lag + 1) * item_bytes)))
        if n_chunks > programs:
            return False
    grid = max(1, min(programs, n_items))
    LAST_GRID[:] = [grid]
    _softmax_relay_kernel[(grid,)](*args, **consts)
    return True


#: The grid of the last launch (benchmarks read it: the launch sizes the grid itself).
LAST_GRID: list = []
