"""Nightly fuzzing: ``python -m verify fuzz --hours H``.

Two engines share one wall-clock budget:

* ``inprocess`` (always available, writes the report): every target runs in its own
  child process (multiprocessing, spawn), looping ``verify.search.check_cell`` in short
  rounds, dtype by dtype, until the deadline; ``--workers`` children run at once.  A child
  that crashes (segfault, CUDA illegal address, abort) is reported as ``crashed`` with its
  exit code; what it found before the crash is kept (each round is checkpointed to disk).
  On cuda each child is pinned to one GPU (``CUDA_VISIBLE_DEVICES``, set before it imports
  torch): the GPU with the fewest running children, lowest index first.
* ``pytest`` (needs pytest-xdist): sessions of ``pytest tests/fuzz -m nightly -p xdist -n N
  --hypothesis-profile nightly``, back to back until the deadline.  On cuda the GPU list
  goes to the session as ``FLASHVERIFY_FUZZ_GPUS`` and xdist worker ``gwK`` pins itself to
  entry ``K mod len`` of it (the root ``conftest.py``, before torch touches CUDA).  Each
  session gives every property a wall-clock budget (its share of the time left;
  ``tests/fuzz/conftest.py`` stops its generation cleanly when spent), so every property
  reports within the run; a session still running at the deadline is interrupted
  (SIGINT).  Output:
  ``DIR/pytest.log``, ``DIR/pytest-junit-K.xml`` per session and one JSON line per
  property run in ``DIR/pytest-properties.jsonl``, folded into ``fuzz.json``.

``--engine auto`` (default) runs both when pytest-xdist is importable, else ``inprocess``.

GPUs (``--device cuda``): ``--gpus all`` (default) or a comma list of indices as torch
numbers them (``0,2``; with ``CUDA_VISIBLE_DEVICES`` set, indices into that list, mapped
to its entries); ``--device cuda:K`` means ``--gpus K``.  ``--workers`` defaults to the
number of GPUs (1 on cpu); more workers than GPUs share them.  ``--gpus`` with
``--device cpu``, an unknown index or a malformed list is a usage error (exit 2).

Outputs in ``--report DIR``: ``report.json`` (``reports.check_report`` schema, one cell
per target x dtype of the in-process engine, merged over all rounds and children),
``fuzz.json`` (per target status / exit code / the GPU its child ran on, worst case per
target x dtype with its (elapsed_s, max_ratio) checkpoints, feature coverage counts
including never-hit features, new corpus files, and ``throughput``: examples of both
engines, wall seconds, examples/s and examples per GPU), ``summary.md``.

Every new counterexample is written to the regression corpus (``tests/corpus`` by
default; ``--corpus DIR`` or ``$FLASHVERIFY_CORPUS`` elsewhere) as JSON: the case spec,
the target, the dtype and the violation's one-liner.  ``tests/test_fuzz.py`` replays
every corpus file in plain CI.

Exit codes: 0 nothing found; 1 a violation or a crashed target; 2 bad arguments
(including a ``redis://`` database without the ``redis`` package, and bad ``--gpus``).
SIGINT/SIGTERM stop the run gracefully: children are asked to stop, what was found so far
is kept and the report is still written.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from verify.output_paths import OutputPathError, directory_for_writing

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT / "tests" / "corpus"
CORPUS_FORMAT = "flashverify-corpus/1"
FUZZ_SCHEMA = "flashverify-fuzz/1"
ROUND_EXAMPLES = 50  # examples per check_cell round (a checkpoint after each)
MAX_SAMPLES = 20_000  # sampled errors kept per merged cell
# pytest engine: seconds a session spends outside the properties' budgets (xdist worker
# start, torch/triton imports, collection, each property's last example overrunning its
# budget): 18 s and 25 s in two runs over the 39-40 CPU properties on the 2-core machine
# (2026-11-29).  Properties get PYTEST_BUDGET_SHARE of the rest; a new session starts only
# when PYTEST_MIN_SESSION_S are left.
PYTEST_SESSION_OVERHEAD_S = 25.0
PYTEST_BUDGET_SHARE = 0.85
PYTEST_MIN_SESSION_S = 30.0
PYTEST_MIN_PROPERTY_S = 2.0
# the pytest engine's GPU list (ids for CUDA_VISIBLE_DEVICES, comma-separated), read by each xdist worker
GPUS_ENV = "FLASHVERIFY_FUZZ_GPUS"
NO_GPU = "cpu"  # the examples-per-GPU key of work that ran pinned to no GPU


class FuzzUsageError(Exception):
    """Bad arguments, found before any fuzzing ran (exit 2)."""


# --------------------------------------------------------------------------- corpus


def corpus_dir(explicit: str | None = None) -> Path:
    return Path(explicit or os.environ.get("FLASHVERIFY_CORPUS") or DEFAULT_CORPUS)


def corpus_entry(target: str, spec: dict[str, Any], violation: str, description: str = "",
                 dtype: str | None = None, expect: str | None = None) -> dict[str, Any]:
    return {
        "format": CORPUS_FORMAT, "target": target, "op": spec.get("op"), "dtype": dtype or spec.get("dtype"),
        "spec": spec, "violation": violation, "description": description,
        # what replaying must give: a correct target must pass it; a mutant must still be caught
        "expect": expect or "pass",
        "found": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def write_corpus_entry(entry: dict[str, Any], directory: Path) -> Path | None:
    """Write ``entry``; returns the path, or None when the same (target, spec) is already there."""
    directory.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1(json.dumps([entry["target"], entry["spec"]], sort_keys=True).encode()).hexdigest()[:12]
    slug = "".join(c if c.isalnum() or c in "._-" else "_" for c in entry["target"])
    path = directory / f"{slug}-{digest}.json"
    if path.exists():
        return None
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(entry, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)
    return path


def load_corpus(directory: Path | None = None) -> list[tuple[Path, dict[str, Any]]]:
    directory = corpus_dir() if directory is None else Path(directory)
    return [(p, json.loads(p.read_text())) for p in sorted(directory.glob("*.json"))]


def replay_entry(entry: dict[str, Any], target_name: str | None = None, device: str = "cpu"):
    """Re-run a corpus entry's case on ``target_name`` (default: the entry's target); the engine outcome."""
    import strategies
    from kernels.registry import get_target
    from verify.search import CheckOptions, run_case

    target = get_target(target_name or entry["target"])
    case = strategies.case_from_dict(entry["spec"])
    return run_case(target, case, CheckOptions(device=device, compare_naive=False, timeout=60.0)), case


# --------------------------------------------------------------------------- targets


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count()


def fuzzable_targets(device: str, names: list[str] | None = None, op: str | None = None) -> list:
    """Named targets (mutants allowed when named), else every non-mutant target available on ``device``."""
    from kernels.registry import all_targets

    if names:
        from verify.loader import TargetLoadError, load_target

        out = []
        for n in names:
            try:
                if op is None and ":" in n and not (len(n) > 1 and n[1] == ":"):
                    raise FuzzUsageError(f"target {n!r} is not registered: add --op softmax|attention")
                if op is None:
                    from kernels.registry import get_target

                    t = get_target(n)
                else:
                    t = load_target(n, op)
            except (KeyError, TargetLoadError) as e:
                raise FuzzUsageError(f"cannot load target {n!r}: {e}") from None
            why = t.unavailable_reason(device)
            if why:
                raise FuzzUsageError(f"target {t.name} cannot run here: {why}")
            out.append(t)
        return out
    return [t for t in all_targets(op) if t.kind != "mutant" and t.unavailable_reason(device) is None]


# --------------------------------------------------------------------------- GPUs


def resolve_gpus(spec: str | None, device: str, count: int, visible: str | None) -> list[str]:
    """The GPUs a run may use, as ``CUDA_VISIBLE_DEVICES`` entries, one per GPU, in torch's index order.

    ``spec`` is ``--gpus``: None or ``"all"`` (every GPU), or a comma list of distinct indices
    as torch numbers them (``"0,2"``).  ``device`` is the resolved ``--device`` (``cpu``,
    ``cuda`` or ``cuda:K``, which means ``--gpus K``); ``count`` is
    ``torch.cuda.device_count()``; ``visible`` is ``$CUDA_VISIBLE_DEVICES``: when set,
    index i maps to its i-th entry (a child that sets ``CUDA_VISIBLE_DEVICES`` to it gets
    that very GPU), else to ``str(i)``.  On cpu: ``[]``, and an explicit ``spec`` is an
    error.  Raises FuzzUsageError saying what was wrong and what to do.
    """
    if device.partition(":")[0] == "cpu":
        if spec is not None:
            raise FuzzUsageError(f"--gpus {spec} needs --device cuda, but this run is on cpu; "
                                 "leave --gpus out, or run with --device cuda on a machine with a GPU")
        return []
    base, _, index = device.partition(":")
    if base != "cuda" or (index and not (index.isascii() and index.isdigit())):
        raise FuzzUsageError(f"--device must be auto, cpu, cuda or cuda:K, got {device!r}")
    if index:
        if spec is not None:
            raise FuzzUsageError(f"--device {device} and --gpus {spec} both choose GPUs; "
                                 f"give --device cuda --gpus LIST (or --device {device} alone)")
        spec = index
    if count < 1:
        raise FuzzUsageError(f"--device {device} was asked for, but torch sees no CUDA device here; use --device cpu")
    if spec is None or spec.strip() == "all":
        indices = list(range(count))
    else:
        parts = [p.strip() for p in spec.split(",")]
        if not all(p.isascii() and p.isdigit() for p in parts):
            raise FuzzUsageError(f"--gpus {spec!r} is neither 'all' nor a comma-separated list of GPU indices "
                                 "such as 0 or 0,1")
        indices = [int(p) for p in parts]
        twice = sorted({i for i in indices if indices.count(i) > 1})
        if twice:
            raise FuzzUsageError(f"--gpus {spec}: GPU {twice[0]} is listed more than once; list each GPU once "
                                 "(to run several workers on one GPU, raise --workers instead)")
        missing = [i for i in indices if i >= count]
        if missing:
            given = f"--device {device}" if index else f"--gpus {spec}"
            seen = f" (the entries of CUDA_VISIBLE_DEVICES={visible})" if visible else ""
            raise FuzzUsageError(f"{given}: there is no GPU {missing[0]}; torch sees {count} GPU(s){seen}, "
                                 f"indices 0..{count - 1}: pick from those or use --gpus all")
    if not visible:
        return [str(i) for i in indices]
    entries = [e.strip() for e in visible.split(",")]
    if len(entries) < count:
        raise FuzzUsageError(f"CUDA_VISIBLE_DEVICES={visible} lists {len(entries)} device(s) but torch sees {count}; "
                             "fix CUDA_VISIBLE_DEVICES (or unset it)")
    return [entries[i] for i in indices]


def pick_gpu(gpus: list[str], running: list[str]) -> str:
    """The GPU of ``gpus`` with the fewest entries in ``running`` (the GPUs of the children
    running now); on a tie, the one listed first (lowest index).  ``gpus`` must not be empty."""
    return min(gpus, key=lambda g: (running.count(g), gpus.index(g)))


def xdist_worker_gpu(worker: str | None, gpus: str | None) -> str | None:
    """The GPU an xdist worker pins itself to: entry ``K mod len`` of ``gpus`` (the comma list
    in ``$FLASHVERIFY_FUZZ_GPUS``) for worker ``gwK`` (``$PYTEST_XDIST_WORKER``).  None (leave
    ``CUDA_VISIBLE_DEVICES`` alone) when ``gpus`` is unset or empty, or outside an xdist
    worker (the controller, or no xdist)."""
    ids = [g.strip() for g in (gpus or "").split(",") if g.strip()]
    if not ids or not worker or not worker.startswith("gw") or not worker[2:].isdigit():
        return None
    return ids[int(worker[2:]) % len(ids)]


def _pin_gpu(gpu: str | None) -> None:
    """Make ``gpu`` (a CUDA_VISIBLE_DEVICES entry) this process's only GPU; None leaves it alone.

    CUDA reads the variable once, when it first initialises, so this must run before
    anything in the process touches CUDA (``torch.cuda.is_available()`` does)."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu


