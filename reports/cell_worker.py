"""Campaign cells in a child process, so one target that kills the device cannot end the campaign.

A CUDA kernel fault (misaligned address, illegal memory access, device-side assert)
is sticky: every later CUDA call in that process fails.  Run in process, the first
such fault would take every later cell down with it and leave no report.  Here the
cells run one after another in a spawned worker process; the campaign gets back the
same ``CellRun`` it would get in process, and:

* a cell whose target lost the CUDA context (``CellResult.context_lost``) or hung
  ends its worker; the next cell starts a fresh one;
* a worker that dies outright (a segfault, an abort) is reported violated with kind
  ``crash``; one that has overrun its cell's time by ``GRACE_S`` *and* has started no
  example for ``stall_s`` (the per-example timeout plus ``STALL_SLACK_S``) is killed and
  reported with kind ``hang``.  The input in flight is written to a file before every
  example, shrinking included, so that file is also the worker's heartbeat: a long
  shrink (Hypothesis bounds it at five minutes) is progress, not a hang.  The input
  in flight is saved as a replayable artifact when there was one.  Before the kill the
  parent asks the worker for its threads' stacks (``faulthandler`` on SIGUSR1, which answers
  even while a thread holds the GIL in C code); the hang's message names where each thread
  was (``hang_stacks``).  When no thread was in a call of the target (the suite's oracle, a
  lock or the device's memory wait held it), the cell is an ``error`` of the suite, not a
  ``hang`` of the target.

The only cost is one process start (imports, a CUDA context), paid again after each
lost context.  ``InProcessCells`` runs the same cells without a child (the CPU default).
"""

from __future__ import annotations

import faulthandler
import json
import multiprocessing as mp
import os
import re
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from kernels.registry import Target
from verify import engine, search
from verify.contracts import Violation
from verify.search import CellResult, CheckOptions

#: Seconds a worker may run past its cell's budget (one slow example, an mpmath fallback)
#: before it may be taken to be hung: it must also have started no example for the
#: per-example timeout plus STALL_SLACK_S.
GRACE_S = 60.0
STALL_SLACK_S = 60.0
TICK_EVERY_S = 0.5
#: Seconds the parent waits for a hung worker's stack dump before it kills the worker.
STACKS_WAIT_S = 2.0
#: Innermost frames of each thread a hang's message names.
STACK_FRAMES = 4
#: The signal a worker dumps its threads' stacks on (None where the platform has none).
STACKS_SIGNAL = getattr(signal, "SIGUSR1", None)


class InProcessCells:
    """Cells searched in this process (``reports.campaign.run_cell``)."""

    def run(self, target: Target, dtype: str, base: CheckOptions, budget_s: float, seed: int,
            max_examples: int, tick: Callable[[], None] | None = None, observe: bool = True):
        from reports.campaign import run_cell

        return run_cell(target, dtype, base, budget_s, seed, max_examples, tick=tick, observe=observe)

    def close(self) -> None:
        pass


def _recording_inflight(path: Path):
    """Write each case's spec to ``path`` before the target sees it (evidence if the process dies)."""
    return search.observing_cases(before=lambda case: path.write_text(
        json.dumps({"spec": case.spec.to_dict(), "description": case.describe()})))


def _mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _spent_worker(cell: CellResult) -> bool:
    """Whether the process that searched ``cell`` must not search another: its CUDA context is
    dead, or a thread is still stuck in the target."""
    return cell.context_lost or (cell.violation is not None and cell.violation.kind == "hang")


def _stacks_path(inflight: Path) -> Path:
    return inflight.with_name("stacks.txt")


_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+", re.I)


#: Where the suite's own frames live (a thread's innermost one is named even when deeper
#: frames are library code).
_PROJECT_DIRS = ("verify/", "kernels/", "reports/", "strategies/", "tests/")


_ROOT = str(Path(__file__).resolve().parents[1]) + os.sep


def _short(path: str) -> str:
    """``path`` from the repository root, from site-packages for an installed library, or from
    the standard library's folder."""
    if path.startswith(_ROOT):
        return path[len(_ROOT):]
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1]
    return re.sub(r"^.*/lib/python3\.\d+/", "", path)


def stack_threads(dump: str, frames: int = STACK_FRAMES) -> list[tuple[str, list[str]]]:
    """The threads of a ``faulthandler`` dump as (name, frames), innermost frames first.

    Each thread is named ``target`` (the thread ``verify.engine.call_target`` runs the target
    in), ``main`` (the worker's main thread) or ``thread``; it keeps its innermost ``frames``
    frames as ``file:line func``, and then, if none of them is the suite's, its innermost
    frame in the suite's code.  Threads with no frame of the suite's (idle pools, the pipe's
    feeder) are left out."""
    stacks: list[list[str]] = []
    for line in dump.splitlines():
        if _THREAD.match(line):
            stacks.append([])
            continue
        frame = _FRAME.match(line)
        if frame and stacks:
            stacks[-1].append(f"{_short(frame['file'])}:{frame['line']} {frame['func']}")
    threads = []
    for stack in stacks:
        ours = [f for f in stack if f.startswith(_PROJECT_DIRS)]
        if not ours:
            continue
        name = ("target" if any(f.startswith("verify/engine.py:") and f.endswith(" run") for f in stack)
                else "main" if any(f.endswith(" _worker_main") for f in stack) else "thread")
        shown = stack[:frames]
        if not any(f in ours for f in shown):
            shown.append("... " + ours[0])
        threads.append((name, shown))
    return threads


