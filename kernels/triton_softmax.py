"""Softmax over the last dimension, as Triton kernels with float32 statistics.

Four schedules compute the same function:

* **single pass** -- a row (or a few short rows) fits in one block of registers:
  one read, one write.  Rows of 2049 or more that are not a power of two long, or start
  off 16-byte boundaries, are held in two power-of-two pieces and a few edge elements
  (``_softmax_row_pieces_kernel``): a row of 4097 computes 4096 + 16 lanes, not 8192,
  and its loads are 16 bytes wide.
* **pipelined rows** -- 16-bit rows of 16385..32768, where rows are many: a persistent grid,
  one program a SM, each holding a whole row in registers while Triton's pipeliner brings its
  next rows into shared memory (``_softmax_rows_pipelined_kernel``; PIPELINED_16BIT, not yet
  the default: PIPELINED_BY_DEFAULT).
* **online, one program per row** -- longer rows are streamed in blocks while a
  running maximum ``m`` and running sum ``l`` are kept; when the maximum grows,
  ``l`` is rescaled by ``exp(m_old - m_new)``.  On the fast float32 path each lane
  keeps its own ``(m, l)`` and the lanes merge once per row (``_span_stats_lanes``).
  A second sweep normalizes; it re-reads the row, mostly from L2: a persistent grid
  keeps only as many rows in flight as fit in half the L2.  On the precise float32
  path the first sweep writes its exponentials to the output and the second rescales
  them by a float64 factor per block (``_span_exp_kept``, ``_span_rescale``): one
  accurate exponential per element, and the single-pass accuracy.  16-bit rows that start
  off 16-byte boundaries (an odd row stride: rows of 16385) stream their aligned body with
  16-byte loads and take the few elements around it apart (``_online_row_aligned``).
* **split rows** -- when there are too few rows to fill the GPU, each row is cut
  into chunks: one kernel writes ``(m, l)`` per chunk, a second merges a row's
  chunk statistics and normalizes its chunk.
* **cooperative split rows** -- a persistent grid in which groups of programs share
  a row, each holding its chunk in registers; the programs of a group exchange their
  chunks' ``(m, l)`` through global memory, so every element is read once and written
  once (see ``_softmax_cooperative_kernel``).  By default it runs with one chunk per row
  for precise float32 rows of 16384 (``COOP_CHUNK``; rows of 8193..16383 take the pieces
  kernel, see ``_wants_cooperative``), and with chunks held by
  several programs a SM for float32 rows of 16385..1M and 16-bit rows of 65537..1M
  (``COOP_LONG``, launched per path and row length).
* **spans** -- cooperative split rows streamed through the L2: each program of a group
  streams its span of the row in blocks, as the online schedule streams a whole row, and
  only the spans' ``(m, l)`` cross programs; the second sweep finds its span (or, on the
  precise float32 path, the exponentials the first sweep wrote) in the L2.  A row's programs
  need not hold it on chip, so a long row does not take every program of the GPU at a few
  warps each (``_softmax_spans_kernel``; SPANS_LONG, not yet the default: SPANS_BY_DEFAULT).

:func:`schedule_for` says which schedule a call takes.

Special values follow one contract everywhere: ``-inf`` entries give exactly 0;
a row that is entirely ``-inf`` gives all zeros (LSE ``-inf``); a row holding a
NaN or ``+inf`` gives NaN throughout (LSE NaN); no row affects another.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels.triton_support import (
    LOG2E,
    check_device,
    check_dtype,
    device_properties,
    divide_rn,
    exp_diff,
    exp_diff_fast,
    interpreting,
    num_sms,
    safe_max,
    sum_compensated,
)

__all__ = ["softmax", "softmax_lse", "schedule_for", "MAX_SINGLE_BLOCK", "MAX_SINGLE_BLOCK_16", "SCHEDULES"]

#: float32 rows up to this length are done in one pass from registers.
MAX_SINGLE_BLOCK = 16384
#: 16-bit rows up to this length too (16 warps, 32 elements a thread): on the H200 79-80% of
#: copy bandwidth at N = 32768 against 72% for the online schedule (2026-11-30, two rounds,
#: bf16 and fp16, ``bench/softmax.py --sweep --variants rows_b``); at 65536 the single pass lost
#: (54-71% against 75-77% online in three of four rounds, 44% and 61% in the others).  Where
#: rows are many (2 a SM), rows of 16385..32768 take ONLINE_16BIT instead (graph-timed 82-83%
#: against the single pass's 76-77%).
MAX_SINGLE_BLOCK_16 = 32768
#: Block width of the split-row schedule, and of the online (one program per row) one.
STREAM_BLOCK = 4096
ONLINE_BLOCK = 8192
#: Elements of a row one program of the cooperative schedule holds in registers (powers of
#: two), and its warps (at most COOP_WARPS, one per 512 elements): 8192 elements at 16 warps
#: compile to ~100-110 registers a thread for sm_90; 16384 need 32 warps not to spill (16 with
#: the float64 sum of the precise one-chunk launch: 128 registers, no spill; SUM64_WARPS).
#: Measured on the H200 (2026-11-29, ``bench/softmax.py --sweep``), the schedule is the
#: default only where it won: float32 rows of 8193..16384 on the precise path, as one
#: 16384-wide chunk (S = 1, no exchange: a persistent single pass that prefetches its next
#: row) at 32 warps, 76.6% of copy bandwidth against 62.7% for the single-pass kernel.
#: Split over several programs, at one program a SM, it lost everywhere then (fp32 N=65536:
#: 45% vs 53% online; bf16 N=65536: 35% vs 70%; N=1M: 41% vs 50% split, bf16 30% vs 52%); with
#: several programs a SM it wins on long rows (COOP_LONG).
COOP_CHUNK = {torch.float32: 16384, torch.float16: 8192, torch.bfloat16: 8192}
COOP_WARPS = 32
#: Warps of the cooperative kernel's one-chunk launch (precise float32 rows of 8193..16384)
#: when it sums in float64.  On the precise path the compensated float32 sum took ~8 of the
#: ~50 instructions an element (a two-sum per addition; ncu on the H200: 52 thread
#: instructions an element, the issue slots the limit) against 2 for a float64 sum (a
#: conversion, which the conversion pipe takes, and one add on the float64 pipe): 912 SASS
#: instructions instead of 1056 for the 16384-wide kernel (sm_90).  The sum is also closer:
#: the float64 sum of at most 2**20 float32 terms is within ~2**-33 relative, then rounded once.
#: Graph-timed on the H200 (2026-12-04 ~05:25 UTC, two rounds, ``bench/softmax.py --sweep
#: --variants f64``), % of copy: N = 16384 89.1-89.4% at 16 warps, 86.3-87.9% at 32, against
#: 81.4-81.9% compensated; N = 4096 (single-pass kernel) 97.9-98.1% against 96.5-96.7%.  Where a
#: row's chunks are shared (N >= 32768) the float64 sum took more registers (2048 x 2 warps:
#: 221 against 168, triton 3.9) and lost 14 points at 32768..262144 (61-64% against 71-78%), so
#: those launches keep the compensated sum (rerun at 06c6c31, 17:50 UTC: 39-64% against the
#: defaults' 67-78%; with triton 3.6 the 4096 x 4 warps launch holds 2 programs a SM, not 3).
#: The defaults at 06c6c31 (17:49 and 17:52 UTC, graph-timed): N = 16384 90.0-90.5%, N = 4096
#: 97.5-98.1%; BENCHMARKS.md, twenty-ninth session.
SUM64_WARPS = 16


class LongRowLaunch(NamedTuple):
    """The cooperative launch for rows of up to ``max_cols`` (see COOP_LONG)."""
    max_cols: int
    chunk: int  # elements a program holds
    warps: int
    per_sm: int  # programs a SM at most (the launch caps it at what the registers allow)
    lag: bool = False  # publish a row ahead of the poll (see _softmax_cooperative_kernel)
    early_poll: bool = False  # with the lag: first read of the slots at the top of the iteration
    spill_ok: bool = False  # compiles with register spills for sm_90, and still measured fastest
    hold_x: bool = True  # with the lag, 16-bit inputs: hold the input chunk (else its exponentials)


#: Long rows take the cooperative schedule with several chunks a row, launched per path
#: (precise float32, fast float32, 16-bit) and row length by the first entry that holds the
#: row; rows of up to COOP_LONG_MIN stay on the other schedules.  Measured on the H200 with
#: ``bench/softmax.py --sweep`` (2026-11-30, two rounds each), % of copy bandwidth:
#:
#: * precise, up to 65536: 2048-wide chunks at 2 warps, 8 a SM (about 6 resident): 77.6-78.6% at
#:   32768, 77.0-77.1% at 65536 (07:27), against 72.7-73.6% and 72.7-73.0% for the shape below;
#:   level with it at 131072.
#: * precise, up to 262144: 4096-wide chunks at 4 warps, 3 a SM (04:22): 68-69% at
#:   N = 32768..131072 and 62.5% at 262144, against 50-58% for the online schedule (bound by
#:   the accurate exponentials, which more programs a SM overlap with the memory traffic);
#:   71-73% and 67% at 07:17-07:26.  With the lag they read 63-66%.
#: * precise, up to 1M: the same with the lag, 61% at N = 1M (07:17, 07:26, 07:49; 1 group of 256
#:   programs) against 53% for the split schedule; with the early poll too, 52%.
#: * fast, up to 65536: 4096-wide chunks at 2 warps, 8 a SM (4 resident): 89-90% at 65536 and
#:   at 32768 91.6% in most runs (73.6% and 78-80.5% in others: it swings between calls and
#:   inputs), against 83% and 80% at 4 warps (3 resident; 07:17).
#: * fast, up to 262144: 2048-wide chunks at 4 warps with the lag and the early poll, 5 a SM
#:   (4.85 resident): 85-86% at 131072, 82-84% at 262144 (07:36, 07:49, 08:06), against 76% and
#:   69.5% before.
#: * fast, up to 1M: 8192-wide chunks at 4 warps, lag, early poll, 4 a SM (2 resident): 78.4-78.8%
#:   at 1M (07:36, 07:49; 73.4-74.2% without the early poll) against 61.4% for the split schedule.
#:   It spills (184 bytes a thread with triton 3.6, 128 with 3.9: ``bench/kernel_registers.py``);
#:   the launch of that path that does not (4096 x 4 warps, lag, early poll: 196 registers, 2 a
#:   SM) read 60.1-60.2% against its 78.1-78.9% (09:40, two rounds).
#: * 16-bit, 65537 to 1M: 8192-wide chunks at 4 warps, lag, early poll, 4 a SM (2 resident),
#:   the input chunk held: bf16 / fp16 68% / 70% at 131072 against 56% online, 64% / 67.5% at 1M
#:   against 44-58% split (07:36, 07:49).  Timed from CUDA graphs (GPU time alone; 10:09, three
#:   rounds): bf16 66.2-67.5% / fp16 69.4-70.7% at 131072 against 54.4-55.6% online, 66.0-66.5%
#:   / 69.0-70.0% at 262144 against 46.8-47.5%, 63.0-63.6% / 66.4-67.0% at 1M.  do_bench read
#:   it anywhere from 35% to 71% in those hours: its host time a call (84-141 us at 10:09, against
#:   61-105 for the online schedule) is near what do_bench's L2 clear and the kernel take on the
#:   GPU, which then waits for the launch (bench/softmax.py's docstring).  Without the early
#:   poll bf16 read 44% on the narrow shapes.  At 65536 the online schedule keeps it (74-77%).
#: * 16-bit, 262145 to 1M (2026-12-06): the same launch without the early poll, holding the
#:   chunk's exponentials, not the input (``hold_x=False``): bf16 at 1M 80.8% of copy (graph
#:   80.8%) against 77.0% (76.7%) for the launch above, on an H100 (17:25 UTC), whose
#:   no-exchange bounds (TUNING's coop_exchange) read 90.2% and 82.5% (17:14).  Not measured on
#:   the H200, nor between 262145 and 1M.
#:
#: At N = 16384 the precise path's one-chunk schedule stays faster (79% against 70%).
COOP_LONG = {
    "precise": (LongRowLaunch(65536, 2048, 2, 8), LongRowLaunch(262144, 4096, 4, 3),
                LongRowLaunch(1 << 20, 4096, 4, 3, lag=True)),
    "fast": (LongRowLaunch(65536, 4096, 2, 8), LongRowLaunch(262144, 2048, 4, 5, lag=True, early_poll=True),
             LongRowLaunch(1 << 20, 8192, 4, 4, lag=True, early_poll=True, spill_ok=True)),
    "16-bit": (LongRowLaunch(262144, 8192, 4, 4, lag=True, early_poll=True),
               LongRowLaunch(1 << 20, 8192, 4, 4, lag=True, hold_x=False)),
}
#: Rows up to this length (per path) are not long rows.
COOP_LONG_MIN = {"precise": MAX_SINGLE_BLOCK, "fast": MAX_SINGLE_BLOCK, "16-bit": 65536}
COOP_LONG_MAX = 1 << 20
#: 16-bit rows off 16-byte boundaries (a length that is not a multiple of 8) past ONLINE_16BIT's
#: longest, of up to COOP_LONG_MAX, where there are at least this many rows a SM: the online
#: schedule, not the cooperative one, where unaligned_16bit_split leaves them (since 2026-12-07
#: 19:40 UTC only rows whose SM's worth fits in the L2; split rows beat both elsewhere).  The
#: cooperative kernel reads such rows 2 bytes at a time
#: (its 16-byte windows, TUNING's coop_align, spill or lose), the online kernel's aligned body
#: 16 bytes at a time.  On an H100 (2026-12-07 14:31 UTC, ``bench/softmax.py --sweep --variants
#: =chunks1,...,align --dtypes bf16 --ns 262145``, one round, do_bench medians): bf16 rows of
#: 262145 (255, 1.93 a SM) online 61.5% of copy (graph 72.1%), 1.32x torch.softmax, against the
#: cooperative launch's 35.0% (41.5%), 0.75x; split rows 50.4%, the cooperative launch with the
#: windows on 4096-wide chunks 48.1%.  Rows from half a SM on (H100, 2026-12-07 16:07-16:08 UTC,
#: ``--sweep --variants =chunks1 --dtypes bf16 --elements ROWS*N``, two rounds; online against
#: cooperative, x torch.softmax): N = 1048575 at 128 rows 1.28x / 0.80x, 96 rows 1.28x / 0.91x,
#: 64 rows 1.36x / 1.17x; N = 655361 at 128 rows 1.30x / 0.80x, 64 rows 1.43x / 1.19x; N = 393217
#: at 128 rows 1.41x / 0.79x, 96 rows 1.45x / 0.94x.  Fewer rows keep the cooperative schedule
#: (a program a row leaves SMs idle): N = 1048575 at 32 rows 1.54x / 2.15x, 16 rows 1.56x / 3.60x.
UNALIGNED_16BIT_ONLINE_ROWS_PER_SM = 0.5


def unaligned_16bit_online(n_rows: int, n_cols: int, dtype: torch.dtype, sms: int) -> bool:
    """Whether 16-bit rows of ``n_cols`` take the online schedule for being off 16-byte
    boundaries (see UNALIGNED_16BIT_ONLINE_ROWS_PER_SM); ``TUNING["unaligned_online"]`` False:
    never."""
    if dtype == torch.float32 or n_cols % 8 == 0 or _tuned("unaligned_online", True) is False:
        return False
    return (ONLINE_16BIT[-1].max_cols < n_cols <= COOP_LONG_MAX
            and n_rows >= UNALIGNED_16BIT_ONLINE_ROWS_PER_SM * sms)


#: 16-bit rows off 16-byte boundaries past ONLINE_16BIT's longest, of up to COOP_LONG_MAX, at
#: least UNALIGNED_16BIT_SPLIT_MIN_ROWS of them: split rows, UNALIGNED_16BIT_SPLIT_CHUNKS chunks
#: a row, each chunk of the row's aligned body loaded 16 bytes at a time (``split_align``), except
#: where unaligned_16bit_online holds and a SM's worth of rows fits in the L2 (the online
#: schedule's second sweep then reads its row from there).  Split rows balance the SMs where a
#: program a row leaves a second wave of a few rows (134 rows on 132 SMs) or idle SMs, and
#: the cooperative kernel reads such rows 2 bytes at a time.  On an H100 (2026-12-07 19:30-19:33
#: UTC, ``bench/softmax.py --sweep --variants =chunks16,=chunks32 --dtypes fp16,bf16 --ns N
#: --elements ROWS*N``, one round, do_bench medians, x torch.softmax), 32 chunks against the
#: default of then: N = 500001 at 134 rows 1.67x / 1.00x (fp16) and 1.68x / 1.04x (bf16), 200
#: rows 1.39x / 1.04x and 1.41x / 1.12x, 100 rows 1.68x / 1.30x and 1.71x / 1.39x; N = 262145
#: at 255 rows 1.34x / 1.21x and 1.36x / 1.30x; N = 1048575 at 64 rows 2.16x / 1.19x and 2.19x /
#: 1.19x (cooperative), 32 rows 3.75x / 2.15x and 3.77x / 2.18x (16 chunks 3.90x and 3.94x), 16
#: rows 6.27x / 3.52x (fp16; bf16 3.20x by do_bench, 7.59x from a CUDA graph, against 3.71x).
#: Rows of 131073 at 511 (a SM's rows fit in the L2) stay online: 1.38x and 1.50x there against
#: 1.33x and 1.35x split.  Power-of-two rows keep the cooperative kernel (80-82% of copy against
#: 63-64% split at 64 x 1048576 and 134 x 524288).  Fewer rows are unmeasured and keep the
#: schedules of before.
UNALIGNED_16BIT_SPLIT_CHUNKS = 32
UNALIGNED_16BIT_SPLIT_MIN_ROWS = 16


def unaligned_16bit_split(n_rows: int, n_cols: int, dtype: torch.dtype, sms: int, l2_bytes: int) -> bool:
    """Whether 16-bit rows of ``n_cols`` take split rows for being off 16-byte boundaries (see
    UNALIGNED_16BIT_SPLIT_CHUNKS); ``TUNING["unaligned_split"]`` False: never."""
    if dtype == torch.float32 or n_cols % 8 == 0 or _tuned("unaligned_split", True) is False:
        return False
    if not (ONLINE_16BIT[-1].max_cols < n_cols <= COOP_LONG_MAX and n_rows >= UNALIGNED_16BIT_SPLIT_MIN_ROWS):
        return False
    online_in_l2 = sms * n_cols * (torch.finfo(dtype).bits // 8) <= l2_bytes
    return not (online_in_l2 and unaligned_16bit_online(n_rows, n_cols, dtype, sms))


class OnlineLaunch(NamedTuple):
    """The online schedule's launch for 16-bit rows of up to ``max_cols`` (see ONLINE_16BIT)."""
    max_cols: int
    block: int  # BLOCK_N: elements a program streams at a time
    warps: int
    per_sm: int  # persistent programs a SM (the GPU runs what the registers allow at once)
    maxnreg: int = 0  # registers a thread at most (0: the compiler's choice)