def _gpu_info(gpu: str | None, device: str) -> dict[str, Any] | None:
    """The GPU a child pinned to ``gpu`` runs on (None when not pinned): the id is read back from
    ``CUDA_VISIBLE_DEVICES`` (what CUDA in this process was given), the name on cuda only."""
    if gpu is None:
        return None
    name = None
    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name(0)
    return {"id": os.environ.get("CUDA_VISIBLE_DEVICES"), "name": name}


# --------------------------------------------------------------------------- cell merging


def merge_cell(acc, new):
    """Fold one round's CellResult into the accumulated one (same target x dtype)."""
    if acc is None:
        return new
    if new.status == "unsupported":
        return acc
    for f in ("examples", "seconds", "target_seconds", "oracle_seconds", "flash_rule_over_2", "flushed",
              "ill_conditioned", "uncertified_rows", "negative_zeros", "fallback_rows", "lse_rows"):
        setattr(acc, f, getattr(acc, f) + getattr(new, f))
    for f in ("max_error", "max_tolerance_seen", "normwise_max", "flash_rule_max", "lse_max_error", "lse_max_ratio"):
        setattr(acc, f, max(getattr(acc, f), getattr(new, f)))
    if new.examples:
        acc.min_tolerance_seen = (new.min_tolerance_seen if acc.min_tolerance_seen == 0
                                  else min(acc.min_tolerance_seen, new.min_tolerance_seen or acc.min_tolerance_seen))
    if new.max_ratio > acc.max_ratio or (acc.worst_case is None and new.worst_case):
        acc.worst_case, acc.worst_artifact = new.worst_case, new.worst_artifact
    acc.max_ratio = max(acc.max_ratio, new.max_ratio)
    acc.features.update(new.features)
    room = MAX_SAMPLES - len(acc.samples)
    if room > 0:
        acc.samples.extend(new.samples[:room])
        acc.tolerance_samples.extend(new.tolerance_samples[:room])
    acc.cut_by_budget = acc.cut_by_budget or new.cut_by_budget
    if new.status in ("violated", "error") and acc.status == "passed":
        acc.status, acc.reason, acc.violation = new.status, new.reason, new.violation
        acc.counterexample, acc.artifact = new.counterexample, new.artifact
    return acc