def _summary(threads: list[tuple[str, list[str]]]) -> str:
    return "; ".join(f"[{name}] " + " < ".join(shown) for name, shown in threads)


def hang_stacks(dump: str, frames: int = STACK_FRAMES) -> str:
    """A one-line summary of a ``faulthandler`` dump (``stack_threads``): ``[name] frame <
    frame ...`` a thread, threads separated by "; ".  "" for an empty dump."""
    return _summary(stack_threads(dump, frames))


def _worker_main(conn, inflight: str, torch_threads: int | None = None) -> None:
    """Serve cell requests until told to stop, the parent goes away, or the device is lost;
    with ``torch_threads``, torch's intra-op threads are set to that many (workers that run
    side by side share the host's cores).  SIGUSR1 writes every thread's stack to the
    stacks file beside ``inflight`` (the parent's evidence for a hang verdict)."""
    from reports.campaign import run_cell
    from verify.loader import load_target

    if STACKS_SIGNAL is not None:
        stacks = open(_stacks_path(Path(inflight)), "w")  # noqa: SIM115 - open for the process's life
        faulthandler.register(STACKS_SIGNAL, file=stacks, all_threads=True)
    if torch_threads is not None:
        import torch

        torch.set_num_threads(torch_threads)

    path = Path(inflight)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request[0] == "stop":
            return
        _, name, op, dtype, base, budget_s, seed, max_examples, observe = request
        conn.send(("tick",))  # started: the parent's stall clock runs from here, not from the spawn
        last = [0.0]

        def tick() -> None:
            now = time.monotonic()
            if now - last[0] >= TICK_EVERY_S:
                last[0] = now
                conn.send(("tick",))

        try:
            with _recording_inflight(path):
                run = run_cell(load_target(name, op), dtype, base, budget_s, seed, max_examples, tick=tick,
                               observe=observe)
        except Exception as e:  # a fault of the suite, not of the target: report it, keep serving
            conn.send(("error", f"{type(e).__name__}: {e}"))
            continue
        path.unlink(missing_ok=True)
        run.observer.tick = None
        conn.send(("done", run))
        if _spent_worker(run.cell):
            return