#: 16-bit rows of 16385..131072 in blocks streamed by persistent programs with per-lane
#: statistics, where there are rows enough (2 a SM) for whole rows to fill the GPU.  The
#: second sweep finds the row in the L2.  Timed from CUDA graphs on the H200 (2026-11-30
#: 11:57-12:05 UTC, ``bench/softmax.py --sweep --variants lanes_pps``, rows of 2**26 elements,
#: two rounds), % of copy bandwidth:
#:
#: * up to 32768: 4096-wide blocks at 16 warps, 6 a SM: bf16 82.0-83.4%, fp16 81.6-81.8%,
#:   against 76.0-77.4% for the single pass that held the row (MAX_SINGLE_BLOCK_16).
#: * up to 65536: 8192 at 16 warps, 6 a SM: bf16 79.4-79.5% against 73.1% for the online
#:   launch of before (8192 at 16 warps, no lanes, 264 programs).  fp16 compiled the same kernel
#:   to 70 registers a thread, one program a SM (triton 3.6; bf16: 64), and read 60-62% at any
#:   count a SM: hence the cap of 64 registers (bench/kernel_registers.py's way of compiling).
#: * up to 131072: 16384 at 32 warps (one program a SM; 1 to 6 a SM read the same): bf16
#:   78.0-78.4%, fp16 74.8-75.1%, against 65.5-66.4% / 68.8-68.9% for the cooperative launch.
#:   At 262144 the two were level (bf16 66.5%), so longer rows stay cooperative.
#:
#: 32768-wide blocks spilled (20-27%).  Fewer rows than 2 a SM take the other schedules.
#: Rows of odd lengths (their starts off 16-byte boundaries) read at 57-64% of copy, 39% at
#: 65535 (0.7x torch.softmax), one 2-byte load an element; with the aligned body 73-80%
#: (H100, 2026-12-05 19:37 UTC, ``bench/softmax.py --sweep --variants align``, N = 16385,
#: 20001, 32767, 65535, bf16 and fp16; BENCHMARKS.md, thirty-sixth session).
ONLINE_16BIT = (OnlineLaunch(32768, 4096, 16, 6), OnlineLaunch(65536, 8192, 16, 6, maxnreg=64),
                OnlineLaunch(131072, 16384, 32, 2))


class PipelinedLaunch(NamedTuple):
    """The pipelined-rows launch for 16-bit rows of up to ``max_cols`` (see PIPELINED_16BIT)."""
    max_cols: int
    warps: int
    stages: int  # tl.range num_stages: stages - 1 rows in flight in shared memory
    per_sm: int  # persistent programs a SM


#: 16-bit rows of 16385..32768, whole rows a program, where there are at least
#: PIPELINED_MIN_ROWS_PER_SM rows a SM.  A row of 32768 takes 64 KiB: at 32 warps (32 elements a
#: thread, ~55 registers, one program a SM) the row is in registers while the next two rows load
#: into shared memory (num_stages = 3: two 64 KiB buffers; with num_stages = 2 the one buffer
#: must drain before the next load starts, and it lost).  Measured on the H200 (2026-12-04
#: 21:39 UTC, ``bench/exp_pipelined_rows.py`` of c777593, since replaced by ``bench/softmax.py
#: --sweep --variants pipe``; rows of 2**26 elements, graph-timed, one round), % of copy: bf16
#: 89.1% / fp16 87.3% at N = 32768 against 82.7% / 82.5% for the online launch (ONLINE_16BIT's
#: first entry); at N = 16384 the single pass stays ahead (93.3% against
#: 87.2-90.0%).  float32 rows of 32768 need 256 KiB for two buffers, past the 227 KiB a SM has.
PIPELINED_16BIT = (PipelinedLaunch(32768, 32, 3, 1),)
PIPELINED_MIN_ROWS_PER_SM = 2
#: Whether the default takes PIPELINED_16BIT.  Off: ``pytest -m gpu -k pipelined`` passed on an
#: H100 (2026-12-05, triton 3.6.0), but there it was no faster than the online launch
#: (``bench/softmax.py --sweep --variants pipe``, 2 rounds, % of copy, this entry against the
#: online launch: N = 20000 bf16 93.0/92.1 against 90.5/89.7, fp16 91.4/90.8 against 90.1/90.6;
#: N = 32768 bf16 91.4/90.8 against 93.6/94.1, fp16 90.9/91.0 against 93.2/93.7), against the
#: one H200 measurement above (+6 points at 32768).  One device's gain and the other's loss
#: make no default; a second H200 sweep decides.
PIPELINED_BY_DEFAULT = False


def pipelined_launch(n_rows: int, n_cols: int, dtype: torch.dtype, sms: int) -> PipelinedLaunch | None:
    """The PIPELINED_16BIT entry for these rows, or None: float32, rows of up to
    MAX_SINGLE_BLOCK or past the table, fewer than PIPELINED_MIN_ROWS_PER_SM rows a SM, or
    PIPELINED_BY_DEFAULT off.  ``TUNING["pipelined"]`` False: None; True: for rows of any dtype
    and length up to ``2**16`` elements (a sweep's variant, or a test of the kernel on short
    rows).  The ``pipe_*`` keys override the launch's shape."""
    forced = TUNING["pipelined"]
    if forced is False or (forced is None and not PIPELINED_BY_DEFAULT):
        return None
    if forced:
        base = PipelinedLaunch(1 << 16, 32, 3, 1)
        if n_cols > base.max_cols:
            return None
    else:
        if dtype == torch.float32 or n_cols <= MAX_SINGLE_BLOCK or n_rows < PIPELINED_MIN_ROWS_PER_SM * sms:
            return None
        base = next((launch for launch in PIPELINED_16BIT if n_cols <= launch.max_cols), None)
        if base is None:
            return None
    return PipelinedLaunch(base.max_cols, int(_tuned("pipe_warps", base.warps)),
                           int(_tuned("pipe_stages", base.stages)), int(_tuned("pipe_per_sm", base.per_sm)))


def online_16bit_launch(n_rows: int, n_cols: int, dtype: torch.dtype, sms: int) -> OnlineLaunch | None:
    """The ONLINE_16BIT entry for these rows, or None where the table does not apply: float32,
    rows of up to MAX_SINGLE_BLOCK or past the table, fewer rows than 2 a SM, or a TUNING
    override of the online launch's shape (a sweep's variant)."""
    if dtype == torch.float32 or n_cols <= MAX_SINGLE_BLOCK or n_rows < 2 * sms:
        return None
    if any(TUNING[k] is not None for k in ("stream_block", "stream_warps", "online_programs_per_sm", "lane_stats")):
        return None
    return next((launch for launch in ONLINE_16BIT if n_cols <= launch.max_cols), None)


def long_row_launch(n_cols: int, dtype: torch.dtype, precise: bool) -> LongRowLaunch | None:
    """The COOP_LONG entry for rows of ``n_cols`` (the last one past COOP_LONG_MAX), or None for
    rows of up to COOP_LONG_MIN."""
    path = "16-bit" if dtype != torch.float32 else "precise" if precise else "fast"
    if n_cols <= COOP_LONG_MIN[path]:
        return None
    table = COOP_LONG[path]
    return next((t for t in table if n_cols <= t.max_cols), table[-1])


class SpansLaunch(NamedTuple):
    """The spans schedule's launch for rows of up to ``max_cols`` (see SPANS_LONG)."""
    max_cols: int
    block: int  # BLOCK_N: elements a program streams at a time
    warps: int
    per_sm: int  # programs a SM at most (the launch caps it at what the registers allow)
    groups: int  # rows in flight (twice that with the lag): the resident programs split among them
    lag: bool = True  # the group's next row's first sweep before the poll


#: Long rows on the spans schedule (``_softmax_spans_kernel``): per path, the first entry that
#: holds the row.  Not yet measured on a GPU: SPANS_BY_DEFAULT is off, and these shapes are
#: the sweep's starting point (``bench/softmax.py --sweep --variants spans``): 8-warp blocks of
#: 2048 (8 float32 a thread), 4 programs a SM (32 warps), the resident programs split into
#: groups so that with the lag the rows in flight take 16 MiB of the L2 at N = 1M (two float32
#: rows, four 16-bit ones).
SPANS_LONG = {
    "precise": (SpansLaunch(1 << 20, 2048, 8, 4, 2),),
    "fast": (SpansLaunch(1 << 20, 2048, 8, 4, 2),),
    "16-bit": (SpansLaunch(1 << 20, 2048, 8, 4, 4),),
}
#: Rows up to this length (per path) do not take the spans schedule by default.
SPANS_MIN = {"precise": 262144, "fast": 262144, "16-bit": 262144}
#: Whether the default takes SPANS_LONG (off until a GPU sweep measures it).
SPANS_BY_DEFAULT = False


def spans_launch(n_cols: int, dtype: torch.dtype, precise: bool) -> SpansLaunch | None:
    """The launch of the spans schedule for rows of ``n_cols``: SPANS_LONG's entry (None for
    rows of up to SPANS_MIN or past the table, or with SPANS_BY_DEFAULT off), or with
    ``TUNING["spans"]`` True the table's entry for any length; the ``spans_*`` keys override
    its fields."""
    forced = TUNING["spans"]
    path = "16-bit" if dtype != torch.float32 else "precise" if precise else "fast"
    if forced is False or (forced is None and (not SPANS_BY_DEFAULT or n_cols <= SPANS_MIN[path])):
        return None
    table = SPANS_LONG[path]
    base = next((t for t in table if n_cols <= t.max_cols), None)
    if base is None:
        if not forced:
            return None
        base = table[-1]
    return SpansLaunch(base.max_cols, int(_tuned("spans_block", base.block)), int(_tuned("spans_warps", base.warps)),
                       int(_tuned("spans_per_sm", base.per_sm)), int(_tuned("spans_groups", base.groups)),
                       bool(_tuned("spans_lag", base.lag)))


#: How many times a program of the cooperative schedule polls for its partners' statistics
#: before it computes them itself from the input (a poll is an L2 round trip, ~1 us: tens of
#: ms in all, against a few us for a partner to publish; see _softmax_cooperative_kernel).
COOP_SPIN_LIMIT = 1 << 15
# Under the interpreter a partner that has not published yet will not before this program
# ends: poll twice (the polling loop still runs) and rebuild the rest.
_INTERPRETER_SPINS = 2
#: The names schedule_for returns.
SCHEDULES = ("rows", "pipelined", "online", "split", "cooperative", "spans")
#: Launch overrides for benchmarks (bench/softmax.py --sweep); None keeps the heuristics.
#: ``cooperative``: None lets schedule_for decide, False never takes the cooperative
#: schedule, True takes it for every row it can hold (tests use this to run it on short
#: rows and under the interpreter).  ``coop_chunk`` / ``coop_warps``: its chunk width and
#: warps; ``coop_programs_per_sm``: programs a SM may hold when rows have several chunks (None:
#: COOP_LONG's per_sm for long rows, else 1; more keep
#: more rows in flight, and the launch caps them at what the compiled kernel lets a SM hold,
#: since every partner must be resident at once); ``coop_groups``: this many groups (rows in
#: flight).  ``coop_lag``: a program publishes its next row's statistics before it polls for
#: this row's (see _softmax_cooperative_kernel; None: as COOP_LONG says, off for other rows);
#: ``coop_hold_x``: with the lag, 16-bit inputs hold the input chunk, not its exponentials
#: (None: as COOP_LONG says, on for other rows); ``coop_early_poll``: with the lag, the first read of a row's slots at the top of
#: the iteration (None: as COOP_LONG says, on for other rows).  ``rows_block_r``:
#: rows per program of the single-pass kernel.  ``l2_hints``: L2 eviction hints on the online
#: and split schedules (None: on except for the precise float32 path that recomputes its
#: exponentials).  ``lane_stats``: per-lane running statistics in their first sweep (never on the
#: precise float32 path; None: on for the fast float32 path only).  ``keep_p``: the precise
#: float32 online schedule writes its exponentials in the first sweep and rescales them in the
#: second (None: on; False: the second sweep computes them again, as before 2026-11-30).
#: ``pipelined``: the pipelined-rows schedule (None: as PIPELINED_16BIT says; True: for every
#: row it holds, see pipelined_launch; False: never); ``pipe_warps``, ``pipe_stages``,
#: ``pipe_per_sm``: its launch's shape.  ``align_rows``: the online kernel's aligned-body
#: path for 16-bit rows off 16-byte boundaries (None: on where it applies; False: off).
#: ``row_pieces``: the single pass holds rows that are not a power of two long, or start off
#: 16-byte boundaries, in pieces (``_softmax_row_pieces_kernel``; None: on; False: off).
#: ``spans``: the spans schedule (None: as SPANS_LONG and SPANS_BY_DEFAULT say; True: for
#: every row it can take, under the interpreter too; False: never); ``spans_block``,
#: ``spans_warps``, ``spans_per_sm``, ``spans_groups``, ``spans_lag``: its launch's shape;
#: ``spans_span``: elements a program streams of a row (default: the row over the programs of
#: a group).  ``coop_exchange``: a diagnostic for benchmarks only, never right: False makes every
#: cooperative program normalize its chunk by its own statistics (it still publishes them and
#: reads the slots once, but never waits on or merges its partners'), so the time of such a
#: launch bounds what waiting for the exchange costs (None: the exchange, as always).
#: ``unaligned_online``: 16-bit rows off 16-byte boundaries past 131072 on the online schedule
#: (see UNALIGNED_16BIT_ONLINE_ROWS_PER_SM; None: on; False: off, as before 2026-12-07).
#: ``unaligned_split``: 16-bit rows off 16-byte boundaries past 131072 on split rows (see
#: UNALIGNED_16BIT_SPLIT_CHUNKS; None: on; False: off, as before 2026-12-07 19:40 UTC).
#: ``split_align``: the split schedule's chunks tile the aligned body of 16-bit rows off 16-byte
#: boundaries (None: on where ``_align_elements`` allows; False: off, as before 2026-12-07).
#: ``coop_align``: the cooperative kernel's 16-byte windows for 16-bit rows off 16-byte
#: boundaries (``_coop_align_elements``; None: off; True: on where it applies).  Timed slower:
#: rows of 262145 took 25.5% of copy against 35.2% without (bf16 and fp16, H100, 2026-12-07).
TUNING: dict = {"rows_warps": None, "stream_warps": None, "stream_block": None,
                "online_programs_per_sm": None, "rows_block_r": None,
                "cooperative": None, "coop_chunk": None, "coop_warps": None, "coop_groups": None,
                "coop_programs_per_sm": None, "coop_lag": None, "coop_hold_x": None, "coop_early_poll": None,
                "l2_hints": None, "lane_stats": None, "keep_p": None, "online_maxnreg": None, "sum_f64": None,
                "pipelined": None, "pipe_warps": None, "pipe_stages": None, "pipe_per_sm": None,
                "align_rows": None, "row_pieces": None, "pieces_warps": None,
                "spans": None, "spans_block": None, "spans_warps": None, "spans_per_sm": None, "spans_span": None,
                "spans_groups": None, "spans_lag": None, "coop_exchange": None, "coop_align": None,
                "unaligned_online": None, "split_align": None, "unaligned_split": None}


