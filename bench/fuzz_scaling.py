"""How `python -m verify fuzz` throughput scales with GPUs (issue 7). Needs a GPU machine.

Runs the in-process engine on a fixed list of softmax targets, for ``--seconds`` each, three ways:

  (a) ``--gpus 0 --workers 1``         one child at a time, on GPU 0
  (b) ``--gpus 0 --workers 2``         two children sharing GPU 0
  (c) ``--gpus all --workers N_GPUS``  one child per GPU

each with its own report and example database under ``--out``, and with
``--no-shrink --seed S`` so the three configurations do the same kind of work.  While each
runs, ``nvidia-smi`` samples every GPU's utilisation and memory every 500 ms
(``OUT/<config>/nvidia-smi.csv``).

Read the result (printed, and in ``OUT/fuzz_scaling.json``) as follows:

* ``examples_per_s`` is fuzz.json's ``throughput``: examples checked over the run's wall
  time, start-up included (each child imports torch and compiles its Triton kernels, a
  fixed cost that weighs more in short runs, so use the same ``--seconds`` to compare).
  The engine runs one child per target and gives each its share of the time: (a) starts
  its children one after the other and pays that start-up once per target, (c) pays it
  once, in parallel, so part of ``c_over_a`` is start-up saved rather than GPU speed.
* ``c_over_a`` is the speed-up of all GPUs over one: close to N_GPUS when the work spreads
  well.  It can only reach N_GPUS when there are at least N_GPUS targets (one child per
  target), which is why four are fuzzed by default.
* ``c_over_b`` separates "more GPUs" from "more processes": (b) already runs two
  children, on one GPU.  With 2 GPUs, ``c_over_b`` near 1 means the host CPUs, not the
  GPU, limit the fuzzer (Hypothesis's generation and the oracle's exact fallback run on
  the CPU).
* ``utilisation`` is the mean ``utilization.gpu`` per GPU index (as nvidia-smi numbers
  them) over the samples of a run, and ``memory_max_mib`` the peak memory used: in (c) every
  GPU should show work; in (a) and (b) only GPU 0.
* ``examples_per_gpu`` (from fuzz.json) says which GPU did how many examples.

With fewer than 2 GPUs only (a) and (b) run; (c) would be (a), and is reported as (a).

    python bench/fuzz_scaling.py --out results/fuzz-scaling            # 3 x 90 s
    python bench/fuzz_scaling.py --seconds 300 --targets triton-softmax torch.softmax

Exit status: 0 when every run wrote its report (a run whose fuzzer found a violation
counts, and is flagged); 1 when a run failed or timed out; 2 when there is no GPU or no
nvidia-smi.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TARGETS = ["triton-softmax", "triton-softmax-fast", "torch.softmax", "ref-online-softmax"]
# beyond --seconds: start-up, the children's grace period (--grace below) and writing the report
RUN_MARGIN_S = 240.0
GRACE_S = 60.0


class BenchError(Exception):
    """A configuration that did not produce a report (exit 1)."""


def gpu_count() -> int:
    """GPUs torch sees here (what `verify fuzz --gpus all` uses)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def configurations(n_gpus: int) -> list[dict[str, Any]]:
    """The runs to make: (a) and (b) always, (c) only with 2 GPUs or more (else it would be (a))."""
    runs: list[dict[str, Any]] = [{"name": "a", "gpus": "0", "workers": 1},
                                     {"name": "b", "gpus": "0", "workers": 2}]
    if n_gpus >= 2:
        runs.append({"name": "c", "gpus": "all", "workers": n_gpus})
    return runs


def fuzz_command(config: dict[str, Any], run_dir: Path, targets: list[str], seconds: float,
                 seed: int) -> list[str]:
    """The `python -m verify fuzz` command line of one configuration, writing under ``run_dir``."""
    return [sys.executable, "-m", "verify", "fuzz", "--engine", "inprocess", "--device", "cuda", "--no-shrink",
            "--seed", str(seed), "--targets", *targets, "--hours", f"{seconds / 3600:.6f}",
            "--gpus", str(config["gpus"]), "--workers", str(config["workers"]), "--grace", str(GRACE_S),
            "--report", str(run_dir / "report"), "--database", str(run_dir / "db"),
            # new counterexamples stay here, out of the repository's tests/corpus
            "--corpus", str(run_dir / "corpus")]


def gpu_utilisation(csv_text: str) -> dict[str, dict[str, float]]:
    """Per GPU index: mean ``utilization.gpu`` (%) and peak ``memory.used`` (MiB) over the samples of
    ``nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv`` output.

    Rows that do not parse (a line cut when the sampler was stopped, ``[N/A]``) are skipped.
    """
    samples: dict[str, list[tuple[float, float]]] = {}
    for row in csv.reader(io.StringIO(csv_text)):
        if len(row) != 3 or row[0].strip() == "index":
            continue
        try:
            util = float(row[1].strip().removesuffix("%").strip())
            mem = float(row[2].strip().removesuffix("MiB").strip())
        except ValueError:
            continue
        samples.setdefault(row[0].strip(), []).append((util, mem))
    return {i: {"mean_utilisation_pct": round(sum(u for u, _ in s) / len(s), 1),
                "memory_max_mib": max(m for _, m in s), "samples": len(s)}
            for i, s in sorted(samples.items())}


