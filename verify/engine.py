"""Check one input against one target: call it safely, ask the oracle, apply policy and contract.

Data flows one way: case -> (target output, oracle truth) -> metrics and tolerance
-> ``Evaluation`` (violations + measured errors).  Nothing here draws inputs or
writes reports.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from kernels import reference
from kernels.registry import Target
from verify import contracts, metrics, oracle, tolerance, truth_chunks
from verify.capabilities import Capabilities
from verify.contracts import Evaluation, Violation
from verify.dtypes import get_format

DEFAULT_TIMEOUT_S = 120.0


class TargetHang(Exception):
    """The target did not return within the timeout; its thread cannot be stopped."""


class DeviceContextLost(BaseException):
    """The target left the CUDA context unusable (a sticky error such as a misaligned address).

    Every later CUDA call in this process fails, so the input in flight is the only
    evidence: it must be saved as it is, without shrinking (shrinking would only replay
    inputs that "fail" because the context is dead).  A BaseException, so Hypothesis
    stops at once instead of shrinking; ``case`` is filled in by the search.
    """

    def __init__(self, violation: Violation) -> None:
        super().__init__(violation.message)
        self.violation = violation
        self.case: Any = None


#: The check's masked-row policies: ``contracts.MASKED_ROW_POLICIES``, and "declared" (the default):
#: what the target declares (``Capabilities.masked_rows``), "either" where it declares nothing.
MASKED_ROWS_OPTIONS = ("declared",) + contracts.MASKED_ROW_POLICIES


def masked_rows_for(target: Target, masked_rows: str) -> str:
    """What a fully masked row must give in a check of ``target``: what the target declares for
    "declared", else ``masked_rows`` ("either" loosens a declared "zero" or "nan")."""
    if masked_rows not in MASKED_ROWS_OPTIONS:
        raise ValueError(f"masked_rows must be one of {MASKED_ROWS_OPTIONS}, not {masked_rows!r}")
    return target.caps.masked_rows if masked_rows == "declared" else masked_rows


def _uses_cuda(values) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_cuda for t in values)


def _wait_for_device() -> None:
    torch.cuda.synchronize()


def device_context_alive() -> bool:
    """True when a trivial CUDA operation still succeeds (sticky errors make every call fail)."""
    try:
        _wait_for_device()
        torch.ones(1, device="cuda").add_(1).item()
    except Exception:  # any failure here means the context cannot be trusted
        return False
    return True


@dataclass
class CaseOutcome:
    evaluation: Evaluation
    seconds: float  # target call only
    oracle_seconds: float
    naive_abs_max: float  # flash-attention's yardstick: same-dtype naive implementation's max abs error
    fallback_rows: int
    output: torch.Tensor | None = None
    naive_atol: float = 0.0  # flash-attention's fwd_atol beside it (flash_rule_atol)
    #: wall seconds of the checks that call the target again (output reuse, unwritten memory,
    #: stream order, update in place, causal flag flipped), compiles of a new variant included
    second_call_seconds: float = 0.0

    @property
    def flash_rule_ratio(self) -> float:
        """max|target - exact| / (max|naive same-dtype - exact| + fwd_atol / 2): flash-attention
        (FA3's tests) passes a kernel at <= 2, i.e. error <= 2 * naive error + fwd_atol.  Without
        the atol a naive error of 0 (one key, D = 1) made any error a ratio of 1e12."""
        floor = self.naive_abs_max + self.naive_atol / 2
        if floor == 0:
            return 0.0 if self.evaluation.abs_max == 0 else float("inf")
        return self.evaluation.abs_max / floor


def call_target(fn, args: tuple, kwargs: dict[str, Any], timeout: float) -> tuple[Any, Violation | None, float]:
    """Run ``fn(*args, **kwargs)`` with a timeout; an exception or a hang becomes a Violation."""
    box: dict[str, Any] = {}
    # Kernel errors are reported asynchronously: wait for the target's work inside the call,
    # so an error is charged to the input that caused it, not to a later one.
    on_cuda = _uses_cuda((*args, *kwargs.values()))

    def run() -> None:
        t0 = time.perf_counter()
        try:
            out = fn(*args, **kwargs)
            if on_cuda or (isinstance(out, torch.Tensor) and out.is_cuda):
                _wait_for_device()
            box["out"] = out
        except BaseException as e:  # any failure of the target is its contract violation
            box["error"] = e
            box["tb"] = traceback.format_exc(limit=4)
        box["seconds"] = time.perf_counter() - t0

    worker = threading.Thread(target=run, daemon=True, name="flashverify-target")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TargetHang(f"the target did not return within {timeout:g} s")
    if "error" in box:
        e = box["error"]
        if on_cuda and not device_context_alive():
            first_line = (str(e).strip().splitlines() or [""])[0]
            raise DeviceContextLost(Violation(
                "device-error",
                f"the target raised {type(e).__name__}: {first_line}; the CUDA context is unusable afterwards, so "
                "this input is reported as found (not shrunk) and the rest of the cell was not searched"))
        return None, Violation("exception", f"the target raised {type(e).__name__}: {e}"), box["seconds"]
    return box["out"], None, box["seconds"]


def call_split(target: Target, args: tuple, kwargs: dict[str, Any], timeout: float, out_shape: torch.Size,
               device: torch.device) -> tuple[Any, torch.Tensor | None, Violation | None, float]:
    """``call_target`` on ``target.fn``, its result split into (output, LSE) when the target
    declares ``returns_lse`` (LSE None otherwise, or when the call or the split failed)."""
    result, v, secs = call_target(target.fn, args, kwargs, timeout)
    if v is not None or not target.caps.returns_lse:
        return result, None, v, secs
    out, lse, v = contracts.split_lse(result, out_shape, device)
    return out, (None if v is not None else lse), v, secs


def output_only(target: Target) -> Callable[..., Any]:
    """``target.fn`` returning its output alone (the second calls of the reuse, unwritten-memory
    and stream checks look at the output only)."""
    if not target.caps.returns_lse:
        return target.fn

    def first(*args: Any, **kwargs: Any) -> Any:
        result = target.fn(*args, **kwargs)
        return result[0] if isinstance(result, (tuple, list)) and len(result) == 2 else result

    return first


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """The whole storage under ``t`` as uint8 (a view's gaps and offset included)."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


class StorageSnapshot:
    """The bytes of tensors' whole storages (a strided view's gaps and offset included), to
    tell after a call which of them changed."""

    def __init__(self, tensors: dict[str, torch.Tensor | None]) -> None:
        self._saved = {name: (t, _storage_bytes(t).clone()) for name, t in tensors.items()
                       if isinstance(t, torch.Tensor)}

    def changed(self) -> list[str]:
        """``"name (n of m bytes of its storage)"`` for each tensor whose bytes changed."""
        found = []
        for name, (t, before) in self._saved.items():
            after = _storage_bytes(t)
            if after.numel() != before.numel() or not torch.equal(after, before):
                n = int((after != before).sum()) if after.numel() == before.numel() else after.numel()
                found.append(f"{name} ({n} of {before.numel()} bytes of its storage)")
        return found


def inputs_modified(snapshot: StorageSnapshot) -> Violation | None:
    """An ``input-modified`` violation naming the inputs (snapshotted before the call) whose
    bytes changed, or None.

    A kernel that works in place on its input (``x.float()`` is ``x`` itself for float32
    input, so ``sub_`` / ``exp_`` on it clobber the caller's tensor), or writes past its output
    into an input, gives correct numbers and a corrupted caller.  The whole storage is
    compared, so writes into the gaps of a strided view count too.
    """
    changed = snapshot.changed()
    if not changed:
        return None
    return Violation("input-modified", "the target wrote to its input " + ", ".join(changed)
                     + ": a kernel must leave its inputs as they were (work on a copy, or write only the output)")


#: The output-reuse check (``output_survives_next_call``) runs when the inputs hold at most
#: this many elements in all: it costs one more target call, and a kernel that hands out a
#: reused buffer does so at every size, so the small cases every search begins with find it.
#: (At 65,536, in the main job's interpreted Triton cells the second calls took about as long
#: as the first, 2026-11-30: triton-attention float16 spent 4.7 of its 10.3 s outside its
#: counted target calls and oracle, triton-softmax float32 16.9 of 32.7 s.)
OUTPUT_REUSE_MAX_ELEMENTS = 4096
#: ...and at any size where the check asks for them (``call_checks_at_any_size``: the search's
#: probe cases) and the first call took at most this long.  A memory pool for large outputs
#: only (a buffer per shape reused past 32768 elements) passed every small case, and every
#: large one had no second call (fourth red team, 2026-12-05).
ANY_SIZE_CALL_CHECK_S = 1.0


def _ramp(like: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor of ``like``'s shape, dtype and device holding 0, 0.5, 1, 1.5, 2, 0, ...
    in memory order: exact in every float dtype, and its softmax and attention differ from
    those of constant rows."""
    flat = torch.arange(like.numel(), device=like.device) % 5 * 0.5
    return flat.to(like.dtype).reshape(like.shape)


def output_survives_next_call(fn, out: torch.Tensor, decoy_args: tuple, decoy_kwargs: dict[str, Any],
                              timeout: float) -> tuple[Violation | None, Any]:
    """Call ``fn`` again on other inputs of the same shapes and dtypes: an ``output-overwritten``
    violation if that changes the bytes of ``out``, the first call's result; and that second
    call's output, for ``decoy_is_answered``.

    A target that returns one buffer it keeps (a cached or preallocated output, the static
    output of a captured CUDA graph) gives right numbers at every call, and a caller that
    holds two results finds the first one silently replaced.  A failure of the second call
    is not this check's business (the search meets that input on its own), so it is ignored.
    """
    snapshot = StorageSnapshot({"output": out})
    try:
        decoy_out, viol, _ = call_target(fn, decoy_args, decoy_kwargs, timeout)
    except (TargetHang, DeviceContextLost):
        return None, None
    if viol is not None:
        decoy_out = None
    if not snapshot.changed():
        return None, decoy_out
    return Violation("output-overwritten",
                     "a second call, on other inputs of the same shapes, overwrote the output this call returned: "
                     "the target hands out a buffer it reuses (a cached or static output); return a fresh tensor "
                     "(clone the buffer) so that results the caller holds stay as they were"), decoy_out


#: How far (absolute) a second call's output may be from its inputs' answer before
#: ``decoy_is_answered`` calls it stale: this, or DECOY_ROUNDOFFS units of the output format's
#: roundoff where that is more (float8).  The decoys' answers lie in [0, 2] (softmax
#: probabilities; means of V rows of 0, 0.5, 1, 1.5, 2), where a bfloat16 result is off
#: by 0.008 at most and another input's result is off by far more.
DECOY_ERROR_LIMIT = 0.1
DECOY_ROUNDOFFS = 16


#: The second calls ``decoy_is_answered`` judges: "decoy" (other tensors, same arguments),
#: "in-place" (the first call's tensors overwritten in place), "causal-flipped" (the decoy
#: tensors again with the other causal flag).
DECOY_CALLS = ("decoy", "in-place", "causal-flipped")


def decoy_is_answered(decoy_out: Any, first_out: torch.Tensor, truth: torch.Tensor,
                      live_rows: torch.Tensor | None = None, call: str = "decoy") -> Violation | None:
    """A ``stale-input`` violation if the output of a second call (``call``, one of DECOY_CALLS)
    on inputs with a known answer is not that answer: more than ``DECOY_ERROR_LIMIT`` (float8:
    ``DECOY_ROUNDOFFS`` roundoffs) from ``truth`` somewhere in a row that ``live_rows`` marks as
    having something visible (None: every row).  Judged only after the first call's output
    passed; ``first_out`` is the earlier result a stale answer would repeat.

    A kernel that keeps the first call's buffers or addresses under a key of shapes (a program
    cache patched on a miss but not on a hit) reads the first call's inputs on the second:
    tt-metal PR #45137 and the SDPA bug it cites, caught late because the allocator "typically
    reuses the same slot" for a new tensor, so the stale address held the right data.  Here the
    first call's inputs are still alive, so a stale read returns the first call's result.
    """
    if call not in DECOY_CALLS:
        raise ValueError(f"call must be one of {DECOY_CALLS}, not {call!r}")
    if not isinstance(decoy_out, torch.Tensor) or decoy_out.shape != truth.shape:
        return None
    got = decoy_out.detach().to(torch.float64)
    want = truth.to(device=got.device, dtype=torch.float64)
    err = (got - want).abs().nan_to_num(nan=math.inf)
    if live_rows is not None:
        err = torch.where(live_rows.to(got.device)[..., None], err, torch.zeros_like(err))
    worst = float(err.max()) if err.numel() else 0.0
    if worst <= max(DECOY_ERROR_LIMIT, DECOY_ROUNDOFFS * get_format(decoy_out.dtype).unit_roundoff):
        return None
    at = tuple(int(i) for i in (err == worst).nonzero()[0])
    same = (first_out.shape == decoy_out.shape
            and bool(((decoy_out == first_out) | (torch.isnan(decoy_out) & torch.isnan(first_out))).all()))
    returned = f"returned {got[at].item()!r} at {at} where"
    if call == "in-place":
        why = ("bit for bit the first call's result" if same
               else "the first call's values or state leak into it")
        return Violation("stale-input",
                         f"called again on the same tensors after their values (and the mask's, where it has its own "
                         f"memory) were overwritten in place, the target {returned} their new answer is "
                         f"{want[at].item()!r}, {why}; a cache keyed on the tensors' addresses (data_ptr), shapes or "
                         "strides but not their contents does this: a KV cache or mask updated in place between calls "
                         "reads stale")
    if call == "causal-flipped":
        if same:
            return Violation("stale-input",
                             f"called again on the same tensors with the causal flag flipped, the target {returned} the "
                             f"answer for that flag is {want[at].item()!r}, bit for bit its result for the other flag: "
                             "a compiled specialization or a result cached under a key that leaves the causal flag "
                             "out does this (key it on every argument), and so does a path for some shapes that "
                             "ignores the flag (a decode shortcut for Nq = 1, say)")
        # Not the earlier result: a plain error for that flag (a cache may still be behind it)
        return Violation("accuracy",
                         f"on the second call's inputs (Q = K = 0, so every visible key weighs the same; V a ramp of "
                         f"0, 0.5, 1, 1.5, 2) with the causal flag flipped, the target {returned} the mean of the "
                         f"visible V rows is {want[at].item()!r}: it is wrong for that flag here (or a cache keyed "
                         "without the flag answered)")
    why = ("bit for bit the first call's result: it computed on the first call's inputs"
           if same else "the first call's inputs or state leak into it, or the target is wrong on these inputs "
           "(built to have a known answer: a ramp of 0 to 2; for attention Q = K = 0, so every visible key weighs "
           "the same) in a way the first call's did not show (a misread head, mask or key does this too)")
    return Violation("stale-input",
                     f"a second call on other tensors of the same shapes (the first call's still alive) {returned} "
                     f"their answer is {want[at].item()!r}, {why}; a cache keyed by "
                     "shape that keeps the first call's buffers or addresses does this: key it on the tensors, or "
                     "patch the addresses at every call")


def _overlaps_itself(t: torch.Tensor) -> bool:
    """Whether some elements of ``t`` share memory (``contracts.shared_elements``)."""
    return contracts.shared_elements(t) is not None


def answer_after_update_in_place(fn, args: tuple[torch.Tensor, ...], kwargs: dict[str, Any],
                                 updates: list[tuple[torch.Tensor, torch.Tensor]], timeout: float) -> Any:
    """Overwrite each tensor of ``updates`` (inputs among ``args`` and ``kwargs``) in place with
    its new value, call ``fn(*args, **kwargs)`` again, on the same tensors, and put their values
    back: that call's output (None where a tensor to update overlaps itself, a broadcast layout
    that cannot be written, or where the call failed).  For ``decoy_is_answered(...,
    call="in-place")``: a target that caches its result, or anything it derived from the
    inputs (a mask found to hide nothing), under their addresses answers the old values."""
    if any(_overlaps_itself(t) for t, _ in updates):
        return None
    saved = [t.clone() for t, _ in updates]
    try:
        for t, new in updates:
            t.copy_(new)
        out, viol, _ = call_target(fn, args, kwargs, timeout)
    except (TargetHang, DeviceContextLost):
        return None
    finally:
        for (t, _), old in zip(updates, saved):
            t.copy_(old)
    return None if viol is not None else out


def decoy_mask(mask: torch.Tensor) -> torch.Tensor:
    """Another mask of ``mask``'s shape for the in-place check: every entry flipped, but the
    first key kept visible (top-left causal keeps it too, so no row is left empty).  A mask
    that hid nothing now hides all keys but one, so a kernel that remembered "this mask hides
    nothing" under its address answers the mean of all V rows instead of the first's."""
    flipped = ~mask
    flipped[..., :1] = True
    return flipped


#: The stream-order check holds the side stream back this long, plus twice the first call's
#: time (the target's host work before its launch), capped at STREAM_HOLD_MAX_S.
STREAM_HOLD_S = 0.005
STREAM_HOLD_MAX_S = 0.2
_SLEEP_CYCLES_PER_S: dict[int, float] = {}


def _sleep_cycles_per_second(device: torch.device) -> float:
    """How many ``torch.cuda._sleep`` cycles make one second on ``device`` (measured once)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SLEEP_CYCLES_PER_S:
        with torch.cuda.device(index):
            torch.cuda._sleep(1000)  # first launch pays the module load
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(10_000_000)
            end.record()
            end.synchronize()
            _SLEEP_CYCLES_PER_S[index] = 10_000_000 / max(start.elapsed_time(end) / 1e3, 1e-6)
    return _SLEEP_CYCLES_PER_S[index]


def _poisoned_twin(t: torch.Tensor) -> torch.Tensor:
    """A tensor with ``t``'s shape, strides and storage offset over a fresh storage of all-ones
    bytes (NaN in every float dtype)."""
    raw = torch.full((t.untyped_storage().nbytes(),), 255, dtype=torch.uint8, device=t.device)
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(raw.untyped_storage(), t.storage_offset(),
                                                                t.shape, t.stride())


def stream_order_respected(fn, out: torch.Tensor, args: tuple, kwargs: dict[str, Any], call_seconds: float,
                           timeout: float) -> Violation | None:
    """Call ``fn`` again with the caller's current stream set to a side stream on which the
    inputs are still being written: a ``stream-order`` violation if that output is non-finite
    where the ordinary call's was finite.

    A kernel must run on ``torch.cuda.current_stream()``: the caller orders its work on that
    stream, and nothing else makes the inputs ready.  One launched on the default stream (or
    on a stream of its own) races the caller's writes; the engine's device-wide synchronize
    around every call hides that, so here each floating-point input is a twin over fresh
    storage poisoned with NaN, and the side stream sleeps, then copies the true bytes in,
    then calls the target.  Run on the side stream, the target sees the true inputs; run
    elsewhere, it reads the poison.  Only the target's stream is tested, not its arithmetic,
    so a failure of this second call is left to the search (it meets that input on its own).
    """
    device = next(t.device for t in args if isinstance(t, torch.Tensor) and t.is_cuda)
    hold = min(STREAM_HOLD_MAX_S, STREAM_HOLD_S + 2 * call_seconds)
    cycles = int(hold * _sleep_cycles_per_second(device))
    pairs = [(i, a, _poisoned_twin(a)) for i, a in enumerate(args)
             if isinstance(a, torch.Tensor) and a.is_cuda and a.is_floating_point()]
    raced = list(args)
    for i, _, twin in pairs:
        raced[i] = twin
    side = torch.cuda.Stream(device)
    _wait_for_device()  # the poison is in place before the side stream starts

    def on_side_stream() -> Any:
        # the current stream is per thread: set it in the thread that calls the target
        with torch.cuda.device(device), torch.cuda.stream(side):
            torch.cuda._sleep(cycles)
            for _, source, twin in pairs:
                _storage_bytes(twin).copy_(_storage_bytes(source))
            return fn(*raced, **kwargs)

    try:
        raced_out, viol, _ = call_target(on_side_stream, (), {}, timeout)
    except (TargetHang, DeviceContextLost):
        return None
    if viol is not None or not isinstance(raced_out, torch.Tensor) or raced_out.shape != out.shape:
        return None
    poisoned = ~torch.isfinite(raced_out) & torch.isfinite(out)
    n = int(poisoned.sum())
    if n == 0:
        return None
    return Violation("stream-order",
                     f"called with the current stream set to a side stream whose writes of the inputs were still "
                     f"pending, the target returned non-finite values at {n} of {out.numel()} elements where the "
                     "ordinary call's were finite: it reads its inputs outside the caller's current stream (a "
                     "launch on the default stream or a stream of its own); launch on torch.cuda.current_stream()")


#: The poisoned private pool a CUDA target allocates from in ``every_output_written``: blocks
#: of 1 MiB (two fill a small-pool segment of 2 MiB) and one large block of at least 20 MiB
#: (a large-pool segment), so that a small case's allocations, temporaries included, come
#: out of poisoned memory.
POISON_SMALL_BLOCKS = 4
POISON_LARGE_BYTES = 20 * 2**20
#: The byte the CUDA pool is filled with: finite and not 0 in every float format (float16
#: 1.0586, bfloat16 and float32 0.0115), so an element left as the pool gave it is told
#: apart from a 0 or a NaN written on purpose, the two answers a fully masked row may have.
POISON_BYTE = 0x3C


def _element_bytes_are(t: torch.Tensor, byte: int) -> torch.Tensor:
    """Boolean, ``t``'s shape: whether every byte of the element is ``byte``."""
    raw = t.contiguous().view(torch.uint8).reshape(*t.shape, t.element_size())
    return (raw == byte).all(-1)


def _poisoned_allocations(fn: Callable[..., Any], device: torch.device
                          ) -> tuple[Callable[..., Any], Callable[[torch.Tensor], torch.Tensor]] | None:
    """``fn`` wrapped so that every tensor it allocates while it runs starts poisoned rather
    than as whatever the allocator's memory held, and a test for the poison in its output.

    CPU: PyTorch's deterministic mode with ``fill_uninitialized_memory`` (NaN for floats),
    set for the call and restored after, its warnings about nondeterministic operations
    silenced; the poison is NaN.  CUDA: a private memory pool, fresh for the call and routed
    to from the calling thread only, first filled through blocks of ``POISON_BYTE`` and
    emptied, so the target's allocations are carved from poisoned memory; no global state
    changes (a compiled target does not recompile).  None on a torch without
    ``torch.cuda.MemPool``.  The pool dies with the wrapper and the last tensor allocated
    from it; the allocator hands its segments back on its own schedule, and the memory held
    this way stays bounded (66 MiB after 120 checks on the H200, torch 2.11, 2026-12-02).
    """
    if device.type == "cuda":
        try:
            with torch.cuda.device(device):
                pool = torch.cuda.MemPool()
        except (AttributeError, RuntimeError):  # a torch without MemPool, or an allocator that has none
            return None

        def on_poisoned_pool(*args: Any, **kwargs: Any) -> Any:
            with torch.cuda.device(device), torch.cuda.use_mem_pool(pool):
                blocks = [torch.empty(2**20, dtype=torch.uint8, device=device) for _ in range(POISON_SMALL_BLOCKS)]
                blocks.append(torch.empty(POISON_LARGE_BYTES, dtype=torch.uint8, device=device))
                for b in blocks:
                    b.fill_(POISON_BYTE)
                del blocks, b  # back to the pool, poisoned, for this stream's next allocations
                return fn(*args, **kwargs)

        return on_poisoned_pool, lambda t: _element_bytes_are(t, POISON_BYTE)

    def nan_filled(*args: Any, **kwargs: Any) -> Any:
        prior = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
        prior_fill = torch.utils.deterministic.fill_uninitialized_memory
        torch.utils.deterministic.fill_uninitialized_memory = True
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return fn(*args, **kwargs)
        finally:
            torch.use_deterministic_algorithms(prior[0], warn_only=prior[1])
            torch.utils.deterministic.fill_uninitialized_memory = prior_fill

    return nan_filled, torch.isnan


def _wants_unwritten_check(out: torch.Tensor) -> bool:
    """Whether ``out`` holds a value an unwritten element of fresh or reused memory could
    pass for: a 0 (fresh memory, and a masked entry's or row's answer) or, on CUDA, where
    the poison is finite, a NaN (a previous result's, and the other answer of a masked row)."""
    suspicious = out == 0
    if out.is_cuda and out.is_floating_point():
        suspicious |= torch.isnan(out)
    return bool(suspicious.any())


def every_output_written(fn, out: torch.Tensor, args: tuple, kwargs: dict[str, Any],
                         timeout: float) -> Violation | None:
    """Call ``fn`` again on the same inputs with every tensor it allocates poisoned: an
    ``unwritten-output`` violation if that output holds the poison where the ordinary
    call's did not.

    A kernel that skips the store for rows or tiles it has nothing to compute for (a fully
    masked row, a key-padding tile, a query block with no visible key) leaves those elements
    as the allocator handed them out.  Fresh device memory reads 0, and 0 is the right
    answer there (or one the contract accepts), so the ordinary call passes; a reused block
    holds a previous result, NaN as likely as not.  Both are seen in public trackers:
    onnxruntime's flash path with no fully-masked-row guard (PR #28958), tilelang's LSE
    padding rows left as ``torch.empty`` gave them (PR #2461).  Reading a temporary before
    writing it shows the same way.  A failure of this second call is left to the search, as
    in the other call checks.
    """
    poisoning = _poisoned_allocations(fn, out.device)
    if poisoning is None:
        return None
    wrapped, is_poison = poisoning
    try:
        again, viol, _ = call_target(wrapped, args, kwargs, timeout)
    except (TargetHang, DeviceContextLost):
        return None
    if viol is not None or not isinstance(again, torch.Tensor) or again.shape != out.shape \
            or again.dtype != out.dtype:
        return None
    unwritten = is_poison(again) & ~is_poison(out)
    n = int(unwritten.sum())
    first = tuple(int(i) for i in unwritten.nonzero()[0]) if n else ()
    poison = again[first].item() if n else None
    del again, wrapped  # the last references to the CUDA pool's tensors, then to the pool
    if n == 0:
        return None
    return Violation("unwritten-output",
                     f"{n} of {out.numel()} output elements were never written: called again on the same inputs "
                     f"with every tensor it allocated poisoned, the target returned the poison ({poison!r}) "
                     f"there (first at index {first}; {out[first].item()!r} in the ordinary call, whatever the "
                     "allocator handed out); store every element, fully masked rows and skipped tiles included, "
                     "or allocate the output with torch.zeros")


def _small(*tensors: torch.Tensor | None) -> bool:
    return sum(t.numel() for t in tensors if t is not None) <= OUTPUT_REUSE_MAX_ELEMENTS


def _second_calls(any_size: bool, first_call_s: float, *tensors: torch.Tensor | None) -> bool:
    """Whether the reuse, unwritten-memory and stream-order checks (each a second call) run."""
    return _small(*tensors) or (any_size and first_call_s <= ANY_SIZE_CALL_CHECK_S)


def _describe_tensor(t: torch.Tensor) -> str:
    return f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')} on {t.device}" + (
        "" if t.is_contiguous() else f" strides {t.stride()}"
    )