def _tuned(key: str, default):
    value = TUNING[key]
    return default if value is None else value


def _sum64(precise: bool, single: bool) -> bool:
    """Whether a precise float32 launch sums its exponentials in float64 (the ``PRECISE``
    argument ``SUM_F64``) rather than with compensated float32 sums: by default where a
    program holds whole rows (``single``: the single-pass kernel, the cooperative one with one
    chunk a row), see SUM64_WARPS; ``TUNING["sum_f64"]`` overrides it."""
    return precise and bool(_tuned("sum_f64", single))


def _precise_arg(plan: "_Plan", precise: bool) -> bool | int:
    """The kernels' PRECISE argument for ``plan``: False (fast path), True (compensated float32
    sums of the exponentials) or SUM_F64 (float64 sums)."""
    return SUM_F64.value if precise and plan.sum64 else precise


def _l2_bytes(device: torch.device) -> int:
    if device.type != "cuda":
        return 1 << 22
    return getattr(device_properties(device), "L2_cache_size", 50 << 20)


@triton.jit
def _exp(x, shift, PRECISE: tl.constexpr):
    # float32 outputs need the ~1 ulp exponential; 16-bit ones round far coarser.
    if PRECISE:
        r = exp_diff(x, shift)
    else:
        r = exp_diff_fast(x, shift)
    return r


#: The PRECISE constexpr that sums exponentials in float64 (True: compensated float32 sums).
SUM_F64: tl.constexpr = tl.constexpr(2)


@triton.jit
def _sum(p, axis: tl.constexpr, PRECISE: tl.constexpr):
    # The row sum scales every output: in float32 its error must stay near one rounding.
    if PRECISE:
        if PRECISE == SUM_F64:
            s = tl.sum(p.to(tl.float64), axis=axis).to(tl.float32)
        else:
            hi, lo = sum_compensated(p, axis)
            s = hi + lo
    else:
        s = tl.sum(p, axis=axis)
    return s


@triton.jit
def _divide(p, l, PRECISE: tl.constexpr):
    # l == 0 only for an all -inf row, where every p is 0: read it as 1 to give 0, not 0/0.
    l = tl.where(l == 0.0, 1.0, l)
    if PRECISE:
        y = divide_rn(p, l)  # '/' lowers to a 2-ulp approximate division on NVIDIA
    else:
        y = p * (1.0 / l)
    return y


@triton.jit
def _lse(shift, l):
    return tl.where(l == 0.0, float("-inf"), shift + tl.log(l))


@triton.jit
def _times_f64(p, factor):
    """float32 ``p`` times a float64 ``factor``, rounded once (up to rare near-ties): the factor
    split into a float32 pair, ``fma(p, hi, p * lo)``."""
    hi = factor.to(tl.float32)
    lo = (factor - hi.to(tl.float64)).to(tl.float32)
    return tl.fma(p, hi, p * lo)


@triton.jit
def _softmax_rows_kernel(
    X, Y, LSE, n_rows, n_cols, stride_xr, stride_yr,
    BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr,
    PRECISE: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr,
):
    # Whole rows in registers: one read and one write per element.
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    rows64 = rows.to(tl.int64)  # rows * stride can pass 2**31
    x = tl.load(X + rows64[:, None] * stride_xr + cols[None, :], mask=mask, other=float("-inf"))
    x = x.to(tl.float32)
    shift = safe_max(tl.max(x, axis=1))
    p = _exp(x, shift[:, None], PRECISE)
    l = _sum(p, 1, PRECISE)
    if WRITE_Y:
        y = _divide(p, l[:, None], PRECISE)
        tl.store(Y + rows64[:, None] * stride_yr + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    if WRITE_LSE:
        tl.store(LSE + rows, _lse(shift, l), mask=rows < n_rows)


@triton.jit
def _aligned_body(at, n_cols, ALIGN: tl.constexpr):
    """(head, body) of a row of ``n_cols`` elements starting ``at`` elements past a 16-byte
    aligned base (ALIGN elements in 16 bytes): the < ALIGN elements before its first aligned
    one, and the length, a multiple of ALIGN, of the aligned body after them."""
    head = tl.minimum((ALIGN - at % ALIGN) % ALIGN, n_cols)
    body = tl.multiple_of((n_cols - head) // ALIGN * ALIGN, ALIGN)
    return head, body


@triton.jit
def _row_edges(X, at, head, body, n_cols, ALIGN: tl.constexpr):
    """The elements of a row around its aligned body (``_aligned_body``) in one masked load of
    2 ALIGN lanes: [0, ALIGN) the head, [ALIGN, 2 ALIGN) the tail; -inf in the lanes past
    either.  Returns (their column indices, the mask, the float32 values)."""
    e = tl.arange(0, 2 * ALIGN)
    edge = tl.where(e < ALIGN, e, head + body + e - ALIGN)
    in_edge = tl.where(e < ALIGN, e < head, edge < n_cols)
    return edge, in_edge, tl.load(X + at + edge, mask=in_edge, other=float("-inf")).to(tl.float32)


@triton.jit
def _piece_sum(p, PRECISE: tl.constexpr):
    # A piece's share of l: float64 on the precise path (its roundings and those of adding the
    # pieces lie far below float32's, so l is in effect rounded once), float32 on the fast one.
    if PRECISE:
        s = tl.sum(p.to(tl.float64), axis=0)
    else:
        s = tl.sum(p, axis=0)
    return s


@triton.jit
def _softmax_row_pieces_kernel(
    X, Y, LSE, n_cols, stride_xr, stride_yr,
    BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr, ALIGN: tl.constexpr,
    PRECISE: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr,
):
    """One whole row a program, held in two power-of-two pieces and, with ``ALIGN`` > 1, a
    few edge elements: for rows the single pass holds whose length is not a power of two or
    whose start is off a 16-byte boundary.

    Why.  The plain single pass holds a row of n in ``next_pow2(n)`` lanes: a row of 4097
    computes 8192 lanes of exponentials (the precise float32 one is ~50 instructions a lane),
    and its mask ``cols < n`` is constant over no group of lanes, so no load is vectorized.
    An odd row stride (rows of 16383 elements) leaves Triton no alignment to prove for any
    row, one 2-byte load an element.  Here the row's body starts at its first element on a
    16-byte boundary (``ALIGN`` elements: the launch passes ``ALIGN`` > 1 only where X's and
    Y's base pointers are 16-byte aligned and their row strides agree modulo ``ALIGN``, so
    the same split aligns the output row) and is a multiple of ``ALIGN`` long; piece A holds
    its first ``BLOCK_A`` (a power of two, at most n) and piece B the rest (``BLOCK_B``: the
    next power of two of ``n - BLOCK_A``, 0 for none), both loaded with the alignment and a
    mask bound that is a multiple of ``ALIGN`` stated; the < ``ALIGN`` elements before the
    body and the < ``ALIGN`` after it come in one small masked load of ``2 ALIGN`` lanes.
    With ``ALIGN`` = 1 the body is the whole row and piece A needs no mask.

    Contract and error: those of ``_softmax_rows_kernel`` (the same exponential, division and
    special values; -inf in masked lanes).  On the precise path the three pieces' sums are
    summed in float64 (whatever ``PRECISE``'s sum), so l is the float64 sum of at most
    2**15 float32 terms, rounded once.
    """
    row64 = tl.program_id(0).to(tl.int64)  # row * stride can pass 2**31
    at = row64 * stride_xr
    y_at = row64 * stride_yr
    a = tl.arange(0, BLOCK_A)
    if ALIGN > 1:
        head, body = _aligned_body(at, n_cols, ALIGN)
        len_a = tl.multiple_of(tl.minimum(body, BLOCK_A), ALIGN)
        x_body = X + tl.multiple_of(at + head, ALIGN)
        y_body = Y + tl.multiple_of(y_at + head, ALIGN)
        in_a = a < len_a
        xa = tl.load(x_body + a, mask=in_a, other=float("-inf")).to(tl.float32)
    else:
        body = n_cols
        len_a = BLOCK_A
        x_body = X + at
        y_body = Y + y_at
        xa = tl.load(x_body + a).to(tl.float32)  # BLOCK_A <= n_cols: every lane is in the row
    m = tl.max(xa, axis=0)
    if BLOCK_B > 0:
        b = tl.arange(0, BLOCK_B)
        len_b = body - len_a
        if ALIGN > 1:
            len_b = tl.multiple_of(len_b, ALIGN)
        in_b = b < len_b
        xb = tl.load(x_body + BLOCK_A + b, mask=in_b, other=float("-inf")).to(tl.float32)
        m = tl.maximum(m, tl.max(xb, axis=0))
    if ALIGN > 1:
        edge, in_e, xe = _row_edges(X, at, head, body, n_cols, ALIGN)
        m = tl.maximum(m, tl.max(xe, axis=0))
    shift = safe_max(m)
    pa = _exp(xa, shift, PRECISE)
    total = _piece_sum(pa, PRECISE)
    if BLOCK_B > 0:
        pb = _exp(xb, shift, PRECISE)
        total += _piece_sum(pb, PRECISE)
    if ALIGN > 1:
        pe = _exp(xe, shift, PRECISE)
        total += _piece_sum(pe, PRECISE)
    l = total.to(tl.float32)
    if WRITE_Y:
        out = Y.dtype.element_ty
        if ALIGN > 1:
            tl.store(y_body + a, _divide(pa, l, PRECISE).to(out), mask=in_a)
            tl.store(Y + y_at + edge, _divide(pe, l, PRECISE).to(out), mask=in_e)
        else:
            tl.store(y_body + a, _divide(pa, l, PRECISE).to(out))
        if BLOCK_B > 0:
            tl.store(y_body + BLOCK_A + b, _divide(pb, l, PRECISE).to(out), mask=in_b)
    if WRITE_LSE:
        tl.store(LSE + row64, _lse(shift, l))


@triton.jit
def _softmax_rows_pipelined_kernel(
    X, Y, LSE, n_rows, n_cols, stride_xr, stride_yr,
    BLOCK_N: tl.constexpr, STAGES: tl.constexpr,
    PRECISE: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr,
):
    # The single pass, persistent: program p takes rows p, p + P, p + 2P, ...  The loop body
    # holds no loop, so the pipeliner can issue the loads of the next STAGES - 1 rows as
    # asynchronous copies into shared memory while this row is reduced and stored from
    # registers: one read and one write an element, and the SM's memory traffic never waits
    # for its own arithmetic.
    cols = tl.arange(0, BLOCK_N)
    in_row = cols < n_cols
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        row64 = tl.zeros([], tl.int64) + row  # row * stride can pass 2**31 (row is a plain int when interpreted)
        x = tl.load(X + row64 * stride_xr + cols, mask=in_row, other=float("-inf")).to(tl.float32)
        shift = safe_max(tl.max(x, axis=0))
        p = _exp(x, shift, PRECISE)
        l = _sum(p, 0, PRECISE)
        if WRITE_Y:
            y = _divide(p, l, PRECISE)
            tl.store(Y + row64 * stride_yr + cols, y.to(Y.dtype.element_ty), mask=in_row)
        if WRITE_LSE:
            tl.store(LSE + row, _lse(shift, l))


@triton.jit
def _span_stats(x_row, lo, hi, BLOCK_N: tl.constexpr, PRECISE: tl.constexpr, KEEP: tl.constexpr):
    """(m, l) of x_row[lo:hi]: m the maximum, l = sum exp(x - safe_max(m))."""
    offs = tl.arange(0, BLOCK_N)
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], tl.float32)
    l_err = tl.zeros([], tl.float32)  # rounding error of the running sum (float32 path)
    x = tl.load(x_row + lo + offs, mask=lo + offs < hi, other=float("-inf"), eviction_policy=KEEP)
    for start in range(lo + BLOCK_N, hi + BLOCK_N, BLOCK_N):
        # Issue the next block's load before working on this one: two blocks in flight.
        cols = start + offs
        x_next = tl.load(x_row + cols, mask=cols < hi, other=float("-inf"), eviction_policy=KEEP)
        xf = x.to(tl.float32)
        m_new = tl.maximum(m, tl.max(xf, axis=0))
        shift = safe_max(m_new)
        # While everything so far is -inf, shift is 0 and both exponentials are 0:
        # the rescale never evaluates exp(-inf - (-inf)).
        alpha = _exp(m, shift, PRECISE)
        block_sum = _sum(_exp(xf, shift, PRECISE), 0, PRECISE)
        if PRECISE:
            l, l_err = _two_sum(l * alpha, block_sum, l_err * alpha)
        else:
            l = l * alpha + block_sum
        m = m_new
        x = x_next
    return m, l + l_err


_FLT_MAX: tl.constexpr = tl.constexpr(3.4028234663852886e38)  # the largest finite float32


@triton.jit
def _span_stats_lanes(x_row, lo, hi, BLOCK_N: tl.constexpr, KEEP: tl.constexpr):
    """(m, l) of x_row[lo:hi] as _span_stats computes them, for the fast exponential only, with
    running statistics per lane: lane j keeps (m_j, l_j) over the elements j, j + BLOCK_N, ...
    and the lanes are merged once at the end.

    _span_stats reduces every block across the program (a max, then a sum: two barriers per
    block), so all warps wait for the slowest load; here the loop has no cross-lane step and
    one exponential per element: with d = x - m_j, e = exp(-|d|) is exp(m_j - x) when x is
    the new maximum (l_j <- l_j e + 1) and exp(x - m_j) otherwise (l_j <- l_j + e).

    A lane starts at m_j = -FLT_MAX, l_j = 0, not -inf, so d is never -inf - (-inf):
    an -inf element gives e = 0; the first finite one gives d > 0 (or +inf, e = 0) and
    l_j = 1.  NaN makes e, hence l_j, NaN; +inf makes m_j = +inf and the merge's weight
    exp(m_j - shift) = exp(inf - inf) NaN.  A lane that saw a finite element has l_j >= 1,
    so l = 0 exactly when the span is all -inf, which then reports m = -inf.

    Error: each l_j is a sequential sum of (hi - lo) / BLOCK_N terms, each rescale one more
    rounding, against log2(BLOCK_N) for a tree: a few ulp of float32 either way, far below
    a 16-bit output's rounding and within the fast float32 path's tolerance.
    """
    offs = tl.arange(0, BLOCK_N)
    m = tl.full([BLOCK_N], -_FLT_MAX, tl.float32)
    l = tl.zeros([BLOCK_N], tl.float32)
    x = tl.load(x_row + lo + offs, mask=lo + offs < hi, other=float("-inf"), eviction_policy=KEEP)
    for start in range(lo + BLOCK_N, hi + BLOCK_N, BLOCK_N):
        cols = start + offs
        x_next = tl.load(x_row + cols, mask=cols < hi, other=float("-inf"), eviction_policy=KEEP)
        xf = x.to(tl.float32)
        d = xf - m
        e = tl.exp2(tl.abs(d) * -LOG2E)
        l = tl.where(d > 0.0, tl.fma(l, e, 1.0), l + e)
        m = tl.maximum(m, xf)
        x = x_next
    m_span = tl.max(m, axis=0)
    l_span = tl.sum(l * exp_diff_fast(m, m_span), axis=0)
    return tl.where(l_span == 0.0, float("-inf"), m_span), l_span


@triton.jit
def _two_sum(a, b, err):
    s = a + b
    bv = s - a
    return s, err + ((a - (s - bv)) + (b - bv))


@triton.jit
def _span_normalize(x_row, y_row, lo, hi, shift, l, BLOCK_N: tl.constexpr, PRECISE: tl.constexpr,
                    DROP: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    x = tl.load(x_row + lo + offs, mask=lo + offs < hi, other=float("-inf"), eviction_policy=DROP)
    for start in range(lo, hi, BLOCK_N):
        cols = start + offs
        x_next = tl.load(x_row + BLOCK_N + cols, mask=BLOCK_N + cols < hi, other=float("-inf"),
                         eviction_policy=DROP)
        y = _divide(_exp(x.to(tl.float32), shift, PRECISE), l, PRECISE)
        tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=cols < hi, eviction_policy=DROP)
        x = x_next


