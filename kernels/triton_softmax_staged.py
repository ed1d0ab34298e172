"""The staged schedule of the Triton softmax: the cooperative split rows, prefetched through
shared memory by Triton's software pipeliner.

EXPERIMENT (not a default).  The cooperative schedule (``kernels.triton_softmax``) prefetches
its next row into registers, so the bytes a SM has in flight are bounded by what its register
file holds besides the chunk being worked on.  Here the row loop is a ``tl.range`` with
``num_stages``: the pipeliner issues each chunk's load ``STAGES - 1`` rows ahead as an
asynchronous copy into shared memory, which is otherwise unused, so while a program waits for
its partners' statistics the next rows' loads stay in flight.  The pipeliner gives up on a loop
whose body holds another loop, so the exchange (poll, spin, rebuild a late partner from the
input) is a ``noinline`` function: the loop body sees a call.

Per row, as the cooperative kernel without the lag: load the chunk, compute ``m_c``,
``p = exp(x - safe_max(m_c))`` and ``l_c``; publish ``(m_c, l_c)``; merge the row's slots;
write ``y = p * exp(m_c - shift) / l``.  Same contract, same error (see
``_softmax_cooperative_kernel``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import triton_softmax as ts
from kernels.triton_support import safe_max


@triton.jit(noinline=True)
def _staged_row_stats(x_row, slots, n_cols, n_chunks, c, m_own, l_own, spin_limit,
                      CHUNK: tl.constexpr, BLOCK_S: tl.constexpr, PRECISE: tl.constexpr):
    # A call, not inlined: its polling and rebuilding loops stay out of the pipelined body.
    packed = ts._poll_slots(slots, n_chunks, c, BLOCK_S)
    return ts._cooperative_row_stats(x_row, slots, packed, n_cols, n_chunks, c, m_own, l_own, spin_limit, slots,
                                     CHUNK, BLOCK_S, PRECISE, False)


@triton.jit
def _softmax_staged_kernel(
    X, Y, LSE, SLOTS, n_rows, n_cols, stride_xr, stride_yr, n_chunks, spin_limit,
    CHUNK: tl.constexpr, BLOCK_S: tl.constexpr, STAGES: tl.constexpr,
    PRECISE: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr, HOLD_X: tl.constexpr,
):
    pid = tl.program_id(0)
    group = pid // n_chunks
    c = pid - group * n_chunks
    n_groups = tl.num_programs(0) // n_chunks
    cols = c * CHUNK + tl.arange(0, CHUNK)
    in_row = cols < n_cols
    for row in tl.range(group, n_rows, n_groups, num_stages=STAGES):
        row64 = tl.zeros([], tl.int64) + row
        x = tl.load(X + row64 * stride_xr + cols, mask=in_row, other=float("-inf"))
        m_c, p, l_c = ts._chunk_stats(x.to(tl.float32), PRECISE)
        slots = SLOTS + row64 * n_chunks
        ts._coop_publish(slots, c, m_c, l_c, row64 < n_rows)
        shift = safe_max(m_c)
        l = l_c.to(tl.float64)
        if WRITE_Y:
            shift, l = _staged_row_stats(X + row64 * stride_xr, slots, n_cols, n_chunks, c, m_c, l_c, spin_limit,
                                         CHUNK, BLOCK_S, PRECISE)
        elif c == 0:
            shift, l = _staged_row_stats(X + row64 * stride_xr, slots, n_cols, n_chunks, c, m_c, l_c, spin_limit,
                                         CHUNK, BLOCK_S, PRECISE)
        if HOLD_X:  # 16-bit: keep the input across the exchange and compute p again (same bits)
            p = ts._exp(x.to(tl.float32), safe_max(m_c), PRECISE)
        ts._coop_write(Y + row64 * stride_yr, LSE + row64, cols, in_row, p, m_c, shift, l, c,
                       PRECISE, WRITE_Y, WRITE_LSE)


def launch_staged(x2: torch.Tensor, y_arg: torch.Tensor, lse_arg: torch.Tensor, stride_y: int, *, precise: bool,
                  write_y: bool, write_lse: bool, chunk: int, warps: int, stages: int, per_sm: int, hold_x: bool,
                  interpreted: bool) -> bool:
    """Launch the staged kernel on rows ``x2`` (2-d, unit column stride); False (nothing
    launched) where a row's programs cannot all be resident at once.  ``per_sm`` caps the
    programs a SM; the compiled kernel's registers and shared memory cap them too."""
    n_rows, n_cols = x2.shape
    n_chunks = triton.cdiv(n_cols, chunk)
    slots = torch.full((n_rows * n_chunks,), ts._COOP_EMPTY, device=x2.device, dtype=torch.int64)
    args = (x2, y_arg, lse_arg, slots, n_rows, n_cols, x2.stride(0), stride_y, n_chunks,
            ts._INTERPRETER_SPINS if interpreted else ts.COOP_SPIN_LIMIT)
    consts = dict(CHUNK=chunk, BLOCK_S=max(32 * warps, triton.next_power_of_2(n_chunks)), STAGES=stages,
                  PRECISE=precise, WRITE_Y=write_y, WRITE_LSE=write_lse, HOLD_X=hold_x and x2.dtype != torch.float32,
                  num_warps=warps)
    sms = ts.num_sms(x2.device)
    slots_per_sm = per_sm
    if not interpreted:
        fit = ts._resident_per_sm(x2.device, args, consts, kernel=_softmax_staged_kernel)
        slots_per_sm = min(per_sm, fit or per_sm)
    if slots_per_sm * sms < n_chunks:
        return False
    groups = max(1, min(n_rows, slots_per_sm * sms // n_chunks))
    LAST_GRID[:] = [groups * n_chunks]
    _softmax_staged_kernel[(groups * n_chunks,)](*args, **consts)
    return True


#: The grid of the last launch (programs), for benchmarks.
LAST_GRID: list = [0]