def run_configuration(config: dict[str, Any], out: Path, targets: list[str], seconds: float,
                      seed: int) -> dict[str, Any]:
    """Run one configuration with nvidia-smi sampling in the background; its figures.

    Raises BenchError when the fuzzer times out, exits with a status other than 0 (nothing
    found) or 1 (a violation found, or a crashed target), leaves no fuzz.json, or a target's
    child crashed, was killed or did not run: its throughput would not be comparable.
    """
    run_dir = out / str(config["name"])
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a fresh database: an earlier run's examples would be replayed first
    run_dir.mkdir(parents=True)
    cmd = fuzz_command(config, run_dir, targets, seconds, seed)
    print(f"({config['name']}) --gpus {config['gpus']} --workers {config['workers']}: {' '.join(cmd)}", flush=True)
    smi_csv = run_dir / "nvidia-smi.csv"
    with open(smi_csv, "w") as smi_out, open(run_dir / "fuzz.log", "w") as log:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used", "--format=csv",
                                "-lms", "500"], stdout=smi_out, stderr=subprocess.STDOUT)
        t0 = time.time()
        # a session of its own: on a timeout its spawned children are killed with it
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=seconds + RUN_MARGIN_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise BenchError(f"({config['name']}) did not finish within {seconds + RUN_MARGIN_S:.0f} s and was "
                             f"killed; see {run_dir / 'fuzz.log'}") from None
        finally:
            smi.terminate()
            try:
                smi.wait(10)
            except subprocess.TimeoutExpired:
                smi.kill()
                smi.wait()
    wall = time.time() - t0
    fuzz_json = run_dir / "report" / "fuzz.json"
    if proc.returncode not in (0, 1) or not fuzz_json.exists():
        tail = "\n".join((run_dir / "fuzz.log").read_text().splitlines()[-15:])
        raise BenchError(f"({config['name']}) `verify fuzz` exited with status {proc.returncode}"
                         f"{'' if fuzz_json.exists() else ' and wrote no fuzz.json'}; the end of its log "
                         f"({run_dir / 'fuzz.log'}):\n{tail}")
    doc = json.loads(fuzz_json.read_text())
    failed = {name: t["status"] for name, t in doc["targets"].items()
              if t["status"] in ("crashed", "killed", "not-run")}
    if failed:
        raise BenchError(f"({config['name']}) target(s) did not fuzz to the end: {failed}; see {fuzz_json} "
                         f"and {run_dir / 'fuzz.log'}")
    tp = doc["throughput"]
    return {"gpus": config["gpus"], "workers": config["workers"], "gpu_ids": doc["options"]["gpus"],
            "examples": tp["examples"], "wall_s": tp["wall_s"], "examples_per_s": tp["examples_per_s"],
            "examples_per_gpu": tp["examples_per_gpu"], "command_wall_s": round(wall, 1),
            "violation_found": proc.returncode == 1,  # no target crashed (above): exit 1 is a violation
            "target_gpus": {name: t["gpu"] for name, t in doc["targets"].items()},
            "utilisation": gpu_utilisation(smi_csv.read_text()), "report": str(fuzz_json), "nvidia_smi": str(smi_csv)}


def ratios(runs: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """(c)/(a) and (c)/(b) in examples/s; (c) is (a) when it was not run (fewer than 2 GPUs)."""
    rate = {k: v["examples_per_s"] for k, v in runs.items()}
    c = rate.get("c", rate["a"])
    return {"c_over_a": round(c / rate["a"], 3) if rate["a"] else None,
            "c_over_b": round(c / rate["b"], 3) if rate["b"] else None}


def print_table(result: dict[str, Any]) -> None:
    print()
    print(f"{'config':<28} {'examples':>9} {'wall s':>7} {'examples/s':>11}  examples per GPU; mean GPU util %")
    for name, r in result["runs"].items():
        label = f"({name}) --gpus {r['gpus']} --workers {r['workers']}"
        util = ", ".join(f"{i}: {u['mean_utilisation_pct']:.0f}" for i, u in r["utilisation"].items())
        per_gpu = ", ".join(f"{g}: {n}" for g, n in r["examples_per_gpu"].items())
        flag = "  (violation found)" if r["violation_found"] else ""
        print(f"{label:<28} {r['examples']:>9} {r['wall_s']:>7.0f} {r['examples_per_s']:>11.2f}  "
              f"{per_gpu}; {util}{flag}")
    print(f"(c)/(a) = {result['ratios']['c_over_a']}   (c)/(b) = {result['ratios']['c_over_b']}"
          f"   over {result['n_gpus']} GPU(s)")
    if result["note"]:
        print(result["note"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=90.0, help="fuzzing time per configuration (default 90)")
    ap.add_argument("--targets", nargs="+", default=DEFAULT_TARGETS, metavar="NAME",
                    help=f"targets to fuzz (default: {' '.join(DEFAULT_TARGETS)})")
    ap.add_argument("--out", type=Path, default=Path("results/fuzz-scaling"),
                    help="output folder: one subfolder per configuration, and fuzz_scaling.json")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.seconds <= 0:
        ap.error(f"--seconds must be positive, got {args.seconds}")
    n_gpus = gpu_count()
    if n_gpus == 0:
        print("error: torch sees no CUDA device here; this benchmark needs a GPU machine", file=sys.stderr)
        return 2
    if shutil.which("nvidia-smi") is None:
        print("error: nvidia-smi is not on PATH; it samples GPU utilisation during each run", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[str, Any]] = {}
    try:
        for config in configurations(n_gpus):
            runs[str(config["name"])] = run_configuration(config, args.out, args.targets, args.seconds, args.seed)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    note = ("" if n_gpus >= 2 else
            "one GPU here: (c) --gpus all --workers 1 is (a); it was not run, and its ratios use (a)")
    result = {"n_gpus": n_gpus, "seconds": args.seconds, "targets": args.targets, "seed": args.seed,
              "runs": runs, "ratios": ratios(runs), "note": note}
    (args.out / "fuzz_scaling.json").write_text(json.dumps(result, indent=2))
    print_table(result)
    print(f"written: {args.out / 'fuzz_scaling.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