@triton.jit
def _span_exp_kept(x_row, p_row, m_row, lo, hi, BLOCK_N: tl.constexpr, KEEP: tl.constexpr, DROP: tl.constexpr,
                   STORE: tl.constexpr = True):
    """First sweep of the precise float32 path that keeps its exponentials: (m, l) of
    x_row[lo:hi], with l in float64, and per block b (elements [lo + b BLOCK_N, ...)):
    ``p = exp(x - safe_max(m_b))`` written to p_row (the output row, float32) and the running
    maximum ``m_b`` after the block written to ``m_row[b]``.

    ``l = sum_b s_b exp(safe_max(m_b) - safe_max(m))`` with ``s_b`` the block's compensated
    sum of its p; the weights and the running sum are float64 (~1e-15 relative), so l is as
    accurate as the block sums (~1 rounding of the sum of the float32 p), and rows never
    round a float32 rescale factor.  Each element's input is read once (DROP) and its p
    stays in L2 (KEEP) for :func:`_span_rescale`.  ``STORE`` False writes nothing: the same
    (m, l) for a program that rebuilds a late partner's statistics (``_spans_row_stats``).
    """
    offs = tl.arange(0, BLOCK_N)
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], tl.float64)
    x = tl.load(x_row + lo + offs, mask=lo + offs < hi, other=float("-inf"), eviction_policy=DROP)
    b = 0
    for start in range(lo, hi, BLOCK_N):
        cols = start + offs
        x_next = tl.load(x_row + BLOCK_N + cols, mask=BLOCK_N + cols < hi, other=float("-inf"),
                         eviction_policy=DROP)
        xf = x.to(tl.float32)
        m_new = tl.maximum(m, tl.max(xf, axis=0))
        shift = safe_max(m_new)
        p = exp_diff(xf, shift)
        s_hi, s_lo = sum_compensated(p, 0)
        # exp(-inf - shift) = 0 while nothing finite has been seen; NaN once m is +inf.
        alpha = tl.exp(m.to(tl.float64) - shift.to(tl.float64))
        l = l * alpha + (s_hi.to(tl.float64) + s_lo.to(tl.float64))
        if STORE:
            tl.store(p_row + cols, p, mask=cols < hi, eviction_policy=KEEP)
            tl.store(m_row + b, m_new)
        m = m_new
        b += 1
        x = x_next
    return m, l


@triton.jit
def _span_rescale(p_row, m_row, lo, hi, shift, l, BLOCK_N: tl.constexpr, DROP: tl.constexpr):
    """Second sweep after :func:`_span_exp_kept`: ``y = p * (exp(m_b - shift) / l)`` in place,
    the block's factor in float64 split into a float32 pair so that ``fma(p, hi, p * lo)``
    rounds once (as the cooperative schedule does).  A block before the row's first finite
    element has ``m_b = -inf``, factor 0 and p = 0; l = 0 (an all -inf row) is read as 1; a
    NaN l makes the whole row NaN."""
    offs = tl.arange(0, BLOCK_N)
    p = tl.load(p_row + lo + offs, mask=lo + offs < hi, other=0.0, eviction_policy=DROP)
    inv_l = 1.0 / tl.where(l == 0.0, 1.0, l)
    b = 0
    for start in range(lo, hi, BLOCK_N):
        cols = start + offs
        p_next = tl.load(p_row + BLOCK_N + cols, mask=BLOCK_N + cols < hi, other=0.0, eviction_policy=DROP)
        m_b = tl.load(m_row + b)
        factor = tl.exp(m_b.to(tl.float64) - shift.to(tl.float64)) * inv_l
        tl.store(p_row + cols, _times_f64(p, factor), mask=cols < hi, eviction_policy=DROP)
        b += 1
        p = p_next


@triton.jit
def _softmax_online_kernel(
    X, Y, LSE, MAXES, n_rows, n_cols, stride_xr, stride_yr, n_blocks,
    BLOCK_N: tl.constexpr, PRECISE: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr,
    KEEP: tl.constexpr, DROP: tl.constexpr, LANES: tl.constexpr, KEEP_P: tl.constexpr,
    ALIGN: tl.constexpr = 0,
):
    # Persistent: a fixed number of programs walk the rows, so only that many rows are
    # in flight and the normalizing sweep finds its row (or its exponentials) still in L2.
    # ALIGN > 0 (elements in 16 bytes): rows that start off a 16-byte boundary, see
    # _online_row_aligned.
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.zeros([], tl.int64) + row  # 64-bit offsets (row is a plain int when interpreted)
        x_row = X + row64 * stride_xr
        if KEEP_P:
            # Precise float32 with an output: one accurate exponential per element, not two
            # (the second sweep rescales the kept p); MAXES holds n_blocks maxima per program.
            m_row = MAXES + tl.program_id(0).to(tl.int64) * n_blocks
            y_row = Y + row64 * stride_yr
            m, l64 = _span_exp_kept(x_row, y_row, m_row, 0, n_cols, BLOCK_N, KEEP, DROP)
            # The rescale reads maxima (and p) other threads of this program wrote: a CTA
            # barrier orders global memory too.  The second one keeps the next row from
            # overwriting maxima a slower warp has not read yet.
            tl.debug_barrier()
            shift = safe_max(m)
            _span_rescale(y_row, m_row, 0, n_cols, shift, l64, BLOCK_N, DROP)
            tl.debug_barrier()
            if WRITE_LSE:
                tl.store(LSE + row64, _lse(shift.to(tl.float64), l64).to(tl.float32))
        elif ALIGN > 0:
            _online_row_aligned(X, Y, LSE, row64, n_cols, stride_xr, stride_yr, BLOCK_N, PRECISE, WRITE_Y,
                                WRITE_LSE, KEEP, DROP, LANES, ALIGN)
        else:
            if LANES:
                m, l = _span_stats_lanes(x_row, 0, n_cols, BLOCK_N, KEEP)
            else:
                m, l = _span_stats(x_row, 0, n_cols, BLOCK_N, PRECISE, KEEP)
            shift = safe_max(m)
            if WRITE_Y:
                _span_normalize(x_row, Y + row64 * stride_yr, 0, n_cols, shift, l, BLOCK_N, PRECISE, DROP)
            if WRITE_LSE:
                tl.store(LSE + row64, _lse(shift, l))


@triton.jit
def _online_row_aligned(X, Y, LSE, row64, n_cols, stride_xr, stride_yr, BLOCK_N: tl.constexpr,
                        PRECISE: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr,
                        KEEP: tl.constexpr, DROP: tl.constexpr, LANES: tl.constexpr, ALIGN: tl.constexpr):
    """One row of the online schedule whose start is off a 16-byte boundary (a row stride
    that is not a multiple of ALIGN elements, as for rows of 16385): Triton then proves no
    alignment for any load of it and issues one 2-byte load an element.  The body, from the
    row's first 16-byte-aligned element and a multiple of ALIGN long, is streamed as usual
    with the alignment stated (tl.multiple_of); the < ALIGN elements before it and the
    < ALIGN after it come in one small masked load, folded into (m, l) as one more block
    (the rescale's rounding: within a float32 ulp or two, far below a 16-bit output's).  The
    launch gives Y rows the same offset modulo ALIGN as X's (``_align_elements``), so the
    same split aligns the output."""
    at = row64 * stride_xr
    head, body = _aligned_body(at, n_cols, ALIGN)
    x_body = X + tl.multiple_of(at + head, ALIGN)
    if LANES:
        m, l = _span_stats_lanes(x_body, 0, body, BLOCK_N, KEEP)
    else:
        m, l = _span_stats(x_body, 0, body, BLOCK_N, PRECISE, KEEP)
    edge, edge_ok, x_edge = _row_edges(X, at, head, body, n_cols, ALIGN)
    m_all = tl.maximum(m, tl.max(x_edge, axis=0))
    shift = safe_max(m_all)
    # m = -inf (an empty or all -inf body) has l = 0 and weight exp(-inf) = 0; NaN or +inf
    # anywhere makes l NaN, as in the body's own statistics.
    l = l * _exp(m, shift, PRECISE) + _sum(_exp(x_edge, shift, PRECISE), 0, PRECISE)
    if WRITE_Y:
        y_at = row64 * stride_yr
        _span_normalize(x_body, Y + tl.multiple_of(y_at + head, ALIGN), 0, body, shift, l, BLOCK_N, PRECISE,
                        DROP)
        y_edge = _divide(_exp(x_edge, shift, PRECISE), l, PRECISE)
        tl.store(Y + y_at + edge, y_edge.to(Y.dtype.element_ty), mask=edge_ok)
    if WRITE_LSE:
        tl.store(LSE + row64, _lse(shift, l))


@triton.jit
def _softmax_partial_kernel(
    X, STATS, n_cols, stride_xr, chunk, n_chunks,
    BLOCK_N: tl.constexpr, PRECISE: tl.constexpr, KEEP: tl.constexpr, LANES: tl.constexpr,
    ALIGN: tl.constexpr = 0,
):
    # ALIGN > 0 (elements in 16 bytes; rows that start off a 16-byte boundary): the chunks
    # tile the row's aligned body (_aligned_body), so every chunk's loads are 16 bytes wide,
    # and the last chunk folds in the few elements around the body, as _online_row_aligned.
    pid = tl.program_id(0)
    row = pid // n_chunks
    c = pid % n_chunks
    lo = c * chunk
    at = row.to(tl.int64) * stride_xr
    if ALIGN > 0:
        head, body = _aligned_body(at, n_cols, ALIGN)
        x_row = X + tl.multiple_of(at + head, ALIGN)
        hi = tl.minimum(lo + chunk, body)
    else:
        x_row = X + at
        hi = tl.minimum(lo + chunk, n_cols)
    if LANES:
        m, l = _span_stats_lanes(x_row, lo, hi, BLOCK_N, KEEP)
    else:
        m, l = _span_stats(x_row, lo, hi, BLOCK_N, PRECISE, KEEP)
    if ALIGN > 0:
        if c == n_chunks - 1:
            # m = -inf (an empty or all -inf span) has l = 0 and weight exp(-inf) = 0.
            edge, edge_ok, x_edge = _row_edges(X, at, head, body, n_cols, ALIGN)
            m_all = tl.maximum(m, tl.max(x_edge, axis=0))
            shift = safe_max(m_all)
            l = l * _exp(m, shift, PRECISE) + _sum(_exp(x_edge, shift, PRECISE), 0, PRECISE)
            m = m_all
    tl.store(STATS + 2 * pid, m)
    tl.store(STATS + 2 * pid + 1, l)


@triton.jit
def _merge_stats(STATS, row, n_chunks, BLOCK_C: tl.constexpr, PRECISE: tl.constexpr):
    """Combine a row's per-chunk (m_c, l_c) into (shift, l) for the whole row."""
    c = tl.arange(0, BLOCK_C)
    valid = c < n_chunks
    base = STATS + 2 * (row * n_chunks + c)
    mc = tl.load(base, mask=valid, other=float("-inf"))
    lc = tl.load(base + 1, mask=valid, other=0.0)
    shift = safe_max(tl.max(mc, axis=0))
    # Each l_c is relative to safe_max(m_c); a chunk of all -inf has m_c = -inf, l_c = 0,
    # whose weight exp(-inf - shift) is 0.
    l = _sum(lc * _exp(mc, shift, PRECISE), 0, PRECISE)
    return shift, l


@triton.jit
def _softmax_finish_kernel(
    X, Y, LSE, STATS, n_cols, stride_xr, stride_yr, chunk, n_chunks,
    BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr,
    PRECISE: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr, DROP: tl.constexpr,
    ALIGN: tl.constexpr = 0,
):
    # Reverse order: the chunks the statistics kernel read last are the ones still in L2.
    # ALIGN > 0: chunks of the aligned body, as _softmax_partial_kernel; the launch gives Y
    # rows X's offset modulo ALIGN (_align_elements), so the output splits alike.
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    row = pid // n_chunks
    c = pid % n_chunks
    shift, l = _merge_stats(STATS, row, n_chunks, BLOCK_C, PRECISE)
    if WRITE_Y:
        lo = c * chunk
        row64 = row.to(tl.int64)
        at = row64 * stride_xr
        y_at = row64 * stride_yr
        if ALIGN > 0:
            head, body = _aligned_body(at, n_cols, ALIGN)
            hi = tl.minimum(lo + chunk, body)
            _span_normalize(X + tl.multiple_of(at + head, ALIGN), Y + tl.multiple_of(y_at + head, ALIGN), lo, hi,
                            shift, l, BLOCK_N, PRECISE, DROP)
            if c == n_chunks - 1:
                edge, edge_ok, x_edge = _row_edges(X, at, head, body, n_cols, ALIGN)
                y_edge = _divide(_exp(x_edge, shift, PRECISE), l, PRECISE)
                tl.store(Y + y_at + edge, y_edge.to(Y.dtype.element_ty), mask=edge_ok)
        else:
            hi = tl.minimum(lo + chunk, n_cols)
            _span_normalize(X + at, Y + y_at, lo, hi, shift, l, BLOCK_N, PRECISE, DROP)
    if WRITE_LSE:
        if c == 0:
            tl.store(LSE + row, _lse(shift, l))


# Statistics slot of the cooperative schedule before its program publishes: l = -1.0 in the
# high word, which no published l (>= 0 or NaN) can be.
_COOP_EMPTY_L: tl.constexpr = tl.constexpr(-1.0)
_COOP_EMPTY = -(1 << 64) + (0xBF800000 << 32)  # that int64, as the host fills the buffer


@triton.jit
def _pack_stats(m, l):
    # One 64-bit word per chunk: a reader sees both halves of a publication or neither.
    lo = m.to(tl.int32, bitcast=True).to(tl.uint32, bitcast=True).to(tl.int64)
    hi = l.to(tl.int32, bitcast=True).to(tl.int64) << 32
    return hi | lo


