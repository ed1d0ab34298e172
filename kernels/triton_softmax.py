"""Softmax over the last dimension, as Triton kernels with float32 statistics.

Three schedules compute the same function:

* **single pass** -- a row (or a few short rows) fits in one block of registers:
  one read, one write.
* **online, one program per row** -- longer rows are streamed in blocks while a
  running maximum ``m`` and running sum ``l`` are kept; when the maximum grows,
  ``l`` is rescaled by ``exp(m_old - m_new)``.  A second sweep normalizes; it
  re-reads the row, mostly from L2: a persistent grid keeps only as many rows in
  flight as fit in half the L2.
* **split rows** -- when there are too few rows to fill the GPU, each row is cut
  into chunks: one kernel writes ``(m, l)`` per chunk, a second merges a row's
  chunk statistics and normalizes its chunk.

Special values follow one contract everywhere: ``-inf`` entries give exactly 0;
a row that is entirely ``-inf`` gives all zeros (LSE ``-inf``); a row holding a
NaN or ``+inf`` gives NaN throughout (LSE NaN); no row affects another.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.triton_support import (
    check_device,
    check_dtype,
    divide_rn,
    exp_diff,
    exp_diff_fast,
    interpreting,
    num_sms,
    safe_max,
    sum_compensated,
)

__all__ = ["softmax", "softmax_lse", "MAX_SINGLE_BLOCK"]

#: Rows up to this length are done in one pass from registers.
MAX_SINGLE_BLOCK = 16384
#: Block width of the split-row schedule, and of the online (one program per row) one.
STREAM_BLOCK = 4096
ONLINE_BLOCK = 8192
#: Launch overrides for benchmarks (bench/softmax.py --sweep); None keeps the heuristics.
TUNING: dict = {"rows_warps": None, "stream_warps": None, "stream_block": None,
                "online_programs_per_sm": None}


def _l2_bytes(device: torch.device) -> int:
    if device.type != "cuda":
        return 1 << 22
    return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20)


@triton.jit
def _exp(x, shift, PRECISE: tl.constexpr):
    # float32 outputs need the ~1 ulp exponential; 16-bit ones round far coarser.
    if PRECISE:
        r = exp_diff(x, shift)
    else:
        r = exp_diff_fast(x, shift)
    return r


@triton.jit
def _sum(p, axis: tl.constexpr, PRECISE: tl.constexpr):
    # The row sum scales every output: in float32 its error must stay near one rounding.
    if PRECISE:
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
def _span_stats(x_row, lo, hi, BLOCK_N: tl.constexpr, PRECISE: tl.constexpr):
    """(m, l) of x_row[lo:hi]: m the maximum, l = sum exp(x - safe_max(m))."""
    offs = tl.arange(0, BLOCK_N)
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], tl.float32)
    l_err = tl.zeros([], tl.float32)  # rounding error of the running sum (float32 path)
    x = tl.load(x_row + lo + offs, mask=lo + offs < hi, other=float("-inf"))
    for start in range(lo + BLOCK_N, hi + BLOCK_N, BLOCK_N):
        # Issue the next block's load before working on this one: two blocks in flight.
        cols = start + offs
        x_next = tl.load(x_row + cols, mask=cols < hi, other=float("-inf"))
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


@triton.jit
def _two_sum(a, b, err):
    s = a + b
    bv = s - a
    return s, err + ((a - (s - bv)) + (b - bv))


@triton.jit
def _span_normalize(x_row, y_row, lo, hi, shift, l, BLOCK_N: tl.constexpr, PRECISE: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    x = tl.load(x_row + lo + offs, mask=lo + offs < hi, other=float("-inf"))
    for start in range(lo, hi, BLOCK_N):
        cols = start + offs
        x_next = tl.load(x_row + BLOCK_N + cols, mask=BLOCK_N + cols < hi, other=float("-inf"))
        y = _divide(_exp(x.to(tl.float32), shift, PRECISE), l, PRECISE)
        tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=cols < hi)
        x = x_next


@triton.jit
def _softmax_online_kernel(
    X, Y, LSE, n_rows, n_cols, stride_xr, stride_yr,
    BLOCK_N: tl.constexpr, PRECISE: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr,
):
    # Persistent: a fixed number of programs walk the rows, so only that many rows are
    # in flight and the normalizing sweep finds its row still in L2.
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.zeros([], tl.int64) + row  # 64-bit offsets (row is a plain int when interpreted)
        x_row = X + row64 * stride_xr
        m, l = _span_stats(x_row, 0, n_cols, BLOCK_N, PRECISE)
        shift = safe_max(m)
        if WRITE_Y:
            _span_normalize(x_row, Y + row64 * stride_yr, 0, n_cols, shift, l, BLOCK_N, PRECISE)
        if WRITE_LSE:
            tl.store(LSE + row64, _lse(shift, l))


@triton.jit
def _softmax_partial_kernel(
    X, STATS, n_cols, stride_xr, chunk, n_chunks,
    BLOCK_N: tl.constexpr, PRECISE: tl.constexpr,
):
    pid = tl.program_id(0)
    row = pid // n_chunks
    lo = (pid % n_chunks) * chunk
    hi = tl.minimum(lo + chunk, n_cols)
    m, l = _span_stats(X + row.to(tl.int64) * stride_xr, lo, hi, BLOCK_N, PRECISE)
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
    PRECISE: tl.constexpr, WRITE_Y: tl.constexpr, WRITE_LSE: tl.constexpr,
):
    # Reverse order: the chunks the statistics kernel read last are the ones still in L2.
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    row = pid // n_chunks
    c = pid % n_chunks
    shift, l = _merge_stats(STATS, row, n_chunks, BLOCK_C, PRECISE)
    if WRITE_Y:
        lo = c * chunk
        hi = tl.minimum(lo + chunk, n_cols)
        row64 = row.to(tl.int64)
        _span_normalize(X + row64 * stride_xr, Y + row64 * stride_yr, lo, hi, shift, l, BLOCK_N, PRECISE)
    if WRITE_LSE:
        if c == 0:
            tl.store(LSE + row, _lse(shift, l))


def _rows_config(n_cols_pow2: int) -> tuple[int, int]:
    """(rows per program, num_warps) for the single-pass kernel."""
    block_r = max(1, min(16, 2048 // n_cols_pow2))
    elems = block_r * n_cols_pow2
    num_warps = 4 if elems <= 4096 else 8 if elems <= 8192 else 16
    return block_r, num_warps


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
    block = block_size if block_size is not None else MAX_SINGLE_BLOCK
    if block < 1 or block & (block - 1):
        raise ValueError(f"block_size must be a power of two, got {block}")
    n_pow2 = triton.next_power_of_2(n_cols)

    if n_pow2 <= block and num_chunks is None:
        block_r, num_warps = _rows_config(n_pow2)
        num_warps = TUNING["rows_warps"] or num_warps
        if interpreting():
            block_r = 1
        grid = (triton.cdiv(n_rows, block_r),)
        _softmax_rows_kernel[grid](
            x2, y_arg, lse_arg, n_rows, n_cols, x2.stride(0), stride_y,
            BLOCK_R=block_r, BLOCK_N=n_pow2, PRECISE=precise, WRITE_Y=write_y, WRITE_LSE=write_lse,
            num_warps=num_warps,
        )
        return

    sms = num_sms(x2.device)
    if num_chunks is None:
        # Enough rows keep every SM busy with whole rows; otherwise rows are split.
        online = n_rows >= 2 * sms
    else:
        online = int(num_chunks) <= 1
    # Measured on an H200: wide blocks for the one-program-per-row sweep, narrower chunks
    # (more programs) for split rows.
    default_stream = ONLINE_BLOCK if online else STREAM_BLOCK
    stream = min(block, TUNING["stream_block"] or default_stream) if block_size is None else block
    stream = min(stream, n_pow2)
    num_warps = TUNING["stream_warps"] or (16 if stream >= 8192 else 8 if stream >= 2048 else 4)
    n_blocks = triton.cdiv(n_cols, stream)
    if num_chunks is None:
        num_chunks = 1 if online else min(n_blocks, triton.cdiv(4 * sms, n_rows))
    num_chunks = max(1, min(int(num_chunks), n_blocks))

    if num_chunks == 1:
        # Enough programs to cover the GPU, few enough that their rows fit in half the L2.
        row_bytes = n_cols * x2.element_size()
        programs = TUNING["online_programs_per_sm"] and TUNING["online_programs_per_sm"] * sms
        programs = programs or min(4 * sms, max(sms, _l2_bytes(x2.device) // (2 * row_bytes)))
        _softmax_online_kernel[(max(1, min(n_rows, programs)),)](
            x2, y_arg, lse_arg, n_rows, n_cols, x2.stride(0), stride_y,
            BLOCK_N=stream, PRECISE=precise, WRITE_Y=write_y, WRITE_LSE=write_lse, num_warps=num_warps,
        )
        return

    chunk = triton.cdiv(n_blocks, num_chunks) * stream
    num_chunks = triton.cdiv(n_cols, chunk)
    stats = torch.empty((n_rows * num_chunks * 2,), device=x2.device, dtype=torch.float32)
    grid = (n_rows * num_chunks,)
    _softmax_partial_kernel[grid](
        x2, stats, n_cols, x2.stride(0), chunk, num_chunks,
        BLOCK_N=stream, PRECISE=precise, num_warps=num_warps,
    )
    _softmax_finish_kernel[grid](
        x2, y_arg, lse_arg, stats, n_cols, x2.stride(0), stride_y, chunk, num_chunks,
        BLOCK_N=stream, BLOCK_C=max(2, triton.next_power_of_2(num_chunks)),
        PRECISE=precise, WRITE_Y=write_y, WRITE_LSE=write_lse, num_warps=num_warps,
    )


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
    included), the row sum is compensated and the division rounded to nearest (up to rare
    near-ties), so outputs are within ~2 ulp of the exact softmax of the given inputs (99.9%
    of entries; three roundings allow up to ~2.5 ulp, ~3.5 ulp was the worst seen over 4M
    entries).  Streamed rows (longer than ``block_size``) also round the rescale factor,
    a little more often past 2 ulp.
    16-bit outputs are the float32 result rounded once.
    ``precise=False`` (float32 only) uses the hardware ``exp2`` of ``(x - m) log2(e)``, a plain
    tree sum and ``p * (1 / l)``: a few ulp, growing with ``|x - m|`` (the rounding of the
    argument), still within the suite's float32 tolerance; it is what makes float32 rows of
    16k elements bandwidth-bound on an H200 (BENCHMARKS.md).

    Special values: ``-inf`` entries give exactly 0; a row of only ``-inf`` gives all 0; a
    row holding NaN or ``+inf`` gives NaN in every entry; rows never affect one another.

    Args:
        x: float16, bfloat16 or float32 tensor of any shape, any strides; a CUDA tensor, or a
            CPU tensor under ``TRITON_INTERPRET=1``.
        return_lse: also return ``logsumexp`` over the last dimension: float32, shape
            ``x.shape[:-1]``, ``-inf`` for all ``-inf`` rows, NaN for rows with NaN or ``+inf``.
        block_size: power of two; rows longer than this are streamed in blocks of this width
            (the online schedule) instead of being held whole (default ``MAX_SINGLE_BLOCK``).
            Mainly for tests: a small value exercises the streaming paths on small inputs.
        num_chunks: for streamed rows, how many programs share one row (1: the online
            one-program-per-row schedule; >1: split rows).  Default: chosen from the row count.
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
    if x.dim() > 0 and x.shape[-1] == 0:
        raise ValueError("softmax over an empty last dimension is undefined")
    x2 = _as_rows(x)
    y = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    lse = torch.empty(x.shape[:-1], device=x.device, dtype=torch.float32) if return_lse else None
    if x2.shape[0] > 0:
        _launch(x2, y.view(-1, x2.shape[1]), lse, block_size, num_chunks, precise)
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