# --------------------------------------------------------------------------- the child process


def _child_main(target_name: str, op: str | None, device: str, dtypes: list[str] | None, deadline: float,
                t0: float, state_path: str, corpus: str, database: str | None, artifact_dir: str,
                shrink: bool, seed: int | None, gpu: str | None) -> None:
    """Fuzz one target until ``deadline`` (time.time()), checkpointing to ``state_path`` each round.

    First of all the child pins itself to ``gpu`` (a CUDA_VISIBLE_DEVICES entry; None: no
    pinning, as on cpu), before torch is imported: a spawned child has imported only this
    stdlib-only module so far.  The state records the GPU (``"gpu"``, see ``_gpu_info``).
    """
    _pin_gpu(gpu)
    import warnings

    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\..*")
    from verify.search import PROFILES, CheckOptions, check_cell

    stop = {"now": False}
    current: dict[str, Any] = {"opts": None}

    def on_signal(signum, frame):  # finish the example in flight, then return from check_cell
        stop["now"] = True
        if current["opts"] is not None:
            current["opts"].budget_s = 0.0

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    target = fuzzable_targets(device, [target_name], op)[0]
    db = open_database(database)
    profile = PROFILES["gpu" if device.startswith("cuda") else "cpu"]
    wanted = [d for d in (dtypes or target.caps.dtypes)]
    from verify.dtypes import get_format

    cells: dict[str, Any] = {}
    checkpoints: dict[str, list] = {}
    corpus_added: list[str] = []
    done: set[str] = set()
    rounds = 0
    gpu_info = _gpu_info(gpu, device)

    def save_state(finished: bool) -> None:
        state = {"cells": cells, "checkpoints": checkpoints, "corpus_added": corpus_added, "rounds": rounds,
                 "finished": finished, "stopped": stop["now"], "gpu": gpu_info}
        tmp = state_path + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(state, f)
        os.replace(tmp, state_path)

    save_state(False)
    while not stop["now"] and time.time() < deadline:
        live = [d for d in wanted if d not in done]
        if not live:
            break
        for d in live:
            remaining = deadline - time.time()
            if stop["now"] or remaining <= 0:
                break
            name = get_format(d).name
            opts = CheckOptions(dtypes=(name,), device=device, max_examples=ROUND_EXAMPLES,
                                seed=None if seed is None else seed + rounds, artifact_dir=artifact_dir,
                                profile=profile, budget_s=min(remaining, max(5.0, remaining / len(live))), database=db, shrink=shrink,
                                compare_naive=True, timeout=120.0,
                                # the probe round (search.probe_round) once a dtype: its examples repeat
                                probe_examples=0 if name in cells else CheckOptions.probe_examples)
            current["opts"] = opts
            cell = check_cell(target, name, opts)
            current["opts"] = None
            cells[name] = merge_cell(cells.get(name), cell)
            acc = cells[name]
            checkpoints.setdefault(name, []).append(
                [round(time.time() - t0, 3), acc.max_ratio, acc.examples])
            if cell.status != "passed":
                done.add(d)  # found (or unsupported): later rounds would only find it again
            if cell.status == "violated":
                spec = cell_spec(cell)
                if spec is not None:
                    entry = corpus_entry(target.name, spec, cell.violation.one_line(), cell.counterexample or "",
                                         dtype=name, expect="violation" if target.kind == "mutant" else "pass")
                    p = write_corpus_entry(entry, Path(corpus))
                    if p is not None:
                        corpus_added.append(str(p))
            rounds += 1
            save_state(False)
            if cell.violation is not None and cell.violation.kind == "hang":
                save_state(True)
                os._exit(0)  # the hung target thread cannot be joined
    save_state(True)