@triton.jit
def _unpack_stats(packed):
    m = packed.to(tl.int32).to(tl.float32, bitcast=True)
    l = (packed >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    return m, l


@triton.jit
def _chunk_stats(x, PRECISE: tl.constexpr):
    """(m, p, l) of a float32 block padded with -inf: m its maximum, p = exp(x - safe_max(m)),
    l = sum p.  The publisher and a program rebuilding a late partner's statistics both call
    this on a block of the same shape: the same computation (the same bits whenever the
    compiler gives both loads the same layout)."""
    m = tl.max(x, axis=0)
    p = _exp(x, safe_max(m), PRECISE)
    return m, p, _sum(p, 0, PRECISE)


@triton.jit
def _merge_f64(mc, lc):
    """(shift, l) of a row from its chunks' (m_c, l_c): shift = safe_max(max_c m_c) in float32,
    l = sum_c l_c exp(m_c - shift) in float64 (unused lanes: m_c = -inf, l_c = 0).

    The math of _merge_stats, carried in float64: the weights and the sum of at most a few
    hundred terms add ~1e-14 relative, so l is as accurate as its chunk sums.  A chunk of
    all -inf has weight exp(-inf) = 0; a NaN l_c, or m_c = shift = +inf (exp(NaN)), makes l NaN.
    """
    shift = safe_max(tl.max(mc, axis=0))
    w = tl.exp(mc.to(tl.float64) - shift.to(tl.float64))
    return shift, tl.sum(lc.to(tl.float64) * w, axis=0)


@triton.jit
def _poll_slots(slots, n_chunks, c, BLOCK_S: tl.constexpr):
    """One read of a row's chunk statistics other than ours (chunk c): packed words, 0 for
    ours and for unused lanes."""
    # BLOCK_S >= the program's thread count, so each slot is read by exactly one thread and
    # every decision on a poll comes out of a CTA-wide reduction: all warps take the same
    # branch (a replicated vector could let warps see different polls and split at a barrier).
    idx = tl.arange(0, BLOCK_S)
    others = (idx < n_chunks) & (idx != c)
    # volatile: a strong load the compiler may not hoist out of the polling loop, served
    # from L2 (where the partners' atomics land), never from a stale L1 line.
    return tl.load(slots + idx, mask=others, other=0, volatile=True)


@triton.jit
def _await_slots(slots, packed, n_chunks, c, spin_limit, counts, BLOCK_S: tl.constexpr, COUNT_SPINS: tl.constexpr):
    """(m_c, l_c, missing): a row's published statistics from a first poll of its slots
    (``packed``), polled again at most ``spin_limit`` times while any is missing; a slot still
    unpublished has ``l_c == _COOP_EMPTY_L`` and ``missing`` counts them.  With
    ``COUNT_SPINS`` the program adds its polls after the first to ``counts[0]`` and 1 to
    ``counts[1]`` when it polled again at all."""
    mc, lc = _unpack_stats(packed)
    missing = tl.sum((lc == _COOP_EMPTY_L).to(tl.int32), axis=0)
    spins = spin_limit * 0
    while (missing > 0) & (spins < spin_limit):
        packed = _poll_slots(slots, n_chunks, c, BLOCK_S)
        mc, lc = _unpack_stats(packed)
        missing = tl.sum((lc == _COOP_EMPTY_L).to(tl.int32), axis=0)
        spins += 1
    if COUNT_SPINS:
        tl.atomic_add(counts, spins.to(tl.int64), sem="relaxed")
        tl.atomic_add(counts + 1, (spins > 0).to(tl.int64), sem="relaxed")
    return mc, lc, missing


@triton.jit
def _merge_with_own(mc, lc, n_chunks, c, m_own, l_own, BLOCK_S: tl.constexpr):
    """_merge_f64 of a row's polled statistics with chunk c's own in place of its slot and the
    lanes past n_chunks emptied."""
    idx = tl.arange(0, BLOCK_S)
    mc = tl.where(idx == c, m_own, tl.where(idx < n_chunks, mc, float("-inf")))
    lc = tl.where(idx == c, l_own, tl.where(idx < n_chunks, lc, 0.0))
    return _merge_f64(mc, lc)


@triton.jit
def _cooperative_row_stats(x_row, slots, packed, n_cols, n_chunks, c, m_own, l_own, spin_limit, counts, off,
                           CHUNK: tl.constexpr, BLOCK_S: tl.constexpr, PRECISE: tl.constexpr,
                           COUNT_SPINS: tl.constexpr):
    """(shift, l in float64) of a row from its n_chunks published chunk statistics (chunk c
    is ours), given a first poll of the slots (``packed``, from _poll_slots); ``off``: the
    row's first element within the chunks' windows (``_chunk_window``; 0 without ALIGN).

    Polls again at most spin_limit times while a chunk is missing; any chunk still
    unpublished after that is computed here from the input, so the result never depends on
    a partner being resident.

    A diagnostic (off by default): with ``COUNT_SPINS`` the program adds its polls after the
    first to ``counts[0]`` and 1 to ``counts[1]`` when it polled again at all.
    """
    idx = tl.arange(0, BLOCK_S)
    mc, lc, missing = _await_slots(slots, packed, n_chunks, c, spin_limit, counts, BLOCK_S, COUNT_SPINS)
    if missing > 0:
        # A partner is late (not resident, or the interpreter, which runs programs one by
        # one): read its chunk from the input.  Slow but correct; never taken in a normal
        # GPU run.
        offs = tl.arange(0, CHUNK)
        for j in range(0, n_chunks):
            lj = tl.sum(tl.where(idx == j, lc, 0.0), axis=0)
            if lj == _COOP_EMPTY_L:
                cols = j * CHUNK + offs  # chunk j's window, as its publisher loaded it
                xj = tl.load(x_row - off + cols, mask=(cols >= off) & (cols < off + n_cols),
                             other=float("-inf")).to(tl.float32)
                mj, _pj, lj = _chunk_stats(xj, PRECISE)
                mc = tl.where(idx == j, mj, mc)
                lc = tl.where(idx == j, lj, lc)
    return _merge_with_own(mc, lc, n_chunks, c, m_own, l_own, BLOCK_S)


@triton.jit
def _coop_publish(slots, c, m_c, l_c, ok):
    # One relaxed 64-bit exchange; a reader sees both halves or neither.
    tl.atomic_xchg(slots + c, _pack_stats(m_c, l_c), mask=ok, sem="relaxed", scope="gpu")


@triton.jit
def _scaled(p, scale, PRECISE: tl.constexpr):
    # p times the float64 factor: rounded once on the precise path, in float32 on the fast one.
    if PRECISE:
        y = _times_f64(p, scale)
    else:
        y = p * scale.to(tl.float32)
    return y


@triton.jit
def _coop_finish(x_row, Y, y_at, lse_at, slots, packed, n_cols, n_chunks, c, cols, off, p, m_c, l_c, spin_limit,
                 counts, CHUNK: tl.constexpr, BLOCK_S: tl.constexpr, COOP: tl.constexpr,
                 PRECISE: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr,
                 COUNT_SPINS: tl.constexpr, ALIGN: tl.constexpr):
    """Write one row's chunk ``y = p * exp(m_c - shift) / l`` (and its LSE from chunk 0), once
    the row's statistics are merged from the published slots (``COOP``; ``packed`` is a first
    poll of them) or are the chunk's own.  ``cols``: the chunk's window, ``off`` the row's
    first element in it (``_chunk_window``).  With ALIGN the window's whole 16-byte groups
    inside the row are stored with the alignment stated, the < ALIGN elements of a group the
    row only partly fills (at most one at each end) by a small store of their own, their
    exponentials taken again from the input (the same code on the same bits).  ``Y + y_at``: the
    output row."""
    y_row = Y + y_at
    shift = safe_max(m_c)
    l = l_c.to(tl.float64)
    if COOP:
        if WRITE_Y:
            shift, l = _cooperative_row_stats(x_row, slots, packed, n_cols, n_chunks, c, m_c, l_c, spin_limit,
                                              counts, off, CHUNK, BLOCK_S, PRECISE, COUNT_SPINS)
        elif c == 0:  # only the LSE is wanted: one member per group merges
            shift, l = _cooperative_row_stats(x_row, slots, packed, n_cols, n_chunks, c, m_c, l_c, spin_limit,
                                              counts, off, CHUNK, BLOCK_S, PRECISE, COUNT_SPINS)
    if WRITE_Y:
        # exp(m_c - shift) / l: 0 for an all -inf chunk or row (l = 0 read as 1), NaN
        # when l is; exactly 1 / l for the chunk holding the maximum.
        scale = tl.exp(m_c.to(tl.float64) - shift.to(tl.float64)) / tl.where(l == 0.0, 1.0, l)
        y = _scaled(p, scale, PRECISE)
        if ALIGN:
            # Whole groups [lo, hi) through the aligned window; the partial groups apart.
            lo = tl.multiple_of((off + ALIGN - 1) // ALIGN * ALIGN, ALIGN)
            hi = tl.multiple_of((off + n_cols) // ALIGN * ALIGN, ALIGN)
            y_win = Y + tl.multiple_of(y_at - off, ALIGN)  # Y rows start where X's do, modulo ALIGN
            tl.store(y_win + cols, y.to(y_row.dtype.element_ty), mask=(cols >= lo) & (cols < hi))
            e = tl.arange(0, 2 * ALIGN)
            at = tl.where(e < ALIGN, e, tl.maximum(hi, lo) + e - ALIGN)
            edge = ((at >= off) & (at < off + n_cols) & ((at < lo) | (at >= hi))
                    & (at >= c * CHUNK) & (at < c * CHUNK + CHUNK))
            x_e = tl.load(x_row - off + at, mask=edge, other=float("-inf")).to(tl.float32)
            y_e = _scaled(_exp(x_e, safe_max(m_c), PRECISE), scale, PRECISE)
            tl.store(y_win + at, y_e.to(y_row.dtype.element_ty), mask=edge)
        else:
            tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=cols < n_cols)
    if WRITE_LSE:
        if c == 0:
            tl.store(lse_at, _lse(shift.to(tl.float64), l).to(tl.float32))


@triton.jit
def _chunk_window(row, stride_xr, ALIGN: tl.constexpr):
    """``off``, the row's first element within the chunks' windows: the windows tile the row
    from the 16-byte boundary at or before its start, so every chunk's window starts on one
    (ALIGN elements in 16 bytes; X's base pointer aligned), ``off`` = the row's start modulo
    ALIGN; 0 without ALIGN (the windows start at the row)."""
    if ALIGN:
        off = (row * stride_xr) % ALIGN
    else:
        off = row * 0
    return off


@triton.jit
def _load_chunk(X, row, n_rows, n_cols, stride_xr, cols, ALIGN: tl.constexpr):
    # A row past the last one loads nothing (an empty mask) and reads as all -inf.
    limit = tl.where(row < n_rows, n_cols, 0)
    if ALIGN:
        # Whole 16-byte groups from the window's aligned start, the lanes outside the row
        # (before it in the first chunk, after it in the last: within the 16-byte groups that
        # hold the row's first and last elements, so inside its allocation) read and then
        # set to -inf.  A mask at group boundaries keeps the loads 16 bytes wide.
        off = _chunk_window(row, stride_xr, ALIGN)
        reach = tl.multiple_of(tl.where(limit > 0, (off + limit + ALIGN - 1) // ALIGN * ALIGN, 0), ALIGN)
        x = tl.load(X + tl.multiple_of(row * stride_xr - off, ALIGN) + cols, mask=cols < reach, other=float("-inf"))
        x = tl.where((cols >= off) & (cols < off + limit), x, float("-inf"))
    else:
        x = tl.load(X + row * stride_xr + cols, mask=cols < limit, other=float("-inf"))
    return x


@triton.jit
def _softmax_cooperative_kernel(
    X, Y, LSE, SLOTS, n_rows, n_cols, stride_xr, stride_yr, n_chunks, spin_limit,
    CHUNK: tl.constexpr, BLOCK_S: tl.constexpr, COOP: tl.constexpr,
    PRECISE: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr,
    LAG: tl.constexpr = False, HOLD_X: tl.constexpr = False, EARLY_POLL: tl.constexpr = False,
    COUNT_SPINS: tl.constexpr = False, ALIGN: tl.constexpr = 0,
):
    """Cooperative split rows: every element read once and written once, for long rows.

    Layout.  The grid is ``n_groups * n_chunks`` persistent programs; program ``pid`` is chunk
    ``c = pid % n_chunks`` of group ``g = pid // n_chunks`` and handles columns
    ``[c * CHUNK, (c + 1) * CHUNK)`` of rows ``g, g + n_groups, g + 2 n_groups, ...``.  A group
    is whole by construction (the grid is a multiple of ``n_chunks``) and all its members walk
    the same rows.  A program holds its chunk in registers from the load to the store, and
    loads the chunk of its next row before it works on this one (one row of prefetch).

    Per row: compute the chunk's ``m_c = max x``, ``p = exp(x - safe_max(m_c))`` (kept in
    registers) and ``l_c = sum p``; publish ``(m_c, l_c)`` as one relaxed 64-bit atomic
    exchange into ``SLOTS[row, c]`` (filled with ``l = -1`` by the host for every launch, so
    no slot is reused and nothing needs resetting); poll the row's other slots; merge
    ``shift = safe_max(max_c m_c)``, ``l = sum_c l_c exp(m_c - shift)`` in float64; write
    ``y = p * (exp(m_c - shift) / l)``, the scalar factor in float64.  Only the statistics
    cross programs and each is a single atomic word, so no fence and no acquire/release
    ordering is needed.  With ``COOP`` false (one chunk per row) there is no exchange: a
    persistent single-pass kernel with prefetch.

    Lag (``LAG``).  Without it a program polls for row ``r``'s statistics right after it
    publishes its own, so every row costs a publish-and-poll round trip through the L2 (and
    waits for the slowest partner) with nothing else in flight.  With it, the program publishes
    row ``r + n_groups`` before it polls for row ``r``: its partners have had a whole row's
    work to publish, and the wait overlaps the next row's exponentials.  The price is one more
    chunk in registers (``p`` of the finished row, or for 16-bit inputs with ``HOLD_X`` the
    input chunk, whose exponentials are computed again -- the same code on the same bits, so
    the same values).  With ``EARLY_POLL`` the first read of row ``r``'s slots is issued at the
    top of the iteration (they were published during the last one), so its L2 round trip
    overlaps the next row's exponentials; the polling loop only runs if a partner is late.

    Residency.  The host launches no more programs than the SMs hold at once: one per SM, or
    up to COOP_LONG's ``per_sm`` for long rows, capped by what the compiled
    kernel's registers, threads and shared memory allow (``_resident_per_sm``), so on an
    otherwise idle GPU every program is resident and partners publish within microseconds
    of each other.  If that fails (another kernel holding SMs,
    MPS or green-context SM limits, the interpreter running programs one after another),
    the polling gives up after ``spin_limit`` rounds and the program computes the missing
    chunks' statistics itself from ``X`` with the same code: the kernel cannot deadlock, it
    degrades to reading such rows more than once.

    Rows off 16-byte boundaries (``ALIGN``, the elements in 16 bytes, for 16-bit rows whose
    stride is no multiple of them).  Triton proves no alignment for a row that starts off a
    16-byte boundary and loads and stores it an element at a time.  With ALIGN the chunks'
    windows tile each row from the 16-byte boundary at or before its start (``_chunk_window``;
    the host gives them one more window's reach where the row needs it, and Y rows the same
    offset modulo ALIGN as X's): whole groups are loaded 16 bytes at a time, the lanes outside
    the row set to -inf, and stored so (``_coop_finish``).  A chunk then holds other elements
    of the row than without ALIGN, so its sums, and the output's last bits, may differ.

    Diagnostic.  With ``COUNT_SPINS`` (``counting_cooperative_polls``) every program counts its
    polls into two int64 words the host appends after the slots (``SLOTS[n_rows * n_chunks]``).

    Contract.  As the other schedules: ``-inf`` entries give 0; an all ``-inf`` row gives all
    zeros and LSE ``-inf`` (its chunks publish ``m = -inf, l = 0``, weight 0 in the merge,
    l = 0); NaN or ``+inf`` anywhere in a row makes that chunk's ``l_c`` NaN, hence the row's
    ``l``, so the whole row is NaN (LSE NaN); rows never mix (one slot row per row).

    Error.  float32 (PRECISE): ``p`` is the ~1 ulp exponential of the other kernels and ``l_c``
    their compensated sum (with one chunk a row, their float64 sum) rounded once to float32;
    the merge and the factor ``exp(m_c - shift) / l`` are float64 (~1e-14 relative), split
    into a float32 pair so that ``y = fma(p, hi, p * lo)`` is rounded once (up to rare
    near-ties).  So the error is that of the single-pass kernel: ~1 ulp (exponential) + ~0.5
    ulp (l) + 0.5 ulp (final rounding), not more: unlike the online and split schedules, no float32 rescale factor is rounded.
    Fast path (``precise=False``) and 16-bit inputs: hardware exp2 for ``p``, plain tree sums
    (log2 CHUNK roundings in ``l_c``), ``y = p * hi`` (two roundings); 16-bit outputs are that
    float32 value rounded once.
    """
    pid = tl.program_id(0)
    group = pid // n_chunks
    c = pid - group * n_chunks
    n_groups = tl.num_programs(0) // n_chunks
    cols = c * CHUNK + tl.arange(0, CHUNK)  # the chunk's window (_chunk_window)
    # 64-bit offsets: row * stride can pass 2**31.  The host makes n_groups <= n_rows.
    first = tl.zeros([], tl.int64) + group
    x = _load_chunk(X, first, n_rows, n_cols, stride_xr, cols, ALIGN)
    if LAG:
        # The first row is published before the loop; each iteration then publishes the row
        # after the one it finishes (LAG requires COOP).
        m_c, p, l_c = _chunk_stats(x.to(tl.float32), PRECISE)
        _coop_publish(SLOTS + first * n_chunks, c, m_c, l_c, first < n_rows)
        if HOLD_X:
            p = x
        x = _load_chunk(X, first + n_groups, n_rows, n_cols, stride_xr, cols, ALIGN)
    for row in range(group, n_rows, n_groups):
        row64 = tl.zeros([], tl.int64) + row  # row is a plain int when interpreted
        # The next load is issued before any work on this row, so the memory system stays
        # busy while this program computes and waits for its partners.
        if LAG:
            if EARLY_POLL:
                packed = _poll_slots(SLOTS + row64 * n_chunks, n_chunks, c, BLOCK_S)
            ahead = row64 + n_groups
            x_next = _load_chunk(X, ahead + n_groups, n_rows, n_cols, stride_xr, cols, ALIGN)
            m_a, p_a, l_a = _chunk_stats(x.to(tl.float32), PRECISE)
            _coop_publish(SLOTS + ahead * n_chunks, c, m_a, l_a, ahead < n_rows)
            if not EARLY_POLL:
                packed = _poll_slots(SLOTS + row64 * n_chunks, n_chunks, c, BLOCK_S)
            p_row = p
            if HOLD_X:
                p_a = x
                p_row = _exp(p.to(tl.float32), safe_max(m_c), PRECISE)  # as _chunk_stats computed it
        else:
            x_next = _load_chunk(X, row64 + n_groups, n_rows, n_cols, stride_xr, cols, ALIGN)
            m_c, p_row, l_c = _chunk_stats(x.to(tl.float32), PRECISE)
            packed = tl.zeros([BLOCK_S], tl.int64)
            if COOP:
                _coop_publish(SLOTS + row64 * n_chunks, c, m_c, l_c, row64 < n_rows)
                packed = _poll_slots(SLOTS + row64 * n_chunks, n_chunks, c, BLOCK_S)
        _coop_finish(X + row64 * stride_xr, Y, row64 * stride_yr, LSE + row64, SLOTS + row64 * n_chunks, packed,
                     n_cols, n_chunks, c, cols, _chunk_window(row64, stride_xr, ALIGN), p_row, m_c, l_c,
                     spin_limit, SLOTS + n_rows * n_chunks,  # COUNT_SPINS only: two words after the slots
                     CHUNK, BLOCK_S, COOP, PRECISE, WRITE_Y, WRITE_LSE, COUNT_SPINS, ALIGN)
        if LAG:
            m_c, p, l_c = m_a, p_a, l_a
        x = x_next


@triton.jit
def _span_first(x_row, y_row, m_buf, lo, hi, BLOCK_N: tl.constexpr, PRECISE: tl.constexpr, KEEP_P: tl.constexpr,
                LANES: tl.constexpr, STORE: tl.constexpr, KEEP: tl.constexpr, DROP: tl.constexpr):
    """(m, l) of x_row[lo:hi], l rounded to float32 (as published), by the first sweep of the
    spans schedule: with ``KEEP_P`` the precise path that writes its exponentials and block
    maxima for the rescale (``STORE``), else the streamed statistics of the online schedule."""
    if KEEP_P:
        m, l64 = _span_exp_kept(x_row, y_row, m_buf, lo, hi, BLOCK_N, KEEP, DROP, STORE)
        l = l64.to(tl.float32)
    elif LANES:
        m, l = _span_stats_lanes(x_row, lo, hi, BLOCK_N, KEEP)
    else:
        m, l = _span_stats(x_row, lo, hi, BLOCK_N, PRECISE, KEEP)
    return m, l


@triton.jit
def _span_bounds(j, span, n_cols, HI_ALIGN: tl.constexpr):
    # HI_ALIGN divides n_cols and span, hence hi: stated, so the masks keep 16-byte accesses.
    lo = j * span
    return lo, tl.multiple_of(tl.minimum(lo + span, n_cols), HI_ALIGN)


@triton.jit
def _spans_row_stats(x_row, slots, packed, n_cols, n_spans, span, c, m_own, l_own, spin_limit, counts,
                     BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr, HI_ALIGN: tl.constexpr, PRECISE: tl.constexpr,
                     KEEP_P: tl.constexpr, LANES: tl.constexpr, COUNT_SPINS: tl.constexpr):
    """(shift, l in float64) of a row from its spans' published statistics (span c is ours),
    as _cooperative_row_stats: a span still unpublished after the polls is computed here from
    the input by the publisher's own first sweep (writing nothing)."""
    idx = tl.arange(0, BLOCK_S)
    mc, lc, missing = _await_slots(slots, packed, n_spans, c, spin_limit, counts, BLOCK_S, COUNT_SPINS)
    if missing > 0:
        for j in range(0, n_spans):
            lj = tl.sum(tl.where(idx == j, lc, 0.0), axis=0)
            if lj == _COOP_EMPTY_L:
                lo, hi = _span_bounds(j, span, n_cols, HI_ALIGN)
                mj, lj = _span_first(x_row, x_row, x_row, lo, hi, BLOCK_N, PRECISE, KEEP_P, LANES, False, "", "")
                mc = tl.where(idx == j, mj, mc)
                lc = tl.where(idx == j, lj, lc)
    return _merge_with_own(mc, lc, n_spans, c, m_own, l_own, BLOCK_S)


@triton.jit
def _softmax_spans_kernel(
    X, Y, LSE, SLOTS, MAXES, n_rows, n_cols, stride_xr, stride_yr, n_spans, span, spin_limit,
    BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr, HI_ALIGN: tl.constexpr, PRECISE: tl.constexpr,
    WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr, KEEP_P: tl.constexpr, LANES: tl.constexpr,
    LAG: tl.constexpr, KEEP: tl.constexpr, DROP: tl.constexpr, COUNT_SPINS: tl.constexpr = False,
):
    """Cooperative split rows streamed through the L2: long rows without holding them on chip.

    The cooperative kernel holds each program's chunk in registers from its load to its
    store, so a row of 1M float32 (4 MiB) takes every program of the GPU at a few warps each:
    one group, a global exchange per row, and little to overlap it with.  Here a program
    streams its span of the row in blocks, as the online schedule streams a whole row, and
    only the span's statistics cross programs.

    Layout.  ``n_groups * n_spans`` persistent programs; program ``pid`` is span
    ``c = pid % n_spans`` (columns ``[c * span, (c + 1) * span)``, ``span`` a multiple of
    BLOCK_N) of group ``pid // n_spans``, which walks rows ``g, g + n_groups, ...``.

    Per row: a first sweep over the span (``_span_first``): on the precise float32 path with an
    output (``KEEP_P``) ``_span_exp_kept`` writes ``p = exp(x - m_b)`` into the output row,
    kept in the L2, and each block's running maximum ``m_b`` into ``MAXES`` (per program, two
    rows' worth); otherwise the online schedule's statistics (per-lane on the fast float32
    path, ``LANES``) with the input kept in the L2.  Publish ``(m, l)`` as the cooperative
    kernel does (one 64-bit word per span in ``SLOTS``, filled unpublished by the host), poll
    the row's other spans, merge in float64, then a second sweep over the span: the rescale
    ``y = p * (exp(m_b - shift) / l)`` (``_span_rescale``) or ``y = exp(x - shift) / l`` from
    the input again (``_span_normalize``).  Both sweeps' second reads hit the L2 when the rows
    in flight fit there: the host sizes ``span`` so that they do.

    Lag (``LAG``): the first sweep of the group's next row runs before the poll for this row,
    so partners have had a whole sweep to publish (two rows in flight per group).

    Residency and late partners: as ``_softmax_cooperative_kernel`` (a program that polls
    ``spin_limit`` times in vain computes the missing spans' statistics from the input with
    the same code); the host launches no more programs than the SMs hold at once.

    Contract and error: those of the online schedule row by row: ``-inf`` entries give 0, an
    all ``-inf`` row zeros (LSE ``-inf``), NaN or ``+inf`` in a row NaN throughout; precise
    float32 as the online schedule's kept exponentials (~1 ulp exponential, float64 block
    weights and ``1 / l``, one final rounding) with each span's ``l`` rounded once to
    float32 for the exchange (at most half an ulp of ``l``, as the cooperative kernel's
    chunks).  Fast path and 16-bit inputs: hardware exp2 and plain sums, as the online schedule.
    """
    pid = tl.program_id(0)
    group = pid // n_spans
    c = pid - group * n_spans
    n_groups = tl.num_programs(0) // n_spans
    lo, hi = _span_bounds(c, span, n_cols, HI_ALIGN)
    n_blocks = span // BLOCK_N
    maxes = MAXES + pid.to(tl.int64) * (2 * n_blocks)  # KEEP_P: two rows' block maxima
    counts = SLOTS + n_rows * n_spans  # COUNT_SPINS only: two words after the slots
    m_own = tl.full([], float("-inf"), tl.float32)
    l_own = tl.zeros([], tl.float32)
    if LAG:
        first = tl.zeros([], tl.int64) + group  # the host makes n_groups <= n_rows
        m_own, l_own = _span_first(X + first * stride_xr, Y + first * stride_yr, maxes, lo, hi, BLOCK_N, PRECISE,
                                   KEEP_P, LANES, True, KEEP, DROP)
        _coop_publish(SLOTS + first * n_spans, c, m_own, l_own, first < n_rows)
    k = 0
    for row in range(group, n_rows, n_groups):
        row64 = tl.zeros([], tl.int64) + row  # 64-bit offsets; row is a plain int when interpreted
        x_row = X + row64 * stride_xr
        y_row = Y + row64 * stride_yr
        m_buf = maxes + (k % 2) * n_blocks
        if LAG:
            m_c, l_c = m_own, l_own
            ahead = row64 + n_groups
            if ahead < n_rows:
                m_own, l_own = _span_first(X + ahead * stride_xr, Y + ahead * stride_yr,
                                           maxes + ((k + 1) % 2) * n_blocks, lo, hi, BLOCK_N, PRECISE, KEEP_P,
                                           LANES, True, KEEP, DROP)
                _coop_publish(SLOTS + ahead * n_spans, c, m_own, l_own, ahead < n_rows)
        else:
            m_c, l_c = _span_first(x_row, y_row, m_buf, lo, hi, BLOCK_N, PRECISE, KEEP_P, LANES, True, KEEP, DROP)
            _coop_publish(SLOTS + row64 * n_spans, c, m_c, l_c, row64 < n_rows)
        slots = SLOTS + row64 * n_spans
        if WRITE_Y:
            packed = _poll_slots(slots, n_spans, c, BLOCK_S)
            shift, l = _spans_row_stats(x_row, slots, packed, n_cols, n_spans, span, c, m_c, l_c, spin_limit,
                                        counts, BLOCK_N, BLOCK_S, HI_ALIGN, PRECISE, KEEP_P, LANES, COUNT_SPINS)
            if KEEP_P:
                # The rescale reads p and maxima other threads of this program wrote (a CTA
                # barrier orders global memory too); the second barrier keeps the first sweep
                # two rows on from overwriting maxima a slower warp has not read yet.
                tl.debug_barrier()
                _span_rescale(y_row, m_buf, lo, hi, shift, l, BLOCK_N, DROP)
                tl.debug_barrier()
            else:
                _span_normalize(x_row, y_row, lo, hi, shift, l.to(tl.float32), BLOCK_N, PRECISE, DROP)
            if WRITE_LSE:
                if c == 0:
                    tl.store(LSE + row64, _lse(shift.to(tl.float64), l).to(tl.float32))
        else:
            if c == 0:  # only the LSE is wanted: one program a group merges
                packed = _poll_slots(slots, n_spans, c, BLOCK_S)
                shift, l = _spans_row_stats(x_row, slots, packed, n_cols, n_spans, span, c, m_c, l_c, spin_limit,
                                            counts, BLOCK_N, BLOCK_S, HI_ALIGN, PRECISE, KEEP_P, LANES, COUNT_SPINS)
                tl.store(LSE + row64, _lse(shift.to(tl.float64), l).to(tl.float32))
        k += 1


def _rows_config(n_cols_pow2: int) -> tuple[int, int]:
    """(rows per program, num_warps) for the single-pass kernel."""
    block_r = max(1, min(16, 2048 // n_cols_pow2))
    elems = block_r * n_cols_pow2
    num_warps = 4 if elems <= 4096 else 8 if elems <= 8192 else 16
    return block_r, num_warps


class _Plan(NamedTuple):
    """A schedule and its launch parameters (see schedule_for)."""
    name: str
    block: int = 0  # BLOCK_N (rows, online, split) or CHUNK (cooperative)
    num_warps: int = 4
    block_r: int = 1  # rows: rows per program
    programs: int = 0  # online: persistent programs
    chunk: int = 0  # split: columns per chunk
    num_chunks: int = 1  # split, cooperative: programs per row
    groups: int = 0  # cooperative: rows in flight
    lag: bool = False  # cooperative, several chunks a row: publish a row ahead of the poll
    early_poll: bool = False  # with the lag: first read of the slots at the top of the iteration
    hold_x: bool = False  # with the lag, 16-bit inputs: hold the input chunk, not its exponentials
    lanes: bool = False  # online, split: per-lane statistics in the first sweep
    keep_p: bool = False  # online, precise float32: the first sweep writes exp(x - m_b) for the second
    maxnreg: int = 0  # registers a thread at most (0: the compiler's choice)
    sum64: bool = False  # precise float32: the exponentials summed in float64 (see SUM64_WARPS)
    stages: int = 1  # pipelined: tl.range num_stages
    block_a: int = 0  # rows, one a program: the pieces kernel's BLOCK_A (0: not eligible)
    block_b: int = 0  # and its BLOCK_B (0: the row is BLOCK_A long)
    pieces_warps: int = 0  # and its num_warps (num_warps stays the plain single pass's)


#: Rows of the single pass at least this long (as a power of two; one row a program) that are
#: not a power of two long, or start off 16-byte boundaries, are held in pieces
#: (``_softmax_row_pieces_kernel``).
PIECES_MIN_COLS = 2048


def _row_pieces(n_cols: int) -> tuple[int, int]:
    """(BLOCK_A, BLOCK_B) of ``_softmax_row_pieces_kernel`` for rows of ``n_cols``: the largest
    power of two at most ``n_cols``, and the next power of two of the rest (at least 16; 0 for
    none)."""
    block_a = 1 << (n_cols.bit_length() - 1)
    rest = n_cols - block_a
    return block_a, (max(16, triton.next_power_of_2(rest)) if rest else 0)


def _pieces_warps(block_a: int, block_b: int, precise: bool) -> int:
    """num_warps of the pieces kernel (TUNING's ``pieces_warps`` overrides): 4, up to 128
    elements a thread, but 8 for precise float32 rows of more than 12288 lanes.

    Fewer, fuller threads won on an H100 (2026-12-05 ~22:05 UTC, ``bench/softmax.py --sweep
    --variants pieces``, rows of 2**26 elements, % of copy at 2 / 4 / 8 / 16 warps): bf16
    N = 6000 102 / 102 / 99 / 79, 12288 93 / 99 / 93 / 90, 16383 58 / 99 / 89 / 88; precise float32
    6000 94 / 99 / 85 / 81, 12288 76 / 95 / 88 / 88, but 16383 21 / 78 / 94 / 92 (the accurate
    exponential and the float64 sum need the registers).
    """
    return int(_tuned("pieces_warps", 8 if precise and block_a + block_b > 12288 else 4))


def _row_alignment(x2: torch.Tensor, y2: torch.Tensor | None) -> int:
    """ALIGN for the pieces kernel: the elements in 16 bytes where X's (and Y's) base pointer is
    16-byte aligned, their columns are unit-strided and Y's row stride has X's remainder modulo
    them (each output row then splits where its input row does); else 1."""
    per16 = 16 // x2.element_size()
    if x2.data_ptr() % 16 or x2.stride(1) != 1:
        return 1
    if y2 is not None and (y2.data_ptr() % 16 or y2.stride(1) != 1 or (y2.stride(0) - x2.stride(0)) % per16):
        return 1
    return per16


def _single_block(dtype: torch.dtype) -> int:
    """The longest row the single-pass kernel holds by default."""
    return MAX_SINGLE_BLOCK if dtype == torch.float32 else MAX_SINGLE_BLOCK_16


def _wants_cooperative(n_cols: int, dtype: torch.dtype, precise: bool) -> bool:
    """Rows for which the cooperative schedule is the default on a GPU: float32 rows of
    8193..COOP_LONG_MAX on the precise path, 16385..COOP_LONG_MAX on the fast one, 16-bit rows
    of 65537..COOP_LONG_MAX.  For precise rows of 8193..16384 the single-pass kernel needs ~118
    registers a thread at 16 warps, one program per SM, and nothing overlaps its load, its
    accurate exponentials and its store; the cooperative kernel with one chunk per row
    prefetches the next row.  But precise rows of 8193..16383 that are not a power of two long
    take the pieces kernel (``_softmax_row_pieces_kernel``): on an H100 (2026-12-05 ~22:10 UTC,
    ``bench/softmax.py --sweep --variants pieces --dtypes fp32 --ns 9000,12288,16383,10001``,
    % of copy) 87.4 / 95.2 / 94.5 / 88.8 against the one-chunk cooperative launch's
    70.6 / 92.8 / 86.6 / 73.5 (0.93x-1.01x torch.softmax at 9000 and 10001).  Longer rows are
    split into chunks held by several programs a SM (see COOP_LONG).  Longer rows than
    COOP_LONG_MAX keep the split schedule.
    """
    if n_cols > COOP_LONG_MAX:
        return False
    if dtype == torch.float32 and precise and n_cols > MAX_SINGLE_BLOCK // 2:
        return n_cols > MAX_SINGLE_BLOCK or n_cols & (n_cols - 1) == 0 or _tuned("row_pieces", True) is False
    return long_row_launch(n_cols, dtype, precise) is not None


def _cooperative_plan(n_rows: int, n_cols: int, dtype: torch.dtype, sms: int, precise: bool) -> _Plan | None:
    """Launch parameters of the cooperative schedule, or None where a row needs more programs
    than the grid may hold (by default one per SM: rows beyond ~1M float32 / 2M 16-bit
    elements).  ``groups`` assumes ``per_sm`` programs fit on a SM; the launch lowers it to
    what the compiled kernel's registers allow (_resident_per_sm)."""
    launch = long_row_launch(n_cols, dtype, precise)
    long_rows = launch is not None
    chunk = TUNING["coop_chunk"] or (launch.chunk if launch else COOP_CHUNK[dtype])
    if chunk < 1 or chunk & (chunk - 1):
        raise ValueError(f"TUNING['coop_chunk'] must be a power of two, got {chunk}")
    chunk = min(chunk, triton.next_power_of_2(n_cols))
    num_chunks = triton.cdiv(n_cols, chunk)
    per_sm = int(_tuned("coop_programs_per_sm", launch.per_sm if launch else 1))
    slots = sms * per_sm
    if num_chunks > slots:
        return None
    if long_rows and n_rows * num_chunks < slots and not TUNING["cooperative"]:
        return None  # too few rows to fill the resident programs: split rows spread wider
    groups = min(slots // num_chunks, n_rows)
    if TUNING["coop_groups"]:
        # Partners must be resident together; one chunk per row has no partners, so any
        # number of groups may run (a persistent single pass).
        cap = slots // num_chunks if num_chunks > 1 else n_rows
        groups = min(cap, int(TUNING["coop_groups"]))
    sum64 = _sum64(precise and dtype == torch.float32, num_chunks == 1)
    warps = launch.warps if launch else max(1, min(SUM64_WARPS if sum64 else COOP_WARPS, chunk // 512))
    num_warps = TUNING["coop_warps"] or warps
    lag = num_chunks > 1 and bool(_tuned("coop_lag", launch.lag if launch else False))
    early = lag and bool(_tuned("coop_early_poll", launch.early_poll if launch else True))
    hold_x = lag and dtype != torch.float32 and bool(_tuned("coop_hold_x", launch.hold_x if launch else True))
    return _Plan("cooperative", block=chunk, num_warps=num_warps, num_chunks=num_chunks, groups=max(1, groups),
                 lag=lag, early_poll=early, hold_x=hold_x, sum64=sum64)


def _spans_plan(n_rows: int, n_cols: int, dtype: torch.dtype, sms: int, precise: bool,
                per_sm: int | None = None) -> _Plan | None:
    """Launch parameters of the spans schedule (``_softmax_spans_kernel``), or None where it
    does not apply (see spans_launch) or a row needs more spans than the grid may hold.  The
    ``sms * per_sm`` programs (SpansLaunch's per_sm, or fewer where ``per_sm`` says the
    compiled kernel fits fewer) are split into ``groups`` rows in flight: a row's span is
    the row over a group's programs, rounded up to whole blocks (or ``TUNING["spans_span"]``)."""
    precise = precise and dtype == torch.float32
    launch = spans_launch(n_cols, dtype, precise)
    if launch is None:
        return None
    block = launch.block
    span = TUNING["spans_span"]
    for key, value in (("spans_block", block), ("spans_span", span or 16)):
        if value < 16 or value & (value - 1):
            raise ValueError(f"TUNING[{key!r}] must be a power of two of at least 16, got {value}")
    block = min(block, triton.next_power_of_2(n_cols))
    programs = sms * (launch.per_sm if per_sm is None else min(per_sm, launch.per_sm))
    if span is None:
        per_row = max(1, programs // max(1, min(launch.groups, n_rows)))
        span = triton.cdiv(triton.cdiv(n_cols, per_row), block) * block
    span = max(block, span)
    n_spans = triton.cdiv(n_cols, span)
    if n_spans > programs:
        return None
    # per-lane statistics wherever the fast exponential is (fast float32, 16-bit); the precise
    # path keeps its exponentials instead
    return _Plan("spans", block=block, num_warps=launch.warps, chunk=span, num_chunks=n_spans,
                 groups=max(1, min(programs // n_spans, n_rows)), lag=launch.lag, lanes=not precise, keep_p=precise)


def _plan(n_rows: int, n_cols: int, dtype: torch.dtype, sms: int, interpreted: bool, l2_bytes: int,
          block_size: int | None, num_chunks: int | None, precise: bool, cooperative_ok: bool = True,
          spans_ok: bool = True) -> _Plan:
    precise = dtype == torch.float32 and precise
    block = block_size if block_size is not None else _single_block(dtype)
    if block < 1 or block & (block - 1):
        raise ValueError(f"block_size must be a power of two, got {block}")
    n_pow2 = triton.next_power_of_2(n_cols)

    # An explicit block_size or num_chunks asks for the older schedules.  The interpreter
    # takes the cooperative one only when TUNING forces it: it is correct there (a program
    # that waits in vain rebuilds its partners' statistics) but reads rows many times.
    coop = TUNING["cooperative"]
    if block_size is None and num_chunks is None and not coop:
        piped = pipelined_launch(n_rows, n_cols, dtype, sms)
        if piped is not None:
            return _Plan("pipelined", block=n_pow2, num_warps=piped.warps, programs=min(n_rows, piped.per_sm * sms),
                         stages=piped.stages, sum64=_sum64(precise, True))
        online16 = online_16bit_launch(n_rows, n_cols, dtype, sms)
        if online16 is not None:
            return _Plan("online", block=online16.block, num_warps=online16.warps,
                         programs=min(n_rows, online16.per_sm * sms), lanes=True,
                         maxnreg=int(_tuned("online_maxnreg", online16.maxnreg)))
    if (block_size is None and num_chunks is None and coop is None
            and unaligned_16bit_split(n_rows, n_cols, dtype, sms, l2_bytes)):
        num_chunks = UNALIGNED_16BIT_SPLIT_CHUNKS  # the split rows below, not spans or cooperative
    if spans_ok and block_size is None and num_chunks is None and (TUNING["spans"] or not interpreted):
        plan = _spans_plan(n_rows, n_cols, dtype, sms, precise)
        if plan is not None:
            return plan
    unaligned = (block_size is None and num_chunks is None and coop is None
                 and unaligned_16bit_online(n_rows, n_cols, dtype, sms))
    if cooperative_ok and block_size is None and num_chunks is None and coop is not False and not unaligned:
        if coop or (not interpreted and _wants_cooperative(n_cols, dtype, precise)):
            plan = _cooperative_plan(n_rows, n_cols, dtype, sms, precise)
            if plan is not None:
                return plan

    if n_pow2 <= block and num_chunks is None:
        block_r, num_warps = _rows_config(n_pow2)
        block_r = TUNING["rows_block_r"] or block_r
        num_warps = TUNING["rows_warps"] or num_warps
        pieces = {}
        if block_r == 1 and n_pow2 >= PIECES_MIN_COLS and _tuned("row_pieces", True):
            # the launch takes the pieces kernel or, for aligned power-of-two rows, the plain one
            block_a, block_b = _row_pieces(n_cols)
            pieces = dict(block_a=block_a, block_b=block_b, pieces_warps=_pieces_warps(block_a, block_b, precise))
        if interpreted:
            block_r = 1
        return _Plan("rows", block=n_pow2, num_warps=num_warps, block_r=block_r, sum64=_sum64(precise, True),
                     **pieces)

    if num_chunks is None:
        # Enough rows keep every SM busy with whole rows; otherwise rows are split.
        online = n_rows >= 2 * sms or unaligned
    else:
        online = int(num_chunks) <= 1
    # The fast float32 path streams with per-lane statistics (_span_stats_lanes); the
    # precise path cannot (its exponential is not the fast one); 16-bit inputs were level
    # or slower with them on the H200 (BENCHMARKS.md, fifth session).
    fast32 = dtype == torch.float32 and not precise
    lanes = bool(_tuned("lane_stats", fast32)) and not precise
    # Measured on an H200: wide blocks for the one-program-per-row sweep, narrower chunks
    # (more programs) for split rows.
    default_stream = ONLINE_BLOCK if online else STREAM_BLOCK
    stream = min(block, TUNING["stream_block"] or default_stream) if block_size is None else block
    stream = min(stream, n_pow2)
    warps = 16 if stream >= 8192 else 8 if stream >= 2048 else 4
    if lanes and stream >= 2048:
        # Lanes hold two float32 statistics per block element: 8 elements a thread keeps them
        # in ~45 registers (8192 at 32 warps, 4096 at 16), where 16 a thread needed ~78.
        warps *= 2
    num_warps = TUNING["stream_warps"] or warps
    n_blocks = triton.cdiv(n_cols, stream)
    if num_chunks is None:
        # Split rows into enough programs for ~16 a SM: with few, the SMs' shares of programs
        # differ by one, a large fraction (N = 1M, 64 rows, 9 chunks: 4.4 programs a SM, so 5
        # on some; the precise float32 path ran at 44% of copy bandwidth there, 50% with 32).
        num_chunks = 1 if online else min(n_blocks, triton.cdiv(16 * sms, n_rows))
    num_chunks = max(1, min(int(num_chunks), n_blocks))

    if num_chunks == 1:
        # Enough programs to cover the GPU twice (one SM's programs hide each other's
        # latency) when their rows fit in the L2, else once; few enough that the rows in
        # flight fit in half the L2.  16-bit rows of 65536: 195 -> 264 programs, 72% -> 75%.
        row_bytes = n_cols * torch.finfo(dtype).bits // 8
        floor = 2 * sms if 2 * sms * row_bytes <= l2_bytes else sms
        programs = TUNING["online_programs_per_sm"] and TUNING["online_programs_per_sm"] * sms
        programs = programs or min(4 * sms, max(floor, l2_bytes // (2 * row_bytes)))
        return _Plan("online", block=stream, num_warps=num_warps, programs=max(1, min(n_rows, programs)),
                     lanes=lanes, keep_p=precise and bool(_tuned("keep_p", True)), sum64=_sum64(precise, False))

    chunk = triton.cdiv(n_blocks, num_chunks) * stream
    return _Plan("split", block=stream, num_warps=num_warps, chunk=chunk, num_chunks=triton.cdiv(n_cols, chunk),
                 lanes=lanes, sum64=_sum64(precise, False))


_PLANS: dict = {}


def _cached_plan(plan_args: tuple) -> _Plan:
    """``_plan(*plan_args)``, computed once per arguments and TUNING state (a launch plans on
    every call; the plan is a pure function of both)."""
    key = (plan_args, tuple(TUNING.values()))
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) > 4096:  # shapes seen by a long-running process: start over
            _PLANS.clear()
        plan = _PLANS[key] = _plan(*plan_args)
    return plan


def schedule_for(n_rows: int, n_cols: int, dtype: torch.dtype, device: torch.device | str | None = None, *,
                 block_size: int | None = None, num_chunks: int | None = None, precise: bool = True,
                 sms: int | None = None, interpreted: bool | None = None) -> str:
    """The schedule :func:`softmax` takes for ``n_rows`` rows of ``n_cols``: one of ``SCHEDULES``.

    ``"rows"`` single pass, ``"online"`` one program per row, ``"split"`` split rows in two
    kernels, ``"spans"`` cooperative split rows streamed through the L2 (where SPANS_LONG
    applies, or forced by ``TUNING["spans"]``), ``"cooperative"`` cooperative split rows (on a GPU by default for float32 rows of
    16384..1M on the precise path (of 8193..16383 only under ``TUNING["row_pieces"] = False``)
    and 16385..1M on the fast one, and 16-bit rows of 65537..1M,
    where the rows fill the resident programs, see ``_wants_cooperative``, except 16-bit rows
    of up to 131072 that are many enough for ONLINE_16BIT's online launch, and longer 16-bit
    rows off 16-byte boundaries, 16 or more (split rows, ``unaligned_16bit_split``, or, half a SM
    or more whose SM's worth fits in the L2, online, ``unaligned_16bit_online``); never under the
    interpreter unless ``TUNING["cooperative"]`` is True).  The launch may still take split
    rows when the compiled kernel cannot hold a row's programs at once.  The arguments are
    those of :func:`softmax`; ``sms`` and ``interpreted`` replace what ``device`` and the
    environment would say (so the GPU decision can be checked anywhere).  Reads ``TUNING``.

    Raises:
        ValueError: a non power-of-two ``block_size``.
    """
    device = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    interpreted = interpreting() if interpreted is None else interpreted
    sms = num_sms(device) if sms is None else sms
    l2 = _l2_bytes(device) if device.type != "cuda" or torch.cuda.is_available() else 50 << 20
    return _plan(n_rows, n_cols, dtype, sms, interpreted, l2, block_size, num_chunks, precise).name


def _launch(x2: torch.Tensor, y2: torch.Tensor | None, lse: torch.Tensor | None,
            block_size: int | None, num_chunks: int | None, precise: bool = True) -> None:
    n_rows, n_cols = x2.shape
    precise = x2.dtype == torch.float32 and precise
    write_y = y2 is not None
    write_lse = lse is not None
    # Dummy pointers for outputs a launch does not write (never dereferenced).
    y_arg = y2 if write_y else x2
    lse_arg = lse if write_lse else x2
    stride_y = y2.stride(0) if write_y else 0
    interpreted = interpreting()
    plan_args = (n_rows, n_cols, x2.dtype, num_sms(x2.device), interpreted, _l2_bytes(x2.device),
                 block_size, num_chunks, precise)
    plan = _cached_plan(plan_args)
    if plan.name == "spans":
        if _launch_spans(plan, x2, y_arg, lse_arg, stride_y, precise, write_y, write_lse, interpreted):
            return
        plan = _plan(*plan_args, spans_ok=False)
    if plan.name == "cooperative":
        if _launch_cooperative(plan, x2, y_arg, lse_arg, stride_y, precise, write_y, write_lse, interpreted):
            return
        plan = _plan(*plan_args, cooperative_ok=False, spans_ok=False)
    flags = dict(PRECISE=_precise_arg(plan, precise), WRITE_Y=write_y, WRITE_LSE=write_lse, num_warps=plan.num_warps)
    # The streamed schedules read a row twice: ask the L2 to keep the first sweep's lines and
    # to drop the second sweep's reads and the output first.  Measured on the H200 (16:26 UTC,
    # N = 65536): 65% -> 77% of copy bandwidth for the fast float32 path, 70% -> 72% bf16; the
    # precise float32 path that computed its exponentials twice lost (54% -> 50%).  The one
    # that keeps them (keep_p: x read once, p kept for the second sweep) gains: 48.6% -> 54.0%
    # (2026-11-30 02:03 UTC).
    keep_p = plan.keep_p and write_y
    use_hints = _tuned("l2_hints", not precise or keep_p)
    hints = dict(KEEP="evict_last", DROP="evict_first") if use_hints else dict(KEEP="", DROP="")

    if plan.name == "rows" and plan.block_a:
        align = _row_alignment(x2, y2)
        # Triton proves a row's alignment only from a stride divisible by 16 (elements)
        unproven = x2.stride(0) % 16 or stride_y % 16
        if plan.block_b or (align > 1 and unproven):
            _softmax_row_pieces_kernel[(n_rows,)](
                x2, y_arg, lse_arg, n_cols, x2.stride(0), stride_y,
                BLOCK_A=plan.block_a, BLOCK_B=plan.block_b, ALIGN=align, **{**flags, "num_warps": plan.pieces_warps},
            )
            return
    if plan.name == "rows":
        grid = (triton.cdiv(n_rows, plan.block_r),)
        _softmax_rows_kernel[grid](
            x2, y_arg, lse_arg, n_rows, n_cols, x2.stride(0), stride_y,
            BLOCK_R=plan.block_r, BLOCK_N=plan.block, **flags,
        )
    elif plan.name == "pipelined":
        _softmax_rows_pipelined_kernel[(plan.programs,)](
            x2, y_arg, lse_arg, n_rows, n_cols, x2.stride(0), stride_y,
            BLOCK_N=plan.block, STAGES=plan.stages, **flags,
        )
    elif plan.name == "online":
        n_blocks = triton.cdiv(n_cols, plan.block)
        maxes = (torch.empty((plan.programs * n_blocks,), device=x2.device, dtype=torch.float32)
                 if keep_p else x2)
        cap = {"maxnreg": plan.maxnreg} if plan.maxnreg else {}
        align = 0 if keep_p else _align_elements(x2, y2)
        _softmax_online_kernel[(plan.programs,)](
            x2, y_arg, lse_arg, maxes, n_rows, n_cols, x2.stride(0), stride_y, n_blocks,
            BLOCK_N=plan.block, **flags, **hints, LANES=plan.lanes, KEEP_P=keep_p, ALIGN=align, **cap,
        )
    elif plan.name == "split":
        stats = torch.empty((n_rows * plan.num_chunks * 2,), device=x2.device, dtype=torch.float32)
        grid = (n_rows * plan.num_chunks,)
        align = _align_elements(x2, y2) if _tuned("split_align", True) else 0
        _softmax_partial_kernel[grid](
            x2, stats, n_cols, x2.stride(0), plan.chunk, plan.num_chunks,
            BLOCK_N=plan.block, PRECISE=flags["PRECISE"], num_warps=plan.num_warps, KEEP=hints["KEEP"],
            LANES=plan.lanes, ALIGN=align,
        )
        _softmax_finish_kernel[grid](
            x2, y_arg, lse_arg, stats, n_cols, x2.stride(0), stride_y, plan.chunk, plan.num_chunks,
            BLOCK_N=plan.block, BLOCK_C=max(2, triton.next_power_of_2(plan.num_chunks)), **flags,
            DROP=hints["DROP"], ALIGN=align,
        )


def _align_elements(x2: torch.Tensor, y2: torch.Tensor | None) -> int:
    """ALIGN for the online kernel (``_online_row_aligned``): the elements in 16 bytes for
    16-bit rows whose stride is not a multiple of them (the rows start off 16-byte
    boundaries), where both base pointers are 16-byte aligned and Y's row stride has X's
    remainder (each output row then splits where its input row does); else 0, the plain
    loop (whose loads Triton aligns by itself where the stride allows).  ``TUNING["align_rows"]``
    False turns it off."""
    if x2.element_size() != 2 or _tuned("align_rows", True) is False:
        return 0
    per16 = _row_alignment(x2, y2)
    return per16 if per16 > 1 and x2.stride(0) % per16 else 0


def cooperative_constexprs(plan: _Plan, precise: bool, write_y: bool, write_lse: bool) -> dict:
    """The compile-time arguments (and ``num_warps``) of ``_softmax_cooperative_kernel`` for
    ``plan``; ``precise`` as the launch passes it (float32 only)."""
    return dict(CHUNK=plan.block, BLOCK_S=max(32 * plan.num_warps, triton.next_power_of_2(plan.num_chunks)),
                COOP=plan.num_chunks > 1 and _tuned("coop_exchange", True),  # False: a benchmark's bound
                LAG=plan.lag, HOLD_X=plan.hold_x, EARLY_POLL=plan.early_poll,
                PRECISE=_precise_arg(plan, precise), WRITE_Y=write_y, WRITE_LSE=write_lse, num_warps=plan.num_warps,
                COUNT_SPINS=_POLL_COUNTS is not None,  # a diagnostic: counting_cooperative_polls
                ALIGN=0)  # the launch sets it from its tensors (_coop_align_elements)


def _coop_align_elements(plan: _Plan, x2: torch.Tensor, y2: torch.Tensor | None) -> int:
    """ALIGN for the cooperative kernel (its windows from the 16-byte boundary at or before
    each row's start): as ``_align_elements`` for 16-bit rows off 16-byte boundaries, where
    the chunks reach ALIGN - 1 elements past the row; else 0.  Off unless
    ``TUNING["coop_align"]`` is True: its 16-byte loads (24 a chunk against 256 2-byte ones) came
    out slower, bf16 and fp16 rows of 262145 at 25.5% of copy (0.54x torch.softmax) against
    35.2% (0.75x) for the default launch (H100, 2026-12-07; the aligned launch spills 88 bytes
    a thread past 262144 on sm_90)."""
    if _tuned("coop_align", False) is not True:
        return 0
    align = _align_elements(x2, y2)
    return align if align and plan.num_chunks * plan.block >= x2.shape[1] + align - 1 else 0


_UNUSED_SLOTS: dict = {}  # per device: the slots argument of launches with one chunk a row


def _unused_slots(device: torch.device) -> torch.Tensor:
    """One int64 slot, never touched: the SLOTS argument of a launch with no exchange, or of a
    compile that only asks for the registers."""
    slots = _UNUSED_SLOTS.get(device)
    if slots is None:
        slots = _UNUSED_SLOTS[device] = torch.full((1,), _COOP_EMPTY, device=device, dtype=torch.int64)
    return slots


def _launch_cooperative(plan: _Plan, x2: torch.Tensor, y_arg: torch.Tensor, lse_arg: torch.Tensor, stride_y: int,
                        precise: bool, write_y: bool, write_lse: bool, interpreted: bool) -> bool:
    """Launch the cooperative kernel for ``plan``; False (nothing launched) where the compiled
    kernel cannot hold a row's programs on the GPU at once (a row would wait on partners that
    are not resident: each poll would time out and rebuild them)."""
    n_rows, n_cols = x2.shape
    coop = plan.num_chunks > 1
    # A fresh slot per (row, chunk) every launch, all "unpublished": nothing is reused, so
    # no reset can race with a late reader (and CUDA graphs replay the fill too).  With one
    # chunk a row there is no exchange and the slots are never touched: no fill to launch.
    if coop:
        slots = torch.full((n_rows * plan.num_chunks,), _COOP_EMPTY, device=x2.device, dtype=torch.int64)
    else:
        slots = _unused_slots(x2.device)
    if _POLL_COUNTS is not None and coop:
        # Two counters after the slots (see _cooperative_row_stats); the caller reads them.
        slots = torch.cat([slots, slots.new_zeros(2)])
        _POLL_COUNTS.append(slots[-2:])
    args = (x2, y_arg, lse_arg, slots, n_rows, n_cols, x2.stride(0), stride_y, plan.num_chunks,
            _INTERPRETER_SPINS if interpreted else COOP_SPIN_LIMIT)
    consts = cooperative_constexprs(plan, precise, write_y, write_lse)
    consts["ALIGN"] = _coop_align_elements(plan, x2, y_arg if write_y else None)
    groups = plan.groups
    if coop and not interpreted:
        # Partners must be resident together: no more groups than the SMs hold at once.
        fit = _resident_per_sm(x2.device, args, consts)
        if fit:
            sms = num_sms(x2.device)
            if fit * sms < plan.num_chunks:
                return False
            groups = max(1, min(groups, fit * sms // plan.num_chunks))
    _softmax_cooperative_kernel[(groups * plan.num_chunks,)](*args, **consts)
    return True


def spans_constexprs(plan: _Plan, n_cols: int, precise: bool, write_y: bool, write_lse: bool) -> dict:
    """The compile-time arguments (and ``num_warps``) of ``_softmax_spans_kernel`` for
    ``plan``; ``precise`` as the launch passes it (float32 only)."""
    keep_p = plan.keep_p and write_y
    # The second read of every element should find the L2: keep the first sweep's lines (the
    # input, or the kept exponentials) and drop the second's and the output.
    return dict(BLOCK_N=plan.block, BLOCK_S=max(32 * plan.num_warps, triton.next_power_of_2(plan.num_chunks)),
                HI_ALIGN=math.gcd(n_cols, 16), PRECISE=precise, WRITE_Y=write_y, WRITE_LSE=write_lse,
                KEEP_P=keep_p, LANES=plan.lanes, LAG=plan.lag, KEEP="evict_last",
                DROP="evict_first", num_warps=plan.num_warps, COUNT_SPINS=_POLL_COUNTS is not None)


def _launch_spans(plan: _Plan, x2: torch.Tensor, y_arg: torch.Tensor, lse_arg: torch.Tensor, stride_y: int,
                  precise: bool, write_y: bool, write_lse: bool, interpreted: bool) -> bool:
    """Launch the spans kernel for ``plan``, re-split over the programs the compiled kernel lets
    the SMs hold at once; False (nothing launched) where a row's spans cannot all be resident."""
    n_rows, n_cols = x2.shape
    consts = spans_constexprs(plan, n_cols, precise, write_y, write_lse)
    if not interpreted:
        # compiled with arguments of the launch's types (SLOTS int64, MAXES float32 where kept)
        args = (x2, y_arg, lse_arg, _unused_slots(x2.device), x2, n_rows, n_cols, x2.stride(0), stride_y,
                plan.num_chunks, plan.chunk, COOP_SPIN_LIMIT)
        fit = _resident_per_sm(x2.device, args, consts, _softmax_spans_kernel)
        if fit:
            # fewer programs: fewer, longer spans, so BLOCK_S (sized for the plan's) still holds them
            plan = _spans_plan(n_rows, n_cols, x2.dtype, num_sms(x2.device), precise, per_sm=fit)
            if plan is None:
                return False
    slots = torch.full((n_rows * plan.num_chunks,), _COOP_EMPTY, device=x2.device, dtype=torch.int64)
    if _POLL_COUNTS is not None:
        slots = torch.cat([slots, slots.new_zeros(2)])
        _POLL_COUNTS.append(slots[-2:])
    maxes = x2
    if consts["KEEP_P"]:
        n_blocks = plan.chunk // plan.block
        maxes = torch.empty((plan.groups * plan.num_chunks * 2 * n_blocks,), device=x2.device, dtype=torch.float32)
    _softmax_spans_kernel[(plan.groups * plan.num_chunks,)](
        x2, y_arg, lse_arg, slots, maxes, n_rows, n_cols, x2.stride(0), stride_y, plan.num_chunks, plan.chunk,
        _INTERPRETER_SPINS if interpreted else COOP_SPIN_LIMIT, **consts)
    return True


_POLL_COUNTS: list | None = None


@contextlib.contextmanager
def counting_cooperative_polls() -> Iterator[list]:
    """Within the block, cooperative launches count their programs' polls: each launch with
    several chunks a row appends a device tensor ``[extra polls, (row, program) pairs that
    polled again]`` to the yielded list (a diagnostic for benchmarks: the first poll of a row
    finding every partner published costs nothing extra).  The kernel compiled this way differs
    from the default one by the two atomics a row."""
    global _POLL_COUNTS
    saved, _POLL_COUNTS = _POLL_COUNTS, []
    try:
        yield _POLL_COUNTS
    finally:
        _POLL_COUNTS = saved


@contextlib.contextmanager
def recording_cooperative_grids(grids: list) -> Iterator[list]:
    """Within the block, append the grid of every launch of the cooperative kernel and of the
    spans kernel to ``grids`` (the launch decides the grid from the compiled kernel's
    registers, so this is how a caller sees how many programs ran)."""
    global _softmax_cooperative_kernel, _softmax_spans_kernel
    kernels = _softmax_cooperative_kernel, _softmax_spans_kernel

    class Recorder:
        def __init__(self, kernel):
            self.kernel = kernel
            self.__name__ = kernel.__name__

        def __getitem__(self, grid):
            grids.append(grid)
            return self.kernel[grid]

        def warmup(self, *args, **kwargs):  # compiles without launching (_resident_per_sm)
            return self.kernel.warmup(*args, **kwargs)

    _softmax_cooperative_kernel, _softmax_spans_kernel = (Recorder(k) for k in kernels)
    try:
        yield grids
    finally:
        _softmax_cooperative_kernel, _softmax_spans_kernel = kernels


_RESIDENT_PER_SM: dict = {}


def _resident_per_sm(device: torch.device, args: tuple, consts: dict, kernel=None) -> int | None:
    """How many programs of the cooperative kernel (or ``kernel``) compiled for ``consts`` one
    SM holds at once (by registers, threads and shared memory), or None where Triton does not
    say.

    Cached per device and compilation; the first call compiles (``warmup``) and loads the
    kernel to read its register count.
    """
    kernel = _softmax_cooperative_kernel if kernel is None else kernel
    key = (device, kernel.__name__, tuple(sorted(consts.items())), args[0].dtype, args[1].dtype)
    if key not in _RESIDENT_PER_SM:
        fit = None
        try:
            kernel = kernel.warmup(*args, grid=(1,), **consts)
            kernel._init_handles()  # loads the binary: sets n_regs
            n_regs, shared, warps = kernel.n_regs, kernel.metadata.shared, kernel.metadata.num_warps
        except (AttributeError, TypeError):
            n_regs = None
        if n_regs:
            props = device_properties(device)
            fit = programs_per_sm(n_regs, warps, shared,
                                  regs=getattr(props, "regs_per_multiprocessor", 65536),
                                  threads=getattr(props, "max_threads_per_multi_processor", 2048),
                                  shared_per_sm=getattr(props, "shared_memory_per_multiprocessor", 233472))
        _RESIDENT_PER_SM[key] = fit
    return _RESIDENT_PER_SM[key]


def programs_per_sm(n_regs: int, warps: int, shared: int, *, regs: int = 65536, threads: int = 2048,
                    shared_per_sm: int = 233472) -> int:
    """Programs of ``warps`` warps using ``n_regs`` registers a thread and ``shared`` bytes of
    shared memory that one SM holds at once (defaults: sm_90), at least 1 and at most 32.
    Registers are allocated per warp in units of 256 (8 a thread); each program also takes
    1 KiB of shared memory the driver reserves."""
    warp_regs = -(-n_regs * 32 // 256) * 256
    by_regs = regs // (warp_regs * warps)
    by_threads = threads // (32 * warps)
    by_shared = shared_per_sm // (shared + 1024)
    return max(1, min(by_regs, by_threads, by_shared, 32))


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    if x.dim() == 0:
        x = x.reshape(1)
    if x.stride(-1) != 1:
        x = x.contiguous()
    # A view whenever the leading dimensions collapse to one stride, else a copy.
    return x.reshape(-1, x.shape[-1])


def softmax(x: torch.Tensor, *, return_lse: bool = False, block_size: int | None = None,
            num_chunks: int | None = None, precise: bool = True) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Softmax along the last dimension: ``y[..., i] = exp(x[..., i]) / sum_j exp(x[..., j])``.

    Computed as ``exp(x - m) / l`` with the row maximum ``m`` and the sum ``l`` held in
    float32, whatever the input dtype.  The output has the input's shape, dtype and device
    (contiguous).  float32: the exponential is accurate to ~1 ulp (the rounding of ``x - m``
    included), the row sum is summed in float64 where one program holds the whole row (else
    compensated) and rounded once, and the division rounded to nearest (up to rare
    near-ties), so outputs are within ~2 ulp of the exact softmax of the given inputs (99.9%
    of entries; three roundings allow up to ~2.5 ulp, ~3.5 ulp was the worst seen over 4M
    entries).  Rows split over several programs (the split schedule) also round the
    rescale factor, a little more often past 2 ulp.  The online schedule (rows streamed
    by one program) and the cooperative one (float32 rows of 16384 on a GPU by
    default, see :func:`schedule_for`) carry their block weights and ``1 / l`` in float64:
    the single-pass accuracy or better (at most 2 ulp in the tests).
    16-bit outputs are the float32 result rounded once.
    ``precise=False`` (float32 only) uses the hardware ``exp2`` of ``(x - m) log2(e)``, a plain
    tree sum (streamed rows: per-lane running sums, merged once) and ``p * (1 / l)``: a few
    ulp, growing with ``|x - m|`` (the rounding of the argument), still within the suite's
    float32 tolerance; it is what makes float32 rows of
    16k elements bandwidth-bound on an H200 (BENCHMARKS.md).

    Special values: ``-inf`` entries give exactly 0; a row of only ``-inf`` gives all 0; a
    row holding NaN or ``+inf`` gives NaN in every entry; rows never affect one another.

    Args:
        x: float16, bfloat16 or float32 tensor of any shape, any strides; a CUDA tensor, or a
            CPU tensor under ``TRITON_INTERPRET=1``.
        return_lse: also return ``logsumexp`` over the last dimension: float32, shape
            ``x.shape[:-1]``, ``-inf`` for all ``-inf`` rows, NaN for rows with NaN or ``+inf``.
        block_size: power of two; rows longer than this are streamed in blocks of this width
            (the online schedule) instead of being held whole (default ``MAX_SINGLE_BLOCK``,
            ``MAX_SINGLE_BLOCK_16`` for 16-bit rows).
            Mainly for tests: a small value exercises the streaming paths on small inputs.
            Given (or ``num_chunks`` given), the cooperative schedule is not taken.
        num_chunks: for streamed rows, how many programs share one row (1: the online
            one-program-per-row schedule; >1: split rows).  Default: chosen from the row count,
            or the cooperative schedule (:func:`schedule_for`).
        precise: float32 only: the ~1 ulp path (default) or the fast one (see above).

    Returns:
        ``y``, or ``(y, lse)`` when ``return_lse``.

    Raises:
        TypeError: for dtypes other than float16, bfloat16, float32.
        ValueError: for CPU tensors without the interpreter, a non power-of-two
            ``block_size``, or a zero-length last dimension.
    """
    check_dtype("x", x)
    check_device(x)
    shape = x.shape
    if x.dim() > 0 and shape[-1] == 0:
        raise ValueError("softmax over an empty last dimension is undefined")
    # Rows already: no reshape or view (each torch call costs host time a launch waits on).
    rows = len(shape) == 2 and x.stride(1) == 1
    x2 = x if rows else _as_rows(x)
    y = torch.empty(shape, device=x.device, dtype=x.dtype)
    y2 = y if rows else y.view(-1, x2.shape[1])
    lse = torch.empty(shape[:-1], device=x.device, dtype=torch.float32) if return_lse else None
    if x2.shape[0] > 0:
        _launch(x2, y2, lse, block_size, num_chunks, precise)
    return (y, lse) if return_lse else y


def softmax_lse(x: torch.Tensor, *, block_size: int | None = None, num_chunks: int | None = None) -> torch.Tensor:
    """``logsumexp(x, dim=-1)`` in float32, shape ``x.shape[:-1]``, without writing the softmax.

    ``-inf`` for rows of only ``-inf``; NaN for rows holding NaN or ``+inf`` (this differs from
    ``torch.logsumexp``, which gives ``+inf`` for a row with ``+inf`` and no NaN).  Arguments,
    accuracy and errors as :func:`softmax`.
    """
    check_dtype("x", x)
    check_device(x)
    if x.dim() > 0 and x.shape[-1] == 0:
        raise ValueError("logsumexp over an empty last dimension is undefined")
    x2 = _as_rows(x)
    lse = torch.empty(x.shape[:-1], device=x.device, dtype=torch.float32)
    if x2.shape[0] > 0:
        _launch(x2, None, lse, block_size, num_chunks)
    return lse