class IsolatedCells:
    """Cells searched in a spawned worker process that is replaced whenever a target breaks it."""

    def __init__(self, grace_s: float = GRACE_S, stall_s: float | None = None,
                 torch_threads: int | None = None) -> None:
        self.grace_s = grace_s
        self.stall_s = stall_s  # None: the cell's per-example timeout + STALL_SLACK_S
        self.torch_threads = torch_threads  # None: torch's default (every core)
        self._ctx = mp.get_context("spawn")  # CUDA cannot be used in a forked child
        self._proc = None
        self._conn = None
        self._dir = tempfile.TemporaryDirectory(prefix="flashverify-worker-")
        self.inflight = Path(self._dir.name) / "inflight.json"
        self.workers_started = 0

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_worker_main, args=(child, str(self.inflight), self.torch_threads),
                                       name="flashverify-cells", daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        self.workers_started += 1

    def _stop(self, kill: bool = False) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return
        if not kill and proc.is_alive():
            try:
                conn.send(("stop",))
            except (OSError, BrokenPipeError):
                pass
            proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        conn.close()

    def run(self, target: Target, dtype: str, base: CheckOptions, budget_s: float, seed: int,
            max_examples: int, tick: Callable[[], None] | None = None, observe: bool = True):
        from reports.campaign import CellObserver, CellRun, cell_is_live

        if not cell_is_live(target, dtype, base.device):
            # nothing runs on the device: the in-process path reports it as unsupported
            return InProcessCells().run(target, dtype, base, budget_s, seed, max_examples, tick, observe)
        if self._proc is None or not self._proc.is_alive():
            self._stop(kill=True)
            self._start()
        self.inflight.unlink(missing_ok=True)
        self._conn.send(("cell", target.name, target.op, dtype, base, budget_s, seed, max_examples, observe))
        start = last_progress = time.monotonic()
        deadline = start + budget_s + self.grace_s
        stall_s = self.stall_s if self.stall_s is not None else base.timeout + STALL_SLACK_S
        beat = None
        while True:
            now = time.monotonic()
            stamp = _mtime_ns(self.inflight)
            if stamp != beat:  # a new example started (searching or shrinking)
                beat, last_progress = stamp, now
            if now > deadline and now - last_progress > stall_s:
                dump = self._stack_dump()
                self._stop(kill=True)
                what = (f"the worker searching this cell did not finish within its budget + {self.grace_s:g} s "
                        f"and started no example for {stall_s:g} s; it was killed")
                threads = stack_threads(dump)
                stacks = _summary(threads)
                if threads and all(name != "target" for name, _ in threads):
                    # no call of the target was in flight: the suite stalled, not the target
                    return CellRun(self._stalled_cell(target, dtype, base, now - start, what, stacks),
                                   CellObserver(target.op), budget_s, 0, "violation")
                where = f" (stacks at the kill, innermost first: {stacks})" if stacks else ""
                return CellRun(self._lost_cell(target, dtype, base, "hang", now - start, what + where),
                               CellObserver(target.op), budget_s, 0, "violation")
            try:
                ready = self._conn.poll(TICK_EVERY_S)
                message = self._conn.recv() if ready else None
            except (EOFError, OSError):
                message, ready = None, True
            if (ready and message is None) or (not ready and not self._proc.is_alive()):
                # the pipe can report the death before the process is reaped: wait for its status
                self._proc.join(10)
                code = self._proc.exitcode
                self._stop(kill=True)
                how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                return CellRun(self._lost_cell(target, dtype, base, "crash", time.monotonic() - start,
                                               f"the process searching this cell died ({how})"),
                               CellObserver(target.op), budget_s, 0, "violation")
            if message is None:
                if tick:
                    tick()
                continue
            kind = message[0]
            if kind == "tick":
                last_progress = time.monotonic()
                if tick:
                    tick()
            elif kind == "error":
                cell = CellResult(target.name, target.op, dtype, base.device, status="error",
                                  reason=f"the suite failed while searching this cell: {message[1]}")
                return CellRun(cell, CellObserver(target.op), budget_s, 0, "violation")
            elif kind == "done":
                run = message[1]
                if _spent_worker(run.cell):
                    self._stop()
                return run

    def _stack_dump(self) -> str:
        """The worker's ``faulthandler`` dump of its threads, asked for by signal; "" when the
        platform has no such signal or the worker wrote nothing within STACKS_WAIT_S."""
        path = _stacks_path(self.inflight)
        if STACKS_SIGNAL is None or self._proc is None or not self._proc.is_alive():
            return ""
        size = path.stat().st_size if path.exists() else 0
        try:
            os.kill(self._proc.pid, STACKS_SIGNAL)
        except OSError:
            return ""
        end = time.monotonic() + STACKS_WAIT_S
        while time.monotonic() < end and (path.stat().st_size if path.exists() else 0) <= size:
            time.sleep(0.1)
        time.sleep(0.2)  # the dump is written in one go: a moment more lets its last thread finish
        try:
            with open(path) as f:
                f.seek(size)
                return f.read()
        except OSError:
            return ""

    def _stalled_cell(self, target: Target, dtype: str, base: CheckOptions, seconds: float, what: str,
                      stacks: str) -> CellResult:
        """The cell of a worker killed while no call of the target was in flight: an error of the
        suite (status ``error``), not a hang of the target; the input in flight is named."""
        inflight = _read_inflight(self.inflight)
        case = f"; the input in flight: {inflight['description']}" if inflight else ""
        return CellResult(target.name, target.op, dtype, base.device, status="error", seconds=seconds,
                          reason=f"the suite stalled, not the target: {what}, and no call of the target was in "
                                 f"flight (stacks at the kill, innermost first: {stacks}){case}")

    def _lost_cell(self, target: Target, dtype: str, base: CheckOptions, kind: str, seconds: float,
                   what: str) -> CellResult:
        """The cell of a worker that died or hung, with the input in flight saved when it was recorded."""
        cell = CellResult(target.name, target.op, dtype, base.device, status="violated", seconds=seconds)
        inflight = _read_inflight(self.inflight)
        if inflight is None:
            cell.violation = Violation(kind, f"{what}; no example had started, so there is no input to replay")
            return cell
        cell.violation = Violation(kind, f"{what} while the target ran on the saved input")
        cell.counterexample = inflight["description"] + "  [as found: not shrunk, the process died]"
        try:
            from strategies.replay import case_from_dict

            case = case_from_dict(inflight["spec"])
            cell.artifact = search._save(case, cell, base, cell.violation, "violation",
                                         engine.masked_rows_for(target, base.masked_rows))
        except Exception as e:  # the spec is still in the message: better than nothing
            cell.violation = Violation(kind, f"{cell.violation.message} (artifact not saved: {e}; spec "
                                             f"{json.dumps(inflight['spec'])})")
        return cell

    def close(self) -> None:
        self._stop()
        self._dir.cleanup()


def _read_inflight(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def isolated_runners(isolation: str, device: str, jobs: int) -> bool:
    """Whether cells run in worker processes (``IsolatedCells``): ``process``, or ``auto`` on
    CUDA or with more than one job (jobs run side by side only in processes of their own)."""
    return isolation == "process" or (isolation == "auto" and (device.startswith("cuda") or jobs > 1))


__all__ = ["InProcessCells", "IsolatedCells", "isolated_runners", "hang_stacks", "stack_threads", "GRACE_S"]