def cell_spec(cell) -> dict[str, Any] | None:
    """The case spec of a cell's shrunk counterexample, read back from its artifact's JSON."""
    if not cell.artifact:
        return None
    try:
        return json.loads(Path(cell.artifact).with_suffix(".json").read_text()).get("spec")
    except (OSError, ValueError):
        return None


def open_database(spec: str | None):
    if not spec:
        return None
    if spec.startswith(("redis://", "rediss://")):
        from hypothesis.extra.redis import RedisExampleDatabase
        import redis

        return RedisExampleDatabase(redis.Redis.from_url(spec))
    from hypothesis.database import DirectoryBasedExampleDatabase

    return DirectoryBasedExampleDatabase(spec)


def check_database(spec: str) -> None:
    if spec.startswith(("redis://", "rediss://")):
        try:
            import redis  # noqa: F401
            from hypothesis.extra.redis import RedisExampleDatabase  # noqa: F401
        except ImportError:
            raise FuzzUsageError(
                f"--database {spec} is a Redis URL, but the `redis` package is not installed. "
                "Install it (pip install redis) or pass a directory path instead.") from None


# --------------------------------------------------------------------------- the parent


def xdist_available() -> bool:
    try:
        import xdist  # noqa: F401

        return True
    except ImportError:
        return False


class _Stop:
    def __init__(self) -> None:
        self.requested = False
        self.signal: int | None = None

    def __call__(self, signum, frame) -> None:
        self.requested = True
        self.signal = signum


def run_fuzz(*, hours: float, device: str = "auto", targets: list[str] | None = None, op: str | None = None,
             dtypes: list[str] | None = None, report: str = "fuzz-report", database: str | None = None,
             workers: int | None = None, gpus: str | None = None, engine: str = "auto", corpus: str | None = None,
             shrink: bool = True, seed: int | None = None, grace_s: float = 60.0, log=print) -> int:
    """Fuzz until ``hours`` have passed (or SIGINT/SIGTERM), write the reports; the exit code.

    ``gpus`` is ``--gpus`` (see ``resolve_gpus``); ``workers`` None means one per GPU (1 on cpu).
    Raises FuzzUsageError on bad arguments, before anything runs.
    """
    import multiprocessing as mp

    if not (math.isfinite(hours) and hours > 0):
        raise FuzzUsageError(f"--hours must be a positive number, got {hours}")
    try:
        directory_for_writing(report, "--report")
    except OutputPathError as e:
        raise FuzzUsageError(str(e)) from None
    if workers is not None and workers < 1:
        raise FuzzUsageError(f"--workers must be at least 1, got {workers}")
    if device == "auto":
        device = default_device()
    gpu_ids = resolve_gpus(gpus, device, _cuda_device_count() if device.startswith("cuda") else 0,
                           os.environ.get("CUDA_VISIBLE_DEVICES"))
    if gpu_ids:
        device = "cuda"  # each child and xdist worker sees only its own GPU, as cuda:0
    if workers is None:
        workers = max(1, len(gpu_ids))
    database = database or os.environ.get("FLASHVERIFY_DB") or str(ROOT / ".hypothesis" / "examples")
    check_database(database)
    if dtypes:
        from verify.dtypes import get_format

        try:
            dtypes = [get_format(d).name for d in dtypes]
        except ValueError as e:
            raise FuzzUsageError(str(e)) from None
    chosen = fuzzable_targets(device, targets, op)
    if not chosen:
        raise FuzzUsageError(f"no target to fuzz on {device}")
    if engine == "auto":
        engine = "both" if xdist_available() else "inprocess"
    if engine in ("pytest", "both") and not xdist_available():
        raise FuzzUsageError(f"--engine {engine} needs pytest-xdist (pip install pytest-xdist)")

    out = Path(report)
    out.mkdir(parents=True, exist_ok=True)
    state_dir = out / "state"
    state_dir.mkdir(exist_ok=True)
    corpus_path = corpus_dir(corpus)
    corpus_before = set(corpus_path.glob("*.json"))
    t0 = time.time()
    deadline = t0 + hours * 3600.0
    stop = _Stop()
    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    on_gpus = f", GPUs {','.join(gpu_ids)}" if gpu_ids else ""
    log(f"fuzzing {len(chosen)} target(s) on {device} for {hours * 3600:.0f} s "
        f"(engine {engine}, {workers} worker(s){on_gpus}); report -> {out}")

    pyeng = None
    if engine in ("pytest", "both"):
        pyeng = _PytestEngine(out, chosen, device, database, corpus_path, workers, gpu_ids, bool(targets), dtypes,
                              deadline, log)
        pyeng.poll(stop)

    ctx = mp.get_context("spawn")
    queue = list(chosen) if engine in ("inprocess", "both") else []
    running: dict[str, tuple[Any, Path, float, str | None]] = {}
    results: dict[str, dict[str, Any]] = {}
    try:
        while queue or running:
            if stop.requested:
                queue_left, queue = queue, []
                for t in queue_left:
                    results[t.name] = {"status": "not-run", "exit_code": None, "state": None}
            while queue and len(running) < workers and not stop.requested:
                t = queue.pop(0)
                sp = state_dir / f"{''.join(c if c.isalnum() else '_' for c in t.name)}.pkl"
                # later targets get an even share of the time that is left
                share = (deadline - time.time()) * min(workers, len(queue) + 1 + len(running)) / (
                    len(queue) + 1 + len(running))
                gpu = pick_gpu(gpu_ids, [g for *_, g in running.values()]) if gpu_ids else None
                p = ctx.Process(target=_child_main, name=f"fuzz-{t.name}", args=(
                    t.name, op, device, dtypes, min(deadline, time.time() + share), t0, str(sp), str(corpus_path),
                    database, str(out / "artifacts"), shrink, seed, gpu))
                p.start()
                running[t.name] = (p, sp, time.time(), gpu)
                log(f"  started {t.name} (pid {p.pid}" + ("" if gpu is None else f", GPU {gpu}") + ")")
            time.sleep(0.2)
            if pyeng is not None:
                pyeng.poll(stop)
            for name, (p, sp, started, _gpu) in list(running.items()):
                if stop.requested and not getattr(p, "_fv_signalled", False):
                    p._fv_signalled = time.time()  # type: ignore[attr-defined]
                    if p.is_alive():
                        os.kill(p.pid, signal.SIGTERM)
                late = time.time() > deadline + grace_s or (
                    getattr(p, "_fv_signalled", False) and time.time() > p._fv_signalled + grace_s)
                if p.is_alive() and late:
                    p.kill()
                    p.join(5)
                    results[name] = _collect(sp, "killed", p.exitcode)
                    running.pop(name)
                    log(f"  {name}: killed after the grace period")
                elif not p.is_alive():
                    p.join()
                    results[name] = _collect(sp, None, p.exitcode)
                    running.pop(name)
                    log(f"  {name}: {results[name]['status']} (exit code {p.exitcode})")
        if pyeng is not None:
            pyeng.finish(grace_s, stop)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    pytest_info = pyeng.info() if pyeng is not None else {"ran": False}
    if pyeng is not None:  # counterexamples the properties wrote (tests/fuzz/conftest.py)
        pytest_info["corpus_added"] = sorted(str(p) for p in set(corpus_path.glob("*.json")) - corpus_before)
    return _write_reports(out, chosen, results, pytest_info, t0, dict(
        hours=hours, device=device, targets=[t.name for t in chosen], dtypes=dtypes, database=database,
        workers=workers, gpus=gpu_ids, engine=engine, corpus=str(corpus_path), shrink=shrink, seed=seed,
        interrupted=stop.requested), stop, log)


