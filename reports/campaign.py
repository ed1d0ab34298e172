"""The main job, ``python -m verify run``: every available target x op x dtype within one time budget.

Order of work, all inside ``budget_s``:

1. the FlashAttention-3 Table 3 experiment (``reports.fa3_table``, a few seconds);
2. the cells: 65 % of what is left (all of it with --no-mutants), shared out cell by
   cell (what a cell does not use goes to the cells after it);
3. mutation testing (unless disabled): the rest, and no less than its planned 35 %,
   shared out mutant by mutant (a mutant killed early leaves its time to the next ones),
   controls last.

With ``jobs`` above 1 the cells, then the mutants, run that many at a time on worker
processes (``reports.cell_pool``, which says how the shares are set); the phases and their
deadlines are the same.

A budget is checked between examples, and one example can take seconds (an oracle
row recomputed in mpmath), so the wall time can exceed the budget.  Three overruns come on
top of it by design: a violation's shrink; on a GPU, each cell's first example (compiles
and autotuning, ``verify.search``); and a job past its share moves its phase's end back
(``reports.cell_pool``, at most half the phase), so that neither starves the work after it.
The report gives the time each phase and each cell actually took.

Each cell is searched by ``verify.search.check_cell``.  Hypothesis keeps drawing
(and discarding) inputs after a cell's time is up until ``max_examples`` is reached,
which costs ~10 ms a draw, so a cell is run as a few consecutive Hypothesis runs
("chunks"): a short first run measures the cost of an example, the next ones are
sized to fill the time left.  Per-example figures the cell summary does not keep
(row length, input range, absolute error, special-value outcomes) are recorded by
observing ``verify.search.run_case`` while the cell runs.
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
import random
import shlex
import subprocess
import sys
import time
import zlib
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from kernels.registry import Target, all_targets, get_target
from reports.cell_pool import CellPool, Job, auto_jobs, torch_threads_per_job
from reports.cell_worker import InProcessCells, isolated_runners
from verify import artifacts, search
from verify.dtypes import STANDARD_DTYPES, get_format
from verify.search import CellResult, CheckOptions

#: Features whose examples are counted for the special-value contract table.
SPECIAL_FEATURES = ("mask:fully-masked-row", "special:nan", "special:+inf")
EXCLUDED_KINDS = ("mutant", "control")
FIRST_CHUNK = 12  # examples of a cell's first Hypothesis run, which measures the cost of an example
MUTATION_SHARE = 0.35  # fraction of the budget given to mutation testing
MUTANT_MAX_EXAMPLES = 300  # as ``python -m verify mutants``
CONTROL_SHARE = 0.15  # of the mutation slice, for the controls
MIN_MUTANT_DTYPE_S = 1.0
MIN_CELL_S = 0.5
DEFAULT_MAX_EXAMPLES = 10_000
DEFAULT_BUDGET_S = 480.0


class CampaignError(Exception):
    """What was asked cannot be run (unknown target, unavailable device...)."""


@dataclass
class CampaignOptions:
    device: str = "cpu"
    budget_s: float = DEFAULT_BUDGET_S
    targets: list[str] | None = None  # None: every non-mutant target available on the device
    dtypes: tuple[str, ...] | None = None
    seed: int = 0
    mutants: bool = True
    fa3: bool = True
    shrink: bool = True  # shrink each cell's violation to a minimal counterexample (not bounded by the budget)
    max_examples: int = DEFAULT_MAX_EXAMPLES
    report_dir: str = "reports/latest"
    artifact_dir: str = str(artifacts.DEFAULT_DIR)
    command_line: str = ""
    rerun_command: str = ""
    progress: str = "auto"  # auto | rich | plain | none
    isolation: str = "auto"  # auto (a worker process on CUDA or with jobs > 1) | process | none: see reports.cell_worker
    jobs: int | str = "auto"  # runners side by side (reports.cell_pool); auto: cell_pool.auto_jobs


# --------------------------------------------------------------------------------------
# per-example observation
# --------------------------------------------------------------------------------------


@dataclass
class ExampleRecord:
    length: int  # softmax row length / attention key length Nk
    input_range: float  # softmax: max-min of a row's finite logits; attention: 2|s| max|q_i| max|k_j|
    max_error: float  # ULP or u*cond
    max_ratio: float  # error / tolerance
    abs_max: float  # max |got - exact| over measured elements
    v_max: float  # attention: max finite |v| (0 for softmax)
    violated: bool


@dataclass
class CellObserver:
    """Collects what ``check_cell`` does not keep, example by example, up to the first violation."""

    op: str
    records: list[ExampleRecord] = field(default_factory=list)
    special: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {f: {"examples": 0, "passed": 0, "violation_kinds": Counter()}
                                 for f in SPECIAL_FEATURES})
    found: bool = False
    tick: Any = None  # called after every example (progress display)

    def __call__(self, case, opts: CheckOptions, out) -> None:
        if self.found:  # Hypothesis is shrinking: check_cell no longer records either
            return
        ev = out.evaluation
        violated = bool(ev.violations)
        for f in SPECIAL_FEATURES:
            if f in case.features:
                s = self.special[f]
                s["examples"] += 1
                if violated:
                    s["violation_kinds"][ev.violations[0].kind] += 1
                else:
                    s["passed"] += 1
        length, rng, vmax = _input_stats(case, self.op)
        self.records.append(ExampleRecord(length, rng, ev.max_error, ev.max_ratio, ev.abs_max, vmax, violated))
        self.found = violated
        if self.tick:
            self.tick()


def _finite_absmax(t: torch.Tensor) -> float:
    a = t.detach().to(torch.float64).abs()
    a = a[torch.isfinite(a)]
    return float(a.max()) if a.numel() else 0.0


def _input_stats(case, op: str) -> tuple[int, float, float]:
    built = case.build(device="cpu")
    if op == "softmax":
        x = built.detach().to(torch.float64)
        fin = torch.isfinite(x)
        hi = torch.where(fin, x, torch.full_like(x, -float("inf"))).amax(-1)
        lo = torch.where(fin, x, torch.full_like(x, float("inf"))).amin(-1)
        spread = (hi - lo)[fin.any(-1)]
        return int(x.shape[-1]), float(spread.max()) if spread.numel() else 0.0, 0.0

    def rownorm(t: torch.Tensor) -> float:
        t = t.detach().to(torch.float64)
        t = torch.where(torch.isfinite(t), t, torch.zeros_like(t))
        return float(torch.linalg.vector_norm(t, dim=-1).max()) if t.numel() else 0.0

    rng = 2 * abs(built.scale) * rownorm(built.q) * rownorm(built.k)
    return int(built.k.shape[-2]), rng, _finite_absmax(built.v)


def observing(observer: CellObserver):
    """Route every example of the cell through ``observer`` while it runs."""
    return search.observing_cases(after=observer)


# --------------------------------------------------------------------------------------
# one cell, in budget-sized chunks
# --------------------------------------------------------------------------------------


def merge_cells(a: CellResult, b: CellResult) -> CellResult:
    """Two consecutive searches of the same cell as one (b ran after a)."""
    if b.examples_to_first_failure is not None:
        a.examples_to_first_failure = a.examples + b.examples_to_first_failure
    if b.seconds_to_first_failure is not None:
        a.seconds_to_first_failure = a.seconds + b.seconds_to_first_failure
    # check_cell reports min_tolerance_seen 0 when it measured nothing: only measured ranges count
    measured_a, measured_b = a.max_tolerance_seen > 0, b.max_tolerance_seen > 0
    if measured_b:
        a.min_tolerance_seen = min(a.min_tolerance_seen, b.min_tolerance_seen) if measured_a else b.min_tolerance_seen
    for name in ("examples", "seconds", "target_seconds", "oracle_seconds", "flash_rule_over_2", "flushed",
                 "ill_conditioned", "negative_zeros", "fallback_rows", "lse_rows"):
        setattr(a, name, getattr(a, name) + getattr(b, name))
    for name in ("max_error", "max_tolerance_seen", "normwise_max", "flash_rule_max", "lse_max_error", "lse_max_ratio"):
        setattr(a, name, max(getattr(a, name), getattr(b, name)))
    if b.worst_artifact and b.max_ratio >= a.max_ratio:
        a.worst_case, a.worst_artifact = b.worst_case, b.worst_artifact
    a.max_ratio = max(a.max_ratio, b.max_ratio)
    a.features.update(b.features)
    a.samples.extend(b.samples)
    a.tolerance_samples.extend(b.tolerance_samples)
    a.cut_by_budget = b.cut_by_budget
    a.grid_probe = a.grid_probe or b.grid_probe  # only a cell's first chunk runs the probes
    a.wide_probe = a.wide_probe or b.wide_probe
    a.tiles_probe = a.tiles_probe or b.tiles_probe
    a.probe_round = a.probe_round or b.probe_round
    if b.status != "passed":
        a.status, a.reason, a.violation = b.status, b.reason, b.violation
        a.counterexample, a.artifact = b.counterexample, b.artifact
    return a


def chunk_seed(seed: int, target: str, dtype: str, chunk: int) -> int:
    return (seed * 1_000_003 + zlib.crc32(f"{target}/{dtype}/{chunk}".encode())) % (2**32)


@dataclass
class CellRun:
    cell: CellResult
    observer: CellObserver
    budget_s: float
    chunks: int
    stop_reason: str  # budget | violation | exhausted | max-examples | unsupported


def cell_is_live(target: Target, dtype: str, device: str) -> bool:
    """Whether the cell searches anything: the target declares the dtype and runs on the device."""
    return target.caps.supports_dtype(dtype) and target.unavailable_reason(device) is None


def run_cell(target: Target, dtype: str, base: CheckOptions, budget_s: float, seed: int,
             max_examples: int = DEFAULT_MAX_EXAMPLES, tick=None, observe: bool = True) -> CellRun:
    """Search one cell for ``budget_s`` seconds (or until a violation, or ``max_examples``)."""
    observer = CellObserver(target.op, tick=tick)
    if not cell_is_live(target, dtype, base.device):
        return CellRun(search.check_cell(target, dtype, base), observer, 0.0, 0, "unsupported")
    start = time.perf_counter()
    merged: CellResult | None = None
    # The first chunk holds the probe round (which a search of fewer than twice its examples
    # skips): with a chunk of FIRST_CHUNK, a cell of more than 6 probes, every attention cell,
    # never ran it.
    first = max(FIRST_CHUNK, 2 * search.probe_round_examples(target, dtype, base))
    planned, chunk, stop = min(first, max_examples), 0, "budget"
    warmup = 0.0  # the first chunk's first example, left out of the budget (CheckOptions.exempt_warmup)
    with observing(observer) if observe else nullcontext():
        while True:
            left = budget_s - (time.perf_counter() - start - warmup)
            # The probe round (search.probe_round) in the first chunk only: its first examples
            # are each probe's simplest, the same in every chunk.  Only the first chunk has a
            # warm-up to leave out: the later ones run on what it compiled.
            opts = replace(base, max_examples=planned, budget_s=max(left, 0.01),
                           seed=chunk_seed(seed, target.name, dtype, chunk),
                           probe_examples=base.probe_examples if chunk == 0 else 0,
                           exempt_warmup=base.exempt_warmup if chunk == 0 else False)
            part = search.check_cell(target, dtype, opts)
            if chunk == 0:
                warmup = part.warmup_seconds
            merged = part if merged is None else merge_cells(merged, part)
            chunk += 1
            if part.status != "passed":
                stop = "violation"
                break
            searched = time.perf_counter() - start - warmup
            left = budget_s - searched
            per_example = searched / max(merged.examples, 1)
            if part.cut_by_budget or left < max(per_example, 0.05):
                stop = "budget"
                break
            if part.examples < planned:  # Hypothesis ran out of distinct inputs
                stop = "exhausted"
                break
            if merged.examples >= max_examples:
                stop = "max-examples"
                break
            planned = max(1, min(max_examples - merged.examples, int(left / per_example)))
    merged.seconds = time.perf_counter() - start
    return CellRun(merged, observer, budget_s, chunk, stop)


# --------------------------------------------------------------------------------------
# progress display
# --------------------------------------------------------------------------------------


class _Progress:
    """One line per cell (plain) or a rich progress bar with ETA (on a terminal)."""

    def __init__(self, mode: str, budget_s: float, start: float):
        self.start, self.budget = start, budget_s
        self.mode = mode
        self.bar = None
        if mode == "rich":
            try:
                from rich.console import Console
                from rich.progress import (BarColumn, Progress, TaskProgressColumn, TextColumn,
                                           TimeElapsedColumn, TimeRemainingColumn)
            except ImportError:
                self.mode = "plain"
            else:
                self.console = Console()
                self.bar = Progress(TextColumn("{task.description:<34.34}"), BarColumn(), TaskProgressColumn(),
                                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                    console=self.console, transient=False)
                self.task = self.bar.add_task("starting", total=budget_s)
                self.bar.start()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def tick(self, description: str | None = None) -> None:
        if self.bar is not None:
            kw = {"description": description} if description else {}
            self.bar.update(self.task, completed=min(self.elapsed(), self.budget), **kw)

    def line(self, text: str) -> None:
        if self.mode == "none":
            return
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False)
            self.tick()
        else:
            print(text, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=self.budget)
            self.bar.stop()


# --------------------------------------------------------------------------------------
# the campaign
# --------------------------------------------------------------------------------------


@dataclass
class CampaignResult:
    options: CampaignOptions
    environment: dict[str, Any]
    targets: list[dict[str, Any]]
    runs: list[CellRun]
    dtypes: tuple[str, ...]
    mutation: dict[str, Any]
    fa3: dict[str, Any] | None
    timings: dict[str, float]


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.split(":")[0] not in ("cpu", "cuda"):
        raise CampaignError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise CampaignError("--device cuda was asked for, but torch sees no CUDA device here; use --device cpu")
    return device


def select_targets(names: list[str] | None, device: str) -> tuple[list[Target], list[dict[str, Any]]]:
    """The targets to run, and a row per registered (or named) target saying whether it runs and why not."""
    rows, chosen = [], []
    if names:
        for name in names:
            try:
                t = get_target(name)
            except KeyError as e:
                raise CampaignError(str(e).strip("'\"")) from None
            why = t.unavailable_reason(device)
            if why:
                raise CampaignError(f"target {name} cannot run on {device}: {why}")
            if t not in chosen:
                chosen.append(t)
        pool = chosen
    else:
        pool = [t for t in all_targets() if t.kind not in EXCLUDED_KINDS]
    for t in sorted(pool, key=lambda t: (t.op != "softmax", t.name)):
        why = t.unavailable_reason(device)
        if not names and why is None:
            chosen.append(t)
        rows.append({"name": t.name, "op": t.op, "kind": t.kind, "description": t.description,
                     "dtypes": list(t.caps.dtypes), "run": why is None, "reason": why})
    chosen.sort(key=lambda t: (t.op != "softmax", t.name))
    return chosen, rows


def campaign_dtypes(targets: list[Target], requested: tuple[str, ...] | None) -> tuple[str, ...]:
    if requested:
        return tuple(dict.fromkeys(get_format(d).name for d in requested))
    seen = {get_format(d).name for t in targets for d in t.caps.dtypes}
    return tuple(d for d in STANDARD_DTYPES if d in seen) + tuple(sorted(seen - set(STANDARD_DTYPES)))


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
        return getattr(mod, "__version__", None)
    except Exception:  # not installed, or broken: the report says null
        return None


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        idx = torch.device(device).index or 0
        return torch.cuda.get_device_name(idx)
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    return f"{name} ({os.cpu_count()} logical CPUs, {torch.get_num_threads()} torch threads)"


def _git() -> dict[str, Any]:
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=5).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True,
                                    timeout=5).stdout.strip()) if commit else None
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return {"git_commit": commit, "git_dirty": dirty}


def environment(opts: CampaignOptions) -> dict[str, Any]:
    import os

    return {
        "python": platform.python_version(), "torch": torch.__version__, "triton": _version("triton"),
        "numpy": _version("numpy"), "hypothesis": _version("hypothesis"), "mpmath": _version("mpmath"),
        "platform": platform.platform(), "device": opts.device, "device_name": _device_name(opts.device),
        "cuda": torch.version.cuda if opts.device.startswith("cuda") else None,
        "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
        "seed": opts.seed, "budget_s": opts.budget_s, "wall_s": None,
        "command_line": opts.command_line, "rerun_command": opts.rerun_command,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **_git(),
    }


def resolve_jobs(jobs: int | str, device: str, isolation: str = "auto") -> int:
    """The number of runners: ``auto`` as ``reports.cell_pool.auto_jobs`` (1 with ``isolation``
    none, which keeps cells in this process), else the whole number given; CampaignError for
    anything else, or for more than one job with ``isolation`` none."""
    if jobs == "auto":
        return 1 if isolation == "none" else auto_jobs(device)
    n = jobs if isinstance(jobs, int) and not isinstance(jobs, bool) else None
    if isinstance(jobs, str) and jobs.isdigit():
        n = int(jobs)
    if n is None or n < 1:
        raise CampaignError(f"--jobs must be 'auto' or a whole number of at least 1, got {jobs!r}")
    if n > 1 and isolation == "none":
        raise CampaignError(f"--jobs {n} searches cells side by side in worker processes, and --isolation none "
                            f"keeps every cell in this process: drop one of the two")
    return n


def _profile(device: str):
    return search.PROFILES["gpu" if device.startswith("cuda") else "cpu"]


def run_mutant(m, opts: CampaignOptions, per_dtype_s: float, runner=None):
    """``verify.mutation.run_one``, with each dtype searched by ``run_cell`` so the budget really bounds it."""
    from verify.mutation import KillResult

    target = get_target(m.name)
    is_control = m.bug_class == "control"
    why = target.unavailable_reason(opts.device)
    if why:
        return KillResult(m.name, m.op, m.bug_class, m.reference, m.form, "unavailable", violation=why), False
    base = CheckOptions(device=opts.device, max_examples=MUTANT_MAX_EXAMPLES, seed=opts.seed,
                        profile=_profile(opts.device), compare_naive=False, shrink=False,
                        artifact_dir=opts.artifact_dir)
    t0 = time.perf_counter()
    runs: list[CellRun] = []
    runner = runner or InProcessCells()
    for d in target.caps.dtypes:
        runs.append(runner.run(target, d, base, per_dtype_s, opts.seed, MUTANT_MAX_EXAMPLES, observe=False))
        if runs[-1].cell.status == "violated" and not is_control:
            break
    cells = [r.cell for r in runs]
    bad = next((c for c in cells if c.status == "violated"), None)
    failed = next((c for c in cells if c.status == "error"), None)
    status = ("control-failed" if bad else "control-passed") if is_control else ("killed" if bad else "survived")
    if failed is not None and bad is None:
        # the suite failed on it (a stalled worker, an exception of ours): no verdict either way
        return KillResult(m.name, m.op, m.bug_class, m.reference, m.form, "error", dtype=failed.dtype,
                          seconds=time.perf_counter() - t0, violation=failed.reason), False
    r = KillResult(m.name, m.op, m.bug_class, m.reference, m.form, status, seconds=time.perf_counter() - t0)
    if bad:
        r.dtype = bad.dtype
        r.examples = sum(c.examples for c in cells[:-1]) + (bad.examples_to_first_failure or bad.examples)
        r.seconds_to_kill = sum(c.seconds for c in cells[:-1]) + (bad.seconds_to_first_failure or bad.seconds)
        r.counterexample = bad.counterexample
        r.violation = bad.violation.one_line() if bad.violation else None
    # a survivor whose search stopped on time rather than after MUTANT_MAX_EXAMPLES examples per dtype
    budget_limited = not bad and any(run.stop_reason == "budget" for run in runs)
    r.examples = r.examples if bad else sum(c.examples for c in cells)
    return r, budget_limited


def mutation_floor_s(device: str, jobs: int) -> float:
    """The least time mutation testing takes on ``device`` over ``jobs`` runners, whatever its
    slice: each mutant available there gets ``MIN_MUTANT_DTYPE_S`` for its first dtype and each
    control that much for every dtype (``run_mutation``), and an example past its share still
    finishes (a mutant's can take seconds: an interpreted Triton kernel, an mpmath row)."""
    from kernels.mutants import all_mutants

    mutants, controls = all_mutants()
    live = [m for m in mutants + controls if get_target(m.name).unavailable_reason(device) is None]
    dtypes = sum(1 if m.bug_class != "control" else len(m.caps.dtypes) for m in live)
    return dtypes * MIN_MUTANT_DTYPE_S / max(jobs, 1)


def run_mutation(opts: CampaignOptions, slice_s: float, progress: _Progress, pool: CellPool | None = None
                 ) -> dict[str, Any]:
    """Every mutant, then the controls, within ``slice_s``, on ``pool``'s runners.

    Controls get CONTROL_SHARE of the slice (they show the absence of false alarms); the mutants
    share the rest (``reports.cell_pool``'s rule), so time a quickly killed mutant leaves goes to
    the ones after it.  A mutant is usually killed in its first dtype, so its whole share is each
    dtype's budget; a control's share is split over its dtypes.
    """
    from kernels.mutants import all_mutants
    from verify import mutation

    MUTANTS, CONTROLS = all_mutants()
    pool = pool or CellPool(1, isolated=False)
    start = time.perf_counter()
    rows: list[dict[str, Any] | None] = [None] * (len(MUTANTS) + len(CONTROLS))
    results: list[Any] = [None] * len(rows)

    def job(m, dtypes: int) -> Job:
        def run(runner, share: float):
            per_dtype = max(share / dtypes, MIN_MUTANT_DTYPE_S)
            progress.tick(f"mutation {m.name}")
            r, limited = run_mutant(m, opts, per_dtype, runner)
            d = r.to_dict()
            d["budget_per_dtype_s"] = round(per_dtype, 3)
            d["budget_limited"] = limited
            return r, d, per_dtype, limited
        return Job(run)

    def finished(offset: int):
        def done(i: int, out) -> None:
            r, d, per_dtype, limited = out
            results[offset + i], rows[offset + i] = r, d
            if r.seconds_to_kill is not None:
                kill = f"{r.examples} examples, {r.seconds_to_kill:.1f}s ({r.dtype})"
            elif r.examples is None:  # not run (unavailable here): the result's reason says why
                kill = r.violation or "not run"
            else:
                kill = (f"{r.examples} examples in {r.seconds:.1f}s ({per_dtype:.1f}s per dtype"
                        + (", stopped by the budget)" if limited else ")"))
            progress.line(f"  mutant {r.name:<32} {r.status.upper():<14} {kill}")
        return done

    pool.run([job(m, 1) for m in MUTANTS], start + slice_s * (1 - CONTROL_SHARE), MIN_MUTANT_DTYPE_S, finished(0))
    # what is left of the slice, and at least CONTROL_SHARE of it, for the controls
    controls_end = max(start + slice_s, time.perf_counter() + slice_s * CONTROL_SHARE)
    pool.run([job(m, len(m.caps.dtypes)) for m in CONTROLS], controls_end, MIN_MUTANT_DTYPE_S,
             finished(len(MUTANTS)))
    return {"enabled": True, "reason": None, "budget_s": round(slice_s, 3),
            "seconds": round(time.perf_counter() - start, 3), "max_examples_per_dtype": MUTANT_MAX_EXAMPLES,
            "jobs": pool.jobs, "summary": mutation.summary(results), "results": rows}


def run_campaign(opts: CampaignOptions) -> CampaignResult:
    t_start = time.perf_counter()
    opts.device = resolve_device(opts.device)
    targets, target_rows = select_targets(opts.targets, opts.device)
    if not targets:
        raise CampaignError(f"no target can run on {opts.device}")
    dtypes = campaign_dtypes(targets, opts.dtypes)
    if not any(cell_is_live(t, d, opts.device) for t in targets for d in dtypes):
        raise CampaignError(f"none of the {len(targets)} target(s) runs {', '.join(dtypes)} on {opts.device}: "
                            "nothing to search; pick --dtypes (and --targets) from what `python -m verify targets` "
                            "lists")
    env = environment(opts)
    mode = opts.progress
    if mode == "auto":
        mode = "rich" if sys.stdout.isatty() else "plain"
    progress = _Progress(mode, opts.budget_s, t_start)
    progress.line(f"flashverify run on {opts.device} ({env['device_name']}): {len(targets)} target(s), "
                  f"dtypes {', '.join(dtypes)}, budget {opts.budget_s:g} s, seed {opts.seed}")
    timings: dict[str, float] = {}
    jobs = resolve_jobs(opts.jobs, opts.device, opts.isolation)
    env["jobs"] = jobs
    pool = CellPool(jobs, isolated_runners(opts.isolation, opts.device, jobs),
                    torch_threads_per_job(jobs) if jobs > 1 else None)
    try:
        fa3 = None
        if opts.fa3:
            from reports import fa3_table

            progress.tick("FA3 Table 3 experiment")
            t0 = time.perf_counter()
            fa3 = fa3_table.run(targets, opts.device, seed=opts.seed)
            timings["fa3_s"] = time.perf_counter() - t0
            progress.line(f"FA3 Table 3 experiment: {len(fa3['rows'])} rows in {timings['fa3_s']:.1f}s")
        # the cells get their part of what is left, mutation testing the rest; each phase shares out
        # its own part, so a slow example in one phase does not starve the other
        left = max(opts.budget_s - (time.perf_counter() - t_start), 0.0)
        planned_slice = MUTATION_SHARE * left if opts.mutants else 0.0
        cells_budget = left - planned_slice
        floor = mutation_floor_s(opts.device, jobs) if opts.mutants else 0.0
        if floor > planned_slice:
            # Said before the work starts: the run will take longer than asked, by at least this.
            progress.line(f"note: mutation testing takes at least {floor:.0f}s here ({MIN_MUTANT_DTYPE_S:g}s a mutant "
                          f"and a control dtype, over {jobs} job(s)), and the budget plans {planned_slice:.0f}s for "
                          f"it: expect the run to end {floor - planned_slice:.0f}s or more past the budget; a "
                          f"--budget of {math.ceil(floor / MUTATION_SHARE)}s or more keeps to it, --no-mutants "
                          "skips mutation testing")

        base = CheckOptions(device=opts.device, max_examples=opts.max_examples, seed=opts.seed,
                            profile=_profile(opts.device), artifact_dir=opts.artifact_dir, shrink=opts.shrink)
        plan = [(t, d) for t in targets for d in dtypes]
        live = [(t, d) for t, d in plan if t.caps.supports_dtype(d)]
        progress.line(f"cells: {len(live)} to search ({len(plan) - len(live)} unsupported) in {cells_budget:.0f}s")
        t_cells = time.perf_counter()

        def cell_job(i: int, t: Target, d: str) -> Job:
            label = f"[{i + 1}/{len(plan)}] {t.name} {d}"

            def run(runner, share: float) -> CellRun:
                progress.tick(label)
                return runner.run(t, d, base, share, opts.seed, opts.max_examples,
                                  tick=(lambda: progress.tick(label)))
            return Job(run, weight=int(t.caps.supports_dtype(d)))

        def cell_done(i: int, run: CellRun) -> None:
            t, d = plan[i]
            progress.line(_cell_line(f"[{i + 1}/{len(plan)}] {t.name} {d}", run))

        runs: list[CellRun] = pool.run([cell_job(i, t, d) for i, (t, d) in enumerate(plan)],
                                       t_cells + cells_budget, MIN_CELL_S, cell_done)
        timings["cells_s"] = time.perf_counter() - t_cells

        if opts.mutants:
            # its planned time at least: the cells' overruns come on top of the budget (cell_pool)
            slice_s = max(opts.budget_s - (time.perf_counter() - t_start), planned_slice)
            progress.line(f"mutation testing: {slice_s:.0f}s shared by the mutants and controls")
            t0 = time.perf_counter()
            mutation = run_mutation(opts, slice_s, progress, pool)
            mutation["floor_s"] = round(floor, 3)
            timings["mutants_s"] = time.perf_counter() - t0
        else:
            mutation = {"enabled": False, "reason": "--no-mutants", "budget_s": 0.0, "seconds": 0.0,
                        "max_examples_per_dtype": None, "summary": None, "results": []}
    finally:
        pool.close()
        progress.close()
    timings["wall_s"] = time.perf_counter() - t_start
    env["wall_s"] = round(timings["wall_s"], 3)
    return CampaignResult(opts, env, target_rows, runs, dtypes, mutation, fa3, timings)


def _cell_line(label: str, run: CellRun) -> str:
    from reports.check_report import cell_line

    c = run.cell
    text = f"{label:<44}{cell_line(c).strip()}"
    if c.status != "unsupported":
        text += f", stop: {run.stop_reason}"
    if c.status == "violated" and c.violation is not None:
        text += f"\n    VIOLATION {c.violation.one_line()}"
        if c.artifact:
            text += f"\n    replay: {artifacts.replay_command(c.artifact)}"
    return text


def new_seed() -> int:
    return random.SystemRandom().randrange(2**31)


def quote_command(argv: list[str]) -> str:
    return "python -m verify " + shlex.join(argv)