class WideCaseUnaffordable(Exception):
    """A wide case (the wide-offsets probes) did not fit: the device's free memory was short
    of what it needs, or the target ran out of memory on it.  Not a violation: the probe is
    reported as not tried, with this message."""


#: What a wide case needs free on its device, in multiples of its input's bytes: the input
#: and the output, the target's temporaries (torch.softmax of a 16-bit input works in float32)
#: and the comparisons' chunks.
WIDE_MEMORY_FACTOR = 6
#: Elements of the output compared with its first repetition at a time (1 GiB of bits in float32).
WIDE_COMPARE_ELEMENTS = 2**28
#: Elements of the repetitions that differ from the first evaluated against the oracle at a
#: time (the contract's float64 intermediates: a few hundred MiB).
WIDE_EVALUATE_ELEMENTS = 2**23


#: How long a wide case waits for its memory to come free when the device has it in total but
#: other processes hold it (pytest-xdist workers' cached blocks, freed as their tests end).
WIDE_MEMORY_WAIT_S = 90.0


def _wait_for_free_memory(device: torch.device, need: int, input_bytes: int) -> None:
    """Return once ``need`` bytes are free on ``device``; raise WideCaseUnaffordable at once
    where the device has not that much in total, or after WIDE_MEMORY_WAIT_S of waiting."""
    torch.cuda.empty_cache()
    deadline = time.monotonic() + WIDE_MEMORY_WAIT_S
    while True:
        free, total = torch.cuda.mem_get_info(device)
        if free >= need:
            return
        if total < need or time.monotonic() >= deadline:
            waited = "" if total < need else f" after {WIDE_MEMORY_WAIT_S:.0f} s of waiting"
            raise WideCaseUnaffordable(f"{free / 2**30:.1f} GiB free on {device} ({total / 2**30:.0f} in all){waited}, "
                                       f"a wide case of {input_bytes / 2**30:.1f} GiB needs {need / 2**30:.0f}")
        time.sleep(1.0)