def _collect(state_path: Path, forced: str | None, exit_code: int | None) -> dict[str, Any]:
    state = None
    try:
        with open(state_path, "rb") as f:
            state = pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError):
        pass
    if forced:
        status = forced
    elif exit_code != 0:
        status = "crashed"
    elif state and state.get("stopped"):
        status = "stopped"
    else:
        status = "finished"
    if state and any(c.status == "violated" for c in state["cells"].values()):
        status = "violated" if status in ("finished", "stopped") else status
    return {"status": status, "exit_code": exit_code, "state": state}


class _PytestEngine:
    """``pytest tests/fuzz`` sessions, back to back, until the deadline.

    Each session gets ``FLASHVERIFY_FUZZ_PROPERTY_BUDGET_S``: the time left, minus the
    session's own overhead, shared over the properties (times the xdist workers), so all
    of them run and report in it; a property that reaches ``max_examples`` first ends
    sooner, and the time left goes to the next session (a 6 h run keeps fuzzing).  The
    session in flight at the deadline (or on SIGINT/SIGTERM) is interrupted with SIGINT.
    With ``gpus`` (cuda), the session gets them in ``FLASHVERIFY_FUZZ_GPUS``, one per xdist worker
    in turn.
    """

    def __init__(self, out: Path, chosen, device: str, database: str, corpus_path: Path, workers: int,
                 gpus: list[str], named: bool, dtypes: list[str] | None, deadline: float, log) -> None:
        from verify.dtypes import get_format

        self.out, self.workers, self.deadline, self.log = out, workers, deadline, log
        self.results_path = out / "pytest-properties.jsonl"
        self.results_path.unlink(missing_ok=True)
        self.n_properties = sum(
            1 for t in chosen for d in t.caps.dtypes if not dtypes or get_format(d).name in dtypes)
        self.env = dict(os.environ, FLASHVERIFY_DB=database, FLASHVERIFY_CORPUS=str(corpus_path),
                        FLASHVERIFY_FUZZ_DEVICE=device, FLASHVERIFY_FUZZ_RESULTS=str(self.results_path.resolve()),
                        PYTHONPATH=os.pathsep.join(
                            [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
        for k in ("FLASHVERIFY_FUZZ_TARGETS", "FLASHVERIFY_FUZZ_DTYPES", "HYPOTHESIS_PROFILE", GPUS_ENV):
            self.env.pop(k, None)
        if gpus:  # xdist worker gwK pins itself to gpus[K % len(gpus)] (root conftest.py, xdist_worker_gpu)
            self.env[GPUS_ENV] = ",".join(gpus)
        if named:
            self.env["FLASHVERIFY_FUZZ_TARGETS"] = ",".join(t.name for t in chosen)
        if dtypes:
            self.env["FLASHVERIFY_FUZZ_DTYPES"] = ",".join(dtypes)
        self.base_cmd = [sys.executable, "-m", "pytest", "tests/fuzz", "-m", "nightly", "-p", "xdist", "-n",
                         str(workers), "--hypothesis-profile", "nightly", "--hypothesis-show-statistics",
                         "-p", "no:cacheprovider", "-q"]
        self.proc: subprocess.Popen | None = None
        self.interrupted_at: float | None = None
        self.sessions: list[dict[str, Any]] = []
        self.logf = open(out / "pytest.log", "w")

    def _start(self) -> None:
        left = self.deadline - time.time()
        budget = max(PYTEST_MIN_PROPERTY_S,
                     PYTEST_BUDGET_SHARE * (left - PYTEST_SESSION_OVERHEAD_S) * self.workers
                     / max(1, self.n_properties))
        k = len(self.sessions) + 1
        junit = self.out.resolve() / f"pytest-junit-{k}.xml"
        cmd = self.base_cmd + [f"--junitxml={junit}"]
        env = dict(self.env, FLASHVERIFY_FUZZ_PROPERTY_BUDGET_S=f"{budget:.1f}", FLASHVERIFY_FUZZ_SESSION=str(k))
        self.logf.write(f"=== session {k}: {budget:.1f} s per property, {left:.0f} s left: {' '.join(cmd)}\n")
        self.logf.flush()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.logf, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.interrupted_at = None
        self.sessions.append({"session": k, "property_budget_s": round(budget, 1), "started": time.time(),
                              "junit": str(junit), "exit_code": None, "stopped_at_deadline": False})
        self.log(f"  pytest engine: session {k} started (pid {self.proc.pid}, {self.n_properties} properties, "
                 f"{budget:.1f} s each)")

    def _ended(self, interrupted: bool) -> None:
        assert self.proc is not None
        cur = self.sessions[-1]
        cur.update(exit_code=self.proc.returncode, seconds=round(time.time() - cur.pop("started"), 1),
                   stopped_at_deadline=interrupted)
        self.log(f"  pytest engine: session {cur['session']} exit code {self.proc.returncode}"
                 + (" (interrupted)" if interrupted else ""))
        self.proc = None

    def poll(self, stop: "_Stop") -> None:
        """Start the next session when none runs and enough time is left; interrupt at the deadline or on a stop."""
        if self.proc is not None and self.proc.poll() is not None:
            self._ended(self.interrupted_at is not None)
        if self.proc is None:
            if not stop.requested and self.deadline - time.time() >= PYTEST_MIN_SESSION_S:
                self._start()
        elif self.interrupted_at is None and (stop.requested or time.time() >= self.deadline):
            self.interrupted_at = time.time()
            # SIGINT to the session's process group (the xdist workers too): each property in flight
            # records what it did so far (tests/fuzz/conftest.py), pytest writes its summary and junit
            self._killpg(signal.SIGINT)

    def _killpg(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def finish(self, grace_s: float, stop: "_Stop") -> None:
        """Keep sessions going until the deadline (or a stop), then end the one in flight."""
        while self.proc is not None or (not stop.requested and self.deadline - time.time() >= PYTEST_MIN_SESSION_S):
            self.poll(stop)
            if self.proc is not None and self.interrupted_at is not None and time.time() > self.interrupted_at + grace_s:
                self._killpg(signal.SIGKILL)
                self.proc.wait()
                self._ended(True)
                break
            time.sleep(0.2)
        self.logf.close()

    def info(self) -> dict[str, Any]:
        props = read_property_results(self.results_path)
        codes = [s["exit_code"] for s in self.sessions]
        # pytest exit codes: 0 all passed, 1 failures, 2 interrupted, 5 nothing collected
        return {"ran": bool(self.sessions), "command": " ".join(self.base_cmd), "log": str(self.out / "pytest.log"),
                "results": str(self.results_path), "sessions": self.sessions,
                "exit_code": codes[-1] if codes else None,
                "stopped_at_deadline": any(s["stopped_at_deadline"] for s in self.sessions),
                "properties_total": self.n_properties, "properties_reported": len(props),
                "failed": 1 in codes or any(p["outcome"] == "failed" for p in props.values()),
                "properties": props}


def read_property_results(path: Path) -> dict[str, dict[str, Any]]:
    """Fold the per-property-run JSON lines of ``tests/fuzz/conftest.py`` into one entry per property.

    Besides outcome, examples, seconds and the worst case, each entry lists the xdist
    ``workers`` that ran it and its ``examples_by_gpu`` (key: the GPU id a run was pinned
    to, ``"cpu"`` for a run pinned to none)."""
    props: dict[str, dict[str, Any]] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return props
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill
        p = props.setdefault(r["nodeid"], {
            "target": r.get("target"), "dtype": r.get("dtype"), "runs": 0, "outcome": None, "examples": 0,
            "seconds": 0.0, "max_ratio": 0.0, "worst_case": None, "stopped_by": {}, "features": Counter(),
            "violation": None, "workers": [], "examples_by_gpu": {}})
        p["runs"] += 1
        p["examples"] += r.get("examples", 0)
        worker = r.get("worker") or "main"
        if worker not in p["workers"]:
            p["workers"] = sorted(p["workers"] + [worker])
        gpu = r.get("gpu") or NO_GPU
        p["examples_by_gpu"][gpu] = p["examples_by_gpu"].get(gpu, 0) + r.get("examples", 0)
        p["seconds"] = round(p["seconds"] + r.get("seconds", 0.0), 3)
        p["stopped_by"][r["stopped_by"]] = p["stopped_by"].get(r["stopped_by"], 0) + 1
        p["features"].update(r.get("features", {}))
        if r.get("max_ratio", 0.0) > p["max_ratio"] or p["worst_case"] is None:
            p["max_ratio"], p["worst_case"] = max(p["max_ratio"], r.get("max_ratio", 0.0)), r.get("worst_case")
        # failed over passed over interrupted (stopped by the deadline, no failure so far) over skipped
        rank = ("skipped", "interrupted", "passed", "failed")
        if p["outcome"] is None or rank.index(r["outcome"]) > rank.index(p["outcome"]):
            p["outcome"] = r["outcome"]
        if r["outcome"] == "failed":
            p["violation"] = r.get("violation")
    for p in props.values():
        p["features"] = dict(sorted(p["features"].items()))
        p["examples_per_s"] = round(p["examples"] / p["seconds"], 2) if p["seconds"] else None
    return props


def _write_reports(out: Path, chosen, results, pytest_info, t0, options, stop, log) -> int:
    import strategies
    from reports.check_report import cell_line, write_check_report
    from verify.search import CellResult

    cells = []
    doc_targets: dict[str, Any] = {}
    coverage: Counter = Counter()
    corpus_added: list[str] = []
    failed = False
    for t in chosen:
        r = results.get(t.name, {"status": "not-run", "exit_code": None, "state": None})
        state = r["state"] or {}
        tcells = list(state.get("cells", {}).values())
        if r["status"] in ("crashed", "killed") and not tcells:
            tcells = [CellResult(t.name, t.op, "-", options["device"], status="error",
                                 reason=f"{r['status']} (exit code {r['exit_code']}) before its first round ended")]
        elif r["status"] in ("crashed", "killed"):
            for c in tcells:
                c.reason = (c.reason + "; " if c.reason else "") + f"child {r['status']} (exit code {r['exit_code']})"
        cells.extend(tcells)
        tcov: Counter = Counter()
        for c in tcells:
            tcov.update(c.features)
        tprops = {p["dtype"]: p for p in pytest_info.get("properties", {}).values() if p.get("target") == t.name}
        for p in tprops.values():  # the pytest engine's examples count towards coverage too
            tcov.update(p["features"])
        coverage.update(tcov)
        corpus_added.extend(state.get("corpus_added", []))
        if any(p["outcome"] == "failed" for p in tprops.values()) and r["status"] in ("finished", "stopped", "not-run"):
            r = dict(r, status="violated")
        failed |= r["status"] in ("crashed", "killed", "violated")
        vocab = strategies.SOFTMAX_FEATURES if t.op == "softmax" else strategies.ATTENTION_FEATURES
        doc_targets[t.name] = {
            "op": t.op, "kind": t.kind, "status": r["status"], "exit_code": r["exit_code"],
            "gpu": state.get("gpu"), "rounds": state.get("rounds", 0),
            "examples": sum(c.examples for c in tcells),
            "dtypes": {c.dtype: {
                "status": c.status, "examples": c.examples, "max_ratio": c.max_ratio, "max_error": c.max_error,
                "error_unit": c.error_unit, "worst_case": c.worst_case, "worst_case_artifact": c.worst_artifact,
                "checkpoints": [{"elapsed_s": e, "max_ratio": m, "examples": n}
                                for e, m, n in state.get("checkpoints", {}).get(c.dtype, [])],
                "violation": c.violation.one_line() if c.violation else None,
                "counterexample": c.counterexample,
            } for c in tcells},
            "pytest_examples": sum(p["examples"] for p in tprops.values()),
            "pytest": {d: {k: p[k] for k in ("outcome", "runs", "examples", "seconds", "examples_per_s", "max_ratio",
                                             "worst_case", "stopped_by", "violation", "workers", "examples_by_gpu")}
                       for d, p in tprops.items()},
            "coverage": {f: tcov.get(f, 0) for f in sorted(set(vocab) | set(tcov))},
            "features_never_hit": sorted(f for f in vocab if not tcov.get(f) and not f.startswith("dtype:")),
        }
    if pytest_info.get("failed"):
        failed = True
    corpus_added += [p for p in pytest_info.get("corpus_added", []) if p not in corpus_added]
    write_check_report(cells, out, {k: (v if not isinstance(v, tuple) else list(v)) for k, v in options.items()})
    elapsed = time.time() - t0
    doc = {"schema": FUZZ_SCHEMA, "options": options, "elapsed_s": round(elapsed, 3),
           "interrupted": stop.requested, "signal": stop.signal, "targets": doc_targets,
           "throughput": throughput(doc_targets, pytest_info.get("properties", {}), elapsed, options["gpus"]),
           "coverage": dict(sorted(coverage.items())), "corpus_added": corpus_added, "pytest": pytest_info}
    (out / "fuzz.json").write_text(json.dumps(doc, indent=2, default=str))
    (out / "summary.md").write_text(_summary_md(doc))
    for c in cells:
        log(f"{c.target}: " + cell_line(c).strip())
    for p in corpus_added:
        log(f"new corpus file: {p}")
    if stop.requested:
        log("interrupted: report written with what was found so far")
    log(f"report: {out / 'report.json'}, {out / 'fuzz.json'}")
    return 1 if failed else 0


def throughput(targets: dict[str, Any], properties: dict[str, Any], wall_s: float,
               gpus: list[str]) -> dict[str, Any]:
    """fuzz.json's ``throughput``: examples of both engines over the run's wall time, and per GPU.

    ``targets`` are fuzz.json's targets (in-process examples and the ``gpu`` each child
    ran on), ``properties`` the pytest engine's (``read_property_results``), ``gpus`` the
    run's GPU ids: each is listed in ``examples_per_gpu``, with 0 when it did no work;
    work pinned to no GPU counts under ``"cpu"``.
    """
    per_gpu: dict[str, int] = {g: 0 for g in gpus}
    for t in targets.values():
        if t["examples"]:
            g = (t["gpu"] or {}).get("id") or NO_GPU
            per_gpu[g] = per_gpu.get(g, 0) + t["examples"]
    for p in properties.values():
        for g, n in p["examples_by_gpu"].items():
            if n:
                per_gpu[g] = per_gpu.get(g, 0) + n
    inprocess = sum(t["examples"] for t in targets.values())
    pytest_examples = sum(p["examples"] for p in properties.values())
    total = inprocess + pytest_examples
    return {"examples": total, "inprocess_examples": inprocess, "pytest_examples": pytest_examples,
            "wall_s": round(wall_s, 3), "examples_per_s": round(total / wall_s, 3) if wall_s > 0 else None,
            "examples_per_gpu": per_gpu}


def _summary_md(doc: dict[str, Any]) -> str:
    tp = doc["throughput"]
    rate = "-" if tp["examples_per_s"] is None else f"{tp['examples_per_s']:.3g}"
    per_gpu = ", ".join(f"{g}: {n}" for g, n in tp["examples_per_gpu"].items()) or "-"
    lines = [f"# flashverify fuzz report", "",
             f"elapsed {doc['elapsed_s']:.0f} s, device {doc['options']['device']}, "
             f"interrupted: {doc['interrupted']}", "",
             "| examples (in-process + pytest) | wall s | examples/s | examples per GPU |", "|---|---|---|---|",
             f"| {tp['examples']} ({tp['inprocess_examples']} + {tp['pytest_examples']}) | {tp['wall_s']:.0f} | "
             f"{rate} | {per_gpu} |", "",
             "| target | status | exit | GPU | examples | worst ratio per dtype |", "|---|---|---|---|---|---|"]
    for name, t in doc["targets"].items():
        worst = ", ".join(f"{d}: {v['max_ratio']:.3g}" for d, v in t["dtypes"].items())
        gpu = "-" if t["gpu"] is None else " ".join(str(v) for v in (t["gpu"]["id"], t["gpu"]["name"]) if v)
        lines.append(f"| {name} | {t['status']} | {t['exit_code']} | {gpu} | {t['examples']} | {worst} |")
    py = doc.get("pytest") or {}
    if py.get("ran"):
        lines += ["", "## pytest engine (one Hypothesis property per target x dtype)", "",
                  f"{len(py['sessions'])} session(s), exit codes {[s['exit_code'] for s in py['sessions']]}; "
                  f"{py['properties_reported']} of {py['properties_total']} properties reported; "
                  f"log `{py['log']}`", "",
                  "| property | outcome | runs | examples | seconds | examples/s | worst ratio | stopped by |",
                  "|---|---|---|---|---|---|---|---|"]
        for nodeid, p in py["properties"].items():
            rate = "" if p["examples_per_s"] is None else f"{p['examples_per_s']:.3g}"
            stopped = ", ".join(f"{k} x{n}" for k, n in sorted(p["stopped_by"].items()))
            lines.append(f"| {nodeid.split('::')[-1]} | {p['outcome']} | {p['runs']} | {p['examples']} | "
                         f"{p['seconds']:.1f} | {rate} | {p['max_ratio']:.3g} | {stopped} |")
    lines += ["", "## Feature coverage (examples exercising each feature)", ""]
    lines += [f"- `{f}`: {n}" for f, n in sorted(doc["coverage"].items(), key=lambda kv: -kv[1])]
    if doc["corpus_added"]:
        lines += ["", "## New corpus files (commit them)", ""] + [f"- {p}" for p in doc["corpus_added"]]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- CLI glue


def add_parser(sub) -> None:
    p = sub.add_parser("fuzz", help="time-boxed nightly fuzzing of every target; new counterexamples go to the corpus")
    p.add_argument("--hours", type=float, required=True, help="wall-clock budget in hours (fractions allowed)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    p.add_argument("--targets", "--target", action="extend", nargs="+", metavar="NAME", default=None,
                   help="targets to fuzz (default: every non-mutant target available); mutants only when named")
    p.add_argument("--op", choices=("softmax", "attention"), default=None,
                   help="op of MODULE:FUNC / FILE.py:FUNC targets")
    p.add_argument("--dtype", "--dtypes", action="extend", nargs="+", dest="dtypes", metavar="D",
                   help="restrict dtypes (one or more, repeatable)")
    p.add_argument("--report", metavar="DIR", default="fuzz-report", help="report directory (default fuzz-report)")
    p.add_argument("--database", metavar="PATH|redis://URL", default=None,
                   help="Hypothesis example database (default $FLASHVERIFY_DB or .hypothesis/examples)")
    p.add_argument("--workers", type=int, default=None,
                   help="parallel target processes / xdist workers (default: one per GPU on cuda, 1 on cpu; "
                        "more workers than GPUs share them)")
    p.add_argument("--gpus", metavar="all|I,J,...", default=None,
                   help="cuda only: GPUs to spread the workers over, as torch numbers them (indices into "
                        "CUDA_VISIBLE_DEVICES when set); default all")
    p.add_argument("--engine", choices=("auto", "inprocess", "pytest", "both"), default="auto")
    p.add_argument("--corpus", metavar="DIR", default=None,
                   help="where new counterexamples go (default $FLASHVERIFY_CORPUS or tests/corpus)")
    p.add_argument("--no-shrink", action="store_true", help="keep counterexamples unshrunk (faster)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--grace", type=float, default=60.0, help="seconds a child may overrun before being killed")


def cmd_fuzz(args) -> int:
    try:
        return run_fuzz(hours=args.hours, device=args.device, targets=args.targets, op=args.op, dtypes=args.dtypes,
                        report=args.report, database=args.database, workers=args.workers, gpus=args.gpus,
                        engine=args.engine, corpus=args.corpus, shrink=not args.no_shrink, seed=args.seed,
                        grace_s=args.grace,
                        log=lambda m: print(m, flush=True))
    except FuzzUsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