@contextlib.contextmanager
def wide_case_slot(device: torch.device, input_bytes: int) -> Iterator[None]:
    """Hold the device for one wide case: one at a time across processes (pytest-xdist workers
    and campaign workers share a GPU; two 8 GiB cases at once on top of their other work ran
    it out of memory), and only with ``WIDE_MEMORY_FACTOR`` times ``input_bytes`` free, else
    WideCaseUnaffordable.  The lock is a file in the temporary directory, one per device."""
    index = device.index if device.index is not None else (torch.cuda.current_device() if device.type == "cuda" else 0)
    path = os.path.join(tempfile.gettempdir(), f"flashverify-wide-{device.type}{index}.lock")
    with open(path, "a") as handle:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock between processes
            fcntl = None
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            if device.type == "cuda":
                _wait_for_free_memory(device, WIDE_MEMORY_FACTOR * input_bytes, input_bytes)
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)
            if device.type == "cuda":
                try:  # the case's gigabytes go back to the device, for the other workers
                    torch.cuda.empty_cache()
                except Exception:  # noqa: BLE001 - a target that lost the context: its error is the verdict
                    pass


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` viewed as integers of its element size: equal bits compare equal (NaN payloads, -0.0)."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def repetitions_differing(whole: torch.Tensor, block: torch.Tensor, tile: int) -> torch.Tensor:
    """The indices j in [0, tile) (int64, ascending, on the device) of the
    ``block.shape[0]``-row repetitions of ``whole`` (rows ``j * rows`` to ``(j + 1) * rows``)
    whose bits differ from ``block``'s, compared ``WIDE_COMPARE_ELEMENTS`` at a time."""
    rows = block.shape[0]
    ref = _bits(block)
    per = max(1, WIDE_COMPARE_ELEMENTS // max(1, block.numel()))
    found: list[torch.Tensor] = []
    for j0 in range(0, tile, per):
        j1 = min(tile, j0 + per)
        seg = _bits(whole[j0 * rows:j1 * rows]).reshape(j1 - j0, *block.shape)
        found.append(torch.nonzero((seg != ref).flatten(1).any(1)).flatten() + j0)
    return torch.cat(found)


def _in_repetition(bad: Violation, index: tuple[int, ...] | None, j: int, tile: int, span: str, first: int,
                   described: str) -> Violation:
    """``bad``, found in repetition ``j`` of a wide case's ``tile`` (``span``: its rows or heads,
    whose output begins at element offset ``first``), indexed in the whole output and told so."""
    where = (f"repetition {j} of {tile} ({span}, output offsets from {first}"
             f"{', past 2**31' if first >= 2**31 else ', past 2**24' if first >= 2**24 else ''}) differs from the "
             "first, which passed; the indices "
             "before are the block's")
    return replace(bad, index=index, message=f"{bad.message}; {where} ({described})")


def _raise_if_out_of_memory(v: Violation | None, described: str) -> None:
    """A wide case the target ran out of memory on is unaffordable, not violated."""
    if v is not None and "OutOfMemoryError" in v.message.split(":")[0]:
        raise WideCaseUnaffordable(f"the target ran out of memory on {described}: {v.message[:200]}")


def _first_bad_repetition(ev: Evaluation, differing: torch.Tensor, per: int, unit: int, axis: int,
                          batched: Callable[[torch.Tensor], Evaluation],
                          alone: Callable[[int], Evaluation]) -> tuple[int, Violation] | None:
    """The repetitions in ``differing`` evaluated ``per`` at a time (``batched(group)``: side by
    side, ``unit`` rows or heads each along index ``axis``), their largest errors folded into
    ``ev``; the first that violates, with its violation seen alone (``alone(j)``: the block's
    indices), or None."""
    for start in range(0, differing.numel(), per):
        group = differing[start:start + per]
        other = batched(group)
        if other.max_ratio > ev.max_ratio:
            ev.errors, ev.tolerances = other.errors, other.tolerances
        if other.lse_max_ratio > ev.lse_max_ratio:
            ev.lse_errors, ev.lse_tolerances = other.lse_errors, other.lse_tolerances
        if not other.ok:
            first = other.violations[0]
            j = int(group[(0 if first.index is None else first.index[axis]) // unit])
            lone = alone(j)
            return j, lone.violations[0] if lone.violations else first
    return None


def _repeated_truth(truth: oracle.SoftmaxTruth, times: int) -> oracle.SoftmaxTruth:
    """The truth of a 2-D block repeated ``times`` along the rows."""
    def rows(t: torch.Tensor) -> torch.Tensor:
        return t.repeat(times, *([1] * (t.dim() - 1)))

    def certified(c: oracle.Certified) -> oracle.Certified:
        return oracle.Certified(rows(c.hi), rows(c.lo), rows(c.bound))

    return oracle.SoftmaxTruth(certified(truth.probs), certified(truth.lse), rows(truth.row_status),
                               rows(truth.fallback_rows), truth.target)


def _softmax_lse_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows whose LSE must be NaN (a NaN in the row) and rows whose LSE may be NaN or +inf (a +inf)."""
    return torch.isnan(x).any(-1), (x == math.inf).any(-1)


def _judge_softmax(x: torch.Tensor, out: torch.Tensor, lse: torch.Tensor | None, truth: oracle.SoftmaxTruth,
                   tol: tuple[torch.Tensor, torch.Tensor, torch.Tensor], lse_tol: torch.Tensor | None,
                   masked_rows: str, empty_row_lse: float) -> Evaluation:
    """The contract on a softmax output (``tol``: element tolerance in ULPs, spread bound,
    summation-bias bound) and,
    when there is one, its LSE."""
    ev = contracts.evaluate_softmax(x, out, truth, tol[0], masked_rows, spread=tol[1], bias=tol[2])
    if lse is not None:
        want_nan, nan_or_inf = _softmax_lse_rows(x)
        contracts.evaluate_lse(ev, lse, truth, lse_tol, out, want_nan=want_nan, nan_or_inf=nan_or_inf,
                               masked_rows=masked_rows, empty_row_lse=empty_row_lse)
    return ev


def _softmax_tolerances(target: Target, x: torch.Tensor, truth: oracle.SoftmaxTruth, lse: torch.Tensor | None
                        ) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor | None]:
    """((element tolerance in ULPs, spread bound, summation-bias bound), LSE tolerance or None)."""
    fmt = get_format(x.dtype)
    model = tolerance.ToleranceModel.for_target(target.caps, fmt.name)
    bias = tolerance.softmax_bias_bound(x, truth, model)
    tol = (tolerance.softmax_tolerance_ulps(x, truth, fmt, model), tolerance.softmax_spread_bound(x, truth, fmt, model),
           bias)
    return tol, None if lse is None else tolerance.lse_tolerance_units(x, truth, get_format(lse.dtype), model, bias)


def _check_wide_softmax(target: Target, x: torch.Tensor, tile: int, masked_rows: str,
                        timeout: float) -> CaseOutcome:
    """The wide-offsets probe's check: the target gets ``x`` repeated ``tile`` times along the
    rows (past 2**31 elements); every repetition of its output (and LSE) must equal the first
    bit for bit or, where it does not (a kernel may round a row differently by where it lies),
    pass the contract against the oracle's truth of its block.  The first repetition is checked
    as any case is; the reuse, unwritten-memory and stream checks are for small cases."""
    rows, n = x.shape
    described = f"input {_describe_tensor(x)} repeated x{tile} along the rows, {rows * tile * n} elements"
    with wide_case_slot(x.device, x.numel() * tile * x.element_size()):
        whole = x.repeat(tile, 1)
        out, lse, v, secs = call_split(target, (whole,), {}, timeout, whole.shape, whole.device)
        _raise_if_out_of_memory(v, f"the {described}")
        if v is None:
            v = contracts.check_structure(out, whole.shape, whole.dtype, whole.device)
        if v is None:
            changed = repetitions_differing(whole, x, tile)
            if changed.numel():
                j = int(changed[0])
                v = Violation("input-modified", f"the target wrote into its input: rows {j * rows} to "
                              f"{(j + 1) * rows - 1} no longer hold what was passed")
        if v is not None:
            return CaseOutcome(Evaluation([Violation(v.kind, f"{v.message} ({described})")]), secs, 0.0, 0.0, 0)
        t0 = time.perf_counter()
        truth = oracle.softmax_truth(x, get_format(x.dtype))
        tol, lse_tol = _softmax_tolerances(target, x, truth, lse)
        osecs = time.perf_counter() - t0
        within = torch.arange(rows, device=out.device)

        def judge(reps: torch.Tensor) -> Evaluation:
            # Repetitions ``reps`` side by side, against the block's truth repeated as often.
            count = reps.numel()
            pick = (reps.to(out.device)[:, None] * rows + within).reshape(-1)
            return _judge_softmax(x.repeat(count, 1), out[pick], None if lse is None else lse[pick],
                                  _repeated_truth(truth, count), (tol[0].repeat(count, 1), tol[1].repeat(count, 1), tol[2].repeat(count)),
                                  None if lse_tol is None else lse_tol.repeat(count), masked_rows,
                                  float(target.caps.empty_row_lse))

        ev = judge(torch.zeros(1, dtype=torch.long))
        differing = torch.empty(0, dtype=torch.long, device=out.device)
        if ev.ok:
            differing = repetitions_differing(out, out[:rows], tile)
            if lse is not None:
                differing = torch.unique(torch.cat([differing, repetitions_differing(lse, lse[:rows], tile)]))
        found = _first_bad_repetition(ev, differing, max(1, WIDE_EVALUATE_ELEMENTS // x.numel()), rows, 0, judge,
                                      lambda j: judge(torch.tensor([j])))
        if found is not None:
            j, bad = found
            index = None if bad.index is None else (j * rows + bad.index[0], *bad.index[1:])
            ev.violations.append(_in_repetition(bad, index, j, tile, f"rows {j * rows} to {(j + 1) * rows - 1}",
                                                j * rows * n, described))
        return CaseOutcome(ev, secs, osecs, 0.0, int(truth.fallback_rows.sum()), None)


def check_softmax_input(
    target: Target, x: torch.Tensor, *, masked_rows: str = "declared", timeout: float = DEFAULT_TIMEOUT_S,
    compare_naive: bool = True, tile: int = 1, call_checks_at_any_size: bool = False,
) -> CaseOutcome:
    """Run a softmax target on x and evaluate its output (and LSE, for a target declaring
    ``returns_lse``).  ``tile`` > 1: the target gets x (2-D) repeated that many times along
    the rows (the wide-offsets probe).  The checks that call the target again (its output
    survives a next call, every element is written, the current stream is used) run on inputs
    of at most ``OUTPUT_REUSE_MAX_ELEMENTS``, and with ``call_checks_at_any_size`` on any whose
    first call took at most ``ANY_SIZE_CALL_CHECK_S``."""
    masked_rows = masked_rows_for(target, masked_rows)
    if tile > 1:
        return _check_wide_softmax(target, x, tile, masked_rows, timeout)
    snapshot = StorageSnapshot({"x": x})
    out, lse, v, secs = call_split(target, (x,), {}, timeout, x.shape, x.device)
    if v is None:
        v = inputs_modified(snapshot) or contracts.check_structure(out, x.shape, x.dtype, x.device)
    decoy, decoy_out = None, None
    small = _second_calls(call_checks_at_any_size, secs, x)
    fn = output_only(target)
    seconds_before = time.perf_counter()
    if v is None and small:
        decoy = _ramp(x)
        v, decoy_out = output_survives_next_call(fn, out, (decoy,), {}, timeout)
    if v is None and small and _wants_unwritten_check(out):
        v = every_output_written(fn, out, (x,), {}, timeout)
    if v is None and small and x.is_cuda:
        v = stream_order_respected(fn, out, (x,), {}, secs, timeout)
    second = time.perf_counter() - seconds_before
    if v is not None:
        msg = f"{v.message} (input {_describe_tensor(x)})"
        return CaseOutcome(Evaluation([Violation(v.kind, msg)]), secs, 0.0, 0.0, 0, second_call_seconds=second)
    t0 = time.perf_counter()
    truth = oracle.softmax_truth(x, get_format(x.dtype))
    osecs = time.perf_counter() - t0
    tol, lse_tol = _softmax_tolerances(target, x, truth, lse)
    ev = _judge_softmax(x, out, lse, truth, tol, lse_tol, masked_rows, float(target.caps.empty_row_lse))
    if ev.ok and decoy_out is not None:
        seconds_before = time.perf_counter()
        stale = decoy_is_answered(decoy_out, out, torch.softmax(decoy.double(), -1))
        if stale is None:
            moved = answer_after_update_in_place(fn, (x,), {}, [(x, decoy)], timeout)
            stale = decoy_is_answered(moved, out, torch.softmax(decoy.double(), -1), call="in-place")
        if stale is not None:
            ev.violations.append(stale)
        second += time.perf_counter() - seconds_before
    naive = atol = 0.0
    if compare_naive:
        ref = reference.two_pass_softmax(x, compute_dtype=x.dtype)
        finite = (truth.row_status == oracle.ROW_FINITE)[..., None]
        naive = _naive_abs_max(ref, truth.probs, finite)
        atol = flash_rule_atol(truth.probs, x.dtype, finite)
    return CaseOutcome(ev, secs, osecs, naive, int(truth.fallback_rows.sum()), out, atol, second)


#: Exact-fallback work one case may spend: rows x Nk x (D + 100), i.e. Python-integer
#: multiply-adds plus ~100 per mpmath exponential; 2e7 is about 2 s on one core.
MAX_FALLBACK_WORK = 2e7


def _decoy_attention_answer(decoy: tuple[torch.Tensor, torch.Tensor, torch.Tensor], scale: float, causal: bool,
                            mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The attention of the decoys (Q = K = 0: every visible key weighs the same, so each
    output row is the mean of the visible V rows), exact to float64 rounding, and which query
    rows see a key (broadcastable to (B, Hq, Nq); None: all)."""
    q, k, v = (t.double() for t in decoy)
    answer = reference.naive_attention(q, k, v, scale=scale, causal=causal, mask=mask)
    visible = reference.key_visibility(q, k, causal, mask)
    return answer, None if visible is None else visible.any(-1)


def causal_flag_is_keyed(fn, caps: Capabilities, decoy: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                         decoy_out: torch.Tensor, kwargs: dict[str, Any], timeout: float) -> Violation | None:
    """Call ``fn`` on the decoy tensors again with the causal flag flipped (where ``caps``
    take the flipped call: causal with a mask, with Nq != Nk), judged by ``decoy_is_answered(...,
    call="causal-flipped")``: ``stale-input`` if it answers bit for bit as for the other flag (a
    kernel compiled for the first call's flag and cached under a key of shapes, or a result
    cached without the flag), ``accuracy`` if it is otherwise wrong for that flag."""
    causal, mask = not kwargs["causal"], kwargs["mask"]
    q, k = decoy[0], decoy[1]
    if causal and not (caps.causal and (mask is None or caps.causal_with_mask)
                       and (q.shape[-2] == k.shape[-2] or not caps.causal_square_only)):
        return None
    try:
        out, viol, _ = call_target(fn, decoy, {**kwargs, "causal": causal}, timeout)
    except (TargetHang, DeviceContextLost):
        return None
    if viol is not None:
        return None
    return decoy_is_answered(out, decoy_out, *_decoy_attention_answer(decoy, kwargs["scale"], causal, mask),
                             call="causal-flipped")


def _judge_attention(out: torch.Tensor, lse: torch.Tensor | None, truth: oracle.AttentionTruth, tol: torch.Tensor,
                     lse_tol: torch.Tensor | None, masked_rows: str, v: torch.Tensor, hull_slack: float,
                     empty_row_lse: float) -> Evaluation:
    """The contract on an attention output and, when there is one, its LSE."""
    ev = contracts.evaluate_attention(out, truth, tol, masked_rows, v=v, hull_slack=hull_slack)
    if lse is not None:
        contracts.evaluate_lse(ev, lse, truth, lse_tol, out, want_nan=truth.lse_expected_nan,
                               nan_or_inf=torch.zeros_like(truth.lse_expected_nan), masked_rows=masked_rows,
                               empty_row_lse=empty_row_lse)
    ev.uncertified = int(truth.uncertified_rows.sum())
    return ev


def _mask_for_heads(mask: torch.Tensor | None, heads: int) -> torch.Tensor | None:
    """A mask shared by the heads (the wide-offsets probe's) for ``heads`` heads: unchanged
    where it broadcasts over them; a 4-D mask laid out per head (the ``expanded`` layout, zero
    strides over the heads) gets its first head's slab expanded to ``heads``, zero strides kept."""
    if mask is None or mask.dim() < 4 or mask.shape[1] == 1:
        return mask
    return mask[:, :1].expand(mask.shape[0], heads, *mask.shape[2:])


def _check_wide_attention(target: Target, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tile: int,
                          kwargs: dict[str, Any], masked_rows: str, timeout: float,
                          max_fallback_work: float | None) -> CaseOutcome:
    """The wide-offsets probe's check for attention: the target gets Q, K and V (one batch
    entry) with their heads repeated ``tile`` times (each past 2**31 elements); every
    repetition of the output's heads (and the LSE's) must equal the first bit for bit or,
    where it does not, pass the contract against the oracle's truth of the block.  The mask,
    if any, is shared by the heads.  The first repetition is checked as any case is."""
    heads, n_q, d = q.shape[1:]
    described = (f"q {_describe_tensor(q)}, k {_describe_tensor(k)}, v {_describe_tensor(v)} with the heads repeated "
                 f"x{tile}, {q.numel() * tile} elements in Q, scale={kwargs['scale']:g}, causal={kwargs['causal']}, "
                 f"mask={None if kwargs['mask'] is None else tuple(kwargs['mask'].shape)}")
    largest = max(t.numel() * t.element_size() for t in (q, k, v)) * tile
    with wide_case_slot(q.device, largest):
        whole = tuple(t.repeat(1, tile, 1, 1) for t in (q, k, v))
        call_kwargs = dict(kwargs, mask=_mask_for_heads(kwargs["mask"], heads * tile))
        out, lse, viol, secs = call_split(target, whole, call_kwargs, timeout, whole[0].shape, q.device)
        _raise_if_out_of_memory(viol, described)
        if viol is None:
            viol = contracts.check_structure(out, whole[0].shape, q.dtype, q.device)
        if viol is None:
            for name, block, full in zip("qkv", (q, k, v), whole, strict=True):
                changed = repetitions_differing(full[0], block[0], tile)
                if changed.numel():
                    j = int(changed[0])
                    viol = Violation("input-modified", f"the target wrote into its input: {name}'s heads "
                                     f"{j * block.shape[1]} to {(j + 1) * block.shape[1] - 1} no longer hold what "
                                     "was passed")
                    break
        if viol is not None:
            return CaseOutcome(Evaluation([Violation(viol.kind, f"{viol.message} ({described})")]), secs, 0.0, 0.0, 0)
        fmt = get_format(q.dtype)
        t0 = time.perf_counter()
        model = tolerance.ToleranceModel.for_target(target.caps, fmt.name)
        truth, tol, lse_tol = truth_chunks.attention_truth_and_tolerance(
            q, k, v, **kwargs, fmt=fmt, model=model, max_fallback_work=max_fallback_work,
            lse_format=None if lse is None else get_format(lse.dtype))
        osecs = time.perf_counter() - t0
        slack = tolerance.hull_relative_slack(q.dtype, fmt, model)
        within = torch.arange(heads, device=out.device)

        def judge(reps: torch.Tensor) -> Evaluation:
            # Repetitions ``reps`` side by side, against the block's truth repeated along the heads.
            count = reps.numel()
            pick = (reps.to(out.device)[:, None] * heads + within).reshape(-1)
            return _judge_attention(out[:, pick], None if lse is None else lse[:, pick],
                                    truth_chunks.merge([truth] * count, dim=1), tol.repeat(1, count, 1, 1),
                                    None if lse_tol is None else lse_tol.repeat(1, count, 1), masked_rows,
                                    v.repeat(1, count, 1, 1), slack, float(target.caps.empty_row_lse))

        ev = judge(torch.zeros(1, dtype=torch.long))
        differing = torch.empty(0, dtype=torch.long, device=out.device)
        if ev.ok:
            differing = repetitions_differing(out[0], out[0, :heads], tile)
            if lse is not None:
                differing = torch.unique(torch.cat([differing, repetitions_differing(lse[0], lse[0, :heads], tile)]))
        found = _first_bad_repetition(
            ev, differing, max(1, WIDE_EVALUATE_ELEMENTS // max(1, heads * n_q * max(d, k.shape[2]))), heads, 1,
            judge, lambda j: judge(torch.tensor([j])))
        if found is not None:
            j, bad = found
            index = None if bad.index is None else (bad.index[0], j * heads + bad.index[1], *bad.index[2:])
            ev.violations.append(_in_repetition(bad, index, j, tile, f"heads {j * heads} to {(j + 1) * heads - 1}",
                                                j * heads * n_q * d, described))
        return CaseOutcome(ev, secs, osecs, 0.0, int(truth.fallback_rows.sum()), None)


def check_attention_input(
    target: Target, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float, causal: bool,
    mask: torch.Tensor | None, masked_rows: str = "declared", timeout: float = DEFAULT_TIMEOUT_S,
    compare_naive: bool = True, max_fallback_work: float | None = MAX_FALLBACK_WORK, tile: int = 1,
    call_checks_at_any_size: bool = False,
) -> CaseOutcome:
    """Run an attention target and evaluate its output (and LSE, for a target declaring
    ``returns_lse``).  ``tile`` > 1: the target gets Q, K and V (batch 1) with their heads
    repeated that many times (the wide-offsets probe).  The second calls' checks run as in
    ``check_softmax_input``."""
    masked_rows = masked_rows_for(target, masked_rows)
    if tile > 1:
        return _check_wide_attention(target, q, k, v, tile, dict(scale=scale, causal=causal, mask=mask),
                                     masked_rows, timeout, max_fallback_work)
    kwargs = dict(scale=scale, causal=causal, mask=mask)
    snapshot = StorageSnapshot({"q": q, "k": k, "v": v, "mask": mask})
    out, lse, viol, secs = call_split(target, (q, k, v), kwargs, timeout, q.shape, q.device)
    if viol is None:
        viol = inputs_modified(snapshot) or contracts.check_structure(out, q.shape, q.dtype, q.device)
    decoy, decoy_out = None, None
    small = _second_calls(call_checks_at_any_size, secs, q, k, v, mask)
    fn = output_only(target)
    seconds_before = time.perf_counter()
    if viol is None and small:
        decoy = (torch.zeros(q.shape, dtype=q.dtype, device=q.device),
                 torch.zeros(k.shape, dtype=k.dtype, device=k.device), _ramp(v))
        viol, decoy_out = output_survives_next_call(fn, out, decoy, kwargs, timeout)
    if viol is None and small and _wants_unwritten_check(out):
        viol = every_output_written(fn, out, (q, k, v), kwargs, timeout)
    if viol is None and small and q.is_cuda:
        viol = stream_order_respected(fn, out, (q, k, v), kwargs, secs, timeout)
    second = time.perf_counter() - seconds_before
    if viol is not None:
        msg = (f"{viol.message} (q {_describe_tensor(q)}, k {_describe_tensor(k)}, v {_describe_tensor(v)}, "
               f"scale={scale:g}, causal={causal}, mask={None if mask is None else tuple(mask.shape)})")
        return CaseOutcome(Evaluation([Violation(viol.kind, msg)]), secs, 0.0, 0.0, 0, second_call_seconds=second)
    fmt = get_format(q.dtype)
    t0 = time.perf_counter()
    model = tolerance.ToleranceModel.for_target(target.caps, fmt.name)
    truth, tol, lse_tol = truth_chunks.attention_truth_and_tolerance(
        q, k, v, scale=scale, causal=causal, mask=mask, fmt=fmt, model=model, max_fallback_work=max_fallback_work,
        lse_format=None if lse is None else get_format(lse.dtype))
    osecs = time.perf_counter() - t0
    ev = _judge_attention(out, lse, truth, tol, lse_tol, masked_rows, v, tolerance.hull_relative_slack(q.dtype, fmt, model),
                          float(target.caps.empty_row_lse))
    if ev.ok and decoy_out is not None:
        seconds_before = time.perf_counter()
        answer = _decoy_attention_answer(decoy, scale, causal, mask)
        stale = decoy_is_answered(decoy_out, out, *answer)
        if stale is None:
            # the mask too, where it has memory of its own
            updates, moved_mask = list(zip((q, k, v), decoy)), mask
            if mask is not None and not _overlaps_itself(mask):
                moved_mask = decoy_mask(mask)
                updates.append((mask, moved_mask))
            moved = answer_after_update_in_place(fn, (q, k, v), kwargs, updates, timeout)
            moved_answer = answer if moved_mask is mask else _decoy_attention_answer(decoy, scale, causal, moved_mask)
            stale = decoy_is_answered(moved, out, *moved_answer, call="in-place")
        if stale is None:
            stale = causal_flag_is_keyed(fn, target.caps, decoy, decoy_out, kwargs, timeout)
        if stale is not None:
            ev.violations.append(stale)
        second += time.perf_counter() - seconds_before
    naive = atol = 0.0
    if compare_naive:
        ref = reference.naive_attention(q, k, v, scale=scale, causal=causal, mask=mask)
        finite = (truth.row_status == oracle.ROW_FINITE)[..., None] & ~truth.expected_nonfinite
        naive = _naive_abs_max(ref, truth.out, finite)
        atol = flash_rule_atol(truth.out, q.dtype, finite)
    return CaseOutcome(ev, secs, osecs, naive, int(truth.fallback_rows.sum()), out, atol, second)


def flash_rule_atol(truth: oracle.Certified, dtype: torch.dtype, where: torch.Tensor) -> float:
    """FA3's ``fwd_atol``: twice the largest ``|(ref + 0.3 - 0.3) - ref|`` in the output dtype,
    ``ref`` the exact result rounded to it (the rounding error of an O(1) value there)."""
    ref = truth.hi.to(dtype)
    moved = ((ref + 0.3) - 0.3) - ref
    moved = torch.where(where.expand_as(moved) & torch.isfinite(moved), moved.abs(), torch.zeros_like(moved))
    return 2.0 * float(moved.max()) if moved.numel() else 0.0


def _naive_abs_max(ref: torch.Tensor, truth: oracle.Certified, where: torch.Tensor) -> float:
    err = metrics.abs_error(ref, truth)
    err = torch.where(where.expand_as(err) & torch.isfinite(err), err, torch.zeros_like(err))
    return float(err.max()) if err.numel() else 0.0
