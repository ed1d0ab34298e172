"""report.json of ``python -m verify run``: the one source the Markdown and HTML reports are rendered from.

The document is described field by field in ``reports/schema.json`` (JSON Schema
2020-12, ``schema_version`` 1).  Non-finite numbers are written as the strings
"inf", "-inf" and "nan" so the file stays strict JSON.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

from reports.check_report import cell_to_dict
from verify import artifacts
from verify.dtypes import get_format

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("schema.json")
MARGIN = 2.0  # safety factor of the recommended assert_close tolerances
HIST_LOG10_MIN, HIST_LOG10_MAX, HIST_STEP, HIST_BINS = -4.0, 4.0, 0.1, 80
MAX_DETAIL_ROWS = 500
MAX_PAIRS = 300
DETAIL_FIELDS = ["length", "input_range", "max_error", "max_ratio", "abs_error", "v_max", "violated"]
#: torch.testing.assert_close's defaults, for comparison with the recommendation.
TORCH_DEFAULTS = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
                  "float64": (1e-7, 1e-7)}


def clean(value: Any) -> Any:
    """JSON-safe copy: tuples to lists, Counters to dicts, non-finite floats to strings."""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


# --------------------------------------------------------------------------------------
# per cell
# --------------------------------------------------------------------------------------


def _quantile(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))] if v else 0.0


def _rtol_atol(op: str, fmt, worst: float, per_unit_v: float) -> tuple[float, float]:
    worst = max(worst, 0.5)  # the output is rounded to the dtype at least once
    if op == "softmax":
        return MARGIN * worst * fmt.eps, MARGIN * worst * fmt.smallest_subnormal
    return MARGIN * worst * fmt.unit_roundoff, max(MARGIN * per_unit_v, MARGIN * 0.5 * fmt.unit_roundoff)


def recommended_tolerance(cell, observer) -> tuple[dict[str, Any] | None, str]:
    """rtol/atol for torch.testing.assert_close derived from the measured errors, with a margin.

    ``rtol``/``atol`` cover every measured example; ``typical`` covers 99 % of the examples
    (the adversarial search deliberately reaches inputs where any fixed rtol must be loose).
    """
    if cell.status != "passed":
        return None, ("not derived: the cell violates its contract" if cell.status == "violated"
                      else "not derived: the cell was not run")
    recs = observer.records
    if cell.examples == 0 or not recs:
        return None, "not derived: no example was measured"
    fmt = get_format(cell.dtype)
    unit_v = [r.abs_max / max(1.0, r.v_max) for r in recs]
    rtol, atol = _rtol_atol(cell.op, fmt, cell.max_error, max(unit_v))
    t_rtol, t_atol = _rtol_atol(cell.op, fmt, _quantile([r.max_error for r in recs], 0.99), _quantile(unit_v, 0.99))
    if cell.op == "softmax":
        basis = (f"{MARGIN:g} x the max error E = {max(cell.max_error, 0.5):.3g} ULP (at least the 0.5 ULP of the "
                 f"final rounding): |err| <= E ulp(y) <= E (eps |y| + smallest subnormal), eps = {fmt.eps:.3g}")
        if cell.flushed:
            basis += (f"; {cell.flushed} output(s) were 0 where the exact value is below the smallest normal "
                      f"(flushed or underflowed): if the kernel flushes subnormals, use atol >= "
                      f"{fmt.smallest_normal:.3g}")
    else:
        basis = (f"rtol = {MARGIN:g} x max error E = {max(cell.max_error, 0.5):.3g} u*cond x u (u = "
                 f"{fmt.unit_roundoff:.3g}; exact where outputs do not cancel); atol = {MARGIN:g} x max |err| / "
                 f"max(1, max|V|) over the examples, valid for max|V| <= 1 (multiply by max|V| otherwise)")
    default = TORCH_DEFAULTS.get(fmt.name)
    rec = {"rtol": rtol, "atol": atol, "margin": MARGIN, "basis": basis, "examples_covered": len(recs),
           "typical": {"rtol": t_rtol, "atol": t_atol, "examples_fraction": 0.99},
           "torch_default": {"rtol": default[0], "atol": default[1]} if default else None}
    return rec, f"covers all {len(recs)} measured examples; 'typical' covers 99 % of them"


def error_histogram(samples: list[float]) -> dict[str, Any] | None:
    """Counts over log10 bins spanning the decades the nonzero samples occupy (at most HIST_BINS bins)."""
    if not samples:
        return None
    finite = [s for s in samples if math.isfinite(s)]
    pos = [s for s in finite if s > 0]
    if pos:
        lo = math.floor(math.log10(min(pos)))
        hi = max(math.ceil(math.log10(max(pos))), lo + 1)
    else:
        lo, hi = HIST_LOG10_MIN, HIST_LOG10_MAX
    step = max(HIST_STEP, (hi - lo) / HIST_BINS)
    nbins = max(1, math.ceil((hi - lo) / step - 1e-9))
    counts = [0] * nbins
    for s in pos:  # the bins cover [10^lo, 10^hi] exactly: only rounding can put a sample one bin out
        b = math.floor((math.log10(s) - lo) / step)
        counts[min(max(b, 0), nbins - 1)] += 1
    return {"log10_min": float(lo), "log10_step": step, "counts": counts, "zeros": len(finite) - len(pos),
            "below": 0, "above": 0, "samples": len(samples)}


def _subsample(n: int, k: int, keep: list[int], seed: int) -> list[int]:
    if n <= k:
        return list(range(n))
    rng = random.Random(seed)
    chosen = set(i for i in keep if 0 <= i < n)
    chosen.update(rng.sample(range(n), k - len(chosen)))
    return sorted(chosen)


def examples_detail(observer) -> dict[str, Any]:
    recs = observer.records
    worst = max(range(len(recs)), key=lambda i: recs[i].max_ratio) if recs else -1
    idx = _subsample(len(recs), MAX_DETAIL_ROWS, [worst], 0)
    rows = [[recs[i].length, recs[i].input_range, recs[i].max_error, recs[i].max_ratio, recs[i].abs_max,
             recs[i].v_max, int(recs[i].violated)] for i in idx]
    return {"fields": DETAIL_FIELDS, "rows": rows, "total": len(recs), "truncated": len(recs) > len(idx)}


def error_vs_tolerance(cell) -> list[list[float]]:
    errs, tols = cell.samples, cell.tolerance_samples
    n = min(len(errs), len(tols))
    if n == 0:
        return []
    ratios = sorted(range(n), key=lambda i: errs[i] / tols[i] if tols[i] else 0.0, reverse=True)
    idx = _subsample(n, MAX_PAIRS, ratios[: MAX_PAIRS // 3], 1)
    return [[tols[i], errs[i]] for i in idx]


def special_values(observer) -> dict[str, Any]:
    out = {}
    for f, s in observer.special.items():
        out[f] = {"examples": s["examples"], "passed": s["passed"],
                  "violation_kinds": dict(s["violation_kinds"]), "exercised": s["examples"] > 0}
    return out


def cell_entry(run) -> dict[str, Any]:
    cell, obs = run.cell, run.observer
    d = cell_to_dict(cell)
    rec, note = recommended_tolerance(cell, obs)
    d.update({
        "budget_s": round(run.budget_s, 3),
        "hypothesis_runs": run.chunks,
        "stop_reason": run.stop_reason,
        "seconds_to_first_failure": cell.seconds_to_first_failure,
        "examples_to_first_failure": cell.examples_to_first_failure,
        "target_seconds": round(cell.target_seconds, 4),
        "oracle_seconds": round(cell.oracle_seconds, 4),
        "max_abs_error": max((r.abs_max for r in obs.records), default=0.0),
        "max_abs_error_per_unit_v": (max((r.abs_max / max(1.0, r.v_max) for r in obs.records), default=0.0)
                                     if cell.op == "attention" else None),
        "special_values": special_values(obs),
        "recommended_assert_close": rec,
        "recommended_note": note,
        "replay_command": artifacts.replay_command(cell.artifact) if cell.artifact else None,
        "worst_case_replay_command": artifacts.replay_command(cell.worst_artifact) if cell.worst_artifact else None,
        "error_histogram": error_histogram(cell.samples),
        "examples_detail": examples_detail(obs),
        "error_vs_tolerance": error_vs_tolerance(cell),
    })
    return d


# --------------------------------------------------------------------------------------
# the document
# --------------------------------------------------------------------------------------


def _coverage(cells: list[dict[str, Any]], dtypes: tuple[str, ...]) -> dict[str, Any]:
    from strategies import ATTENTION_FEATURES, SOFTMAX_FEATURES

    out = {}
    for op, vocab in (("softmax", SOFTMAX_FEATURES), ("attention", ATTENTION_FEATURES)):
        mine = [c for c in cells if c["op"] == op and c["status"] != "unsupported"]
        if not mine:
            continue
        hit: Counter = Counter()
        for c in mine:
            hit.update(c["features"])
        relevant = [f for f in vocab if not f.startswith("dtype:") or f[len("dtype:"):] in dtypes]
        out[op] = {"features_total": len(relevant), "features_hit": sum(1 for f in relevant if hit[f]),
                   "never_hit": [f for f in relevant if not hit[f]],
                   "examples": sum(c["examples"] for c in mine)}
    return out


def build_document(result) -> dict[str, Any]:
    opts = result.options
    cells = [cell_entry(r) for r in result.runs]
    violations, arts = [], []
    for c in cells:
        if c["status"] == "violated":
            v = c["violation"] or {}
            violations.append({"target": c["target"], "op": c["op"], "dtype": c["dtype"], "kind": v.get("kind"),
                               "message": v.get("message"), "detail": v, "counterexample": c["counterexample"],
                               "artifact": c["artifact"], "replay_command": c["replay_command"],
                               "examples_to_first_failure": c["examples_to_first_failure"],
                               "seconds_to_first_failure": c["seconds_to_first_failure"]})
        if c["artifact"]:
            arts.append({"kind": "violation", "target": c["target"], "op": c["op"], "dtype": c["dtype"],
                         "path": c["artifact"], "description": c["counterexample"],
                         "replay_command": c["replay_command"]})
        if c["worst_case_artifact"]:
            arts.append({"kind": "worst-case", "target": c["target"], "op": c["op"], "dtype": c["dtype"],
                         "path": c["worst_case_artifact"], "description": c["worst_case"],
                         "replay_command": c["worst_case_replay_command"]})
    mut = result.mutation
    summ = mut.get("summary") or {}
    survivors = list(summ.get("survivors") or [])
    controls_failed = list(summ.get("controls_failed") or [])
    run_cells = [c for c in cells if c["status"] != "unsupported"]
    failed = bool(violations or survivors or controls_failed)
    summary = {
        "verdict": "FAIL" if failed else "PASS",
        "exit_code": 1 if failed else 0,
        "cells": len(cells),
        "cells_run": len(run_cells),
        "passed": sum(c["status"] == "passed" for c in cells),
        "violated": sum(c["status"] == "violated" for c in cells),
        "unsupported": sum(c["status"] == "unsupported" for c in cells),
        "examples": sum(c["examples"] for c in cells),
        "cells_stopped_by_budget": sum(c["stop_reason"] == "budget" for c in run_cells),
        "cells_cut_mid_run": sum(bool(c["cut_by_budget"]) for c in run_cells),
        "mutation_score": summ.get("mutation_score"),
        "mutant_survivors": survivors,
        "controls_failed": controls_failed,
    }
    t = result.timings
    budget = {"total_s": opts.budget_s, "wall_s": round(t.get("wall_s", 0.0), 3),
              "fa3_s": round(t.get("fa3_s", 0.0), 3), "mutants_s": round(t.get("mutants_s", 0.0), 3),
              "cells_s": round(t.get("cells_s", 0.0), 3),
              "per_cell_note": "after the FA3 experiment, the cells get 65 % of the budget (all of it without "
                               "mutation testing), shared out cell by cell: time a cell does not use goes to the "
                               "cells after it, and a cell that overruns its share (a shrink, a slow first "
                               "example) moves the phase's end back by its overrun over the jobs, up to half "
                               "the phase, instead of taking the time from the cells after it; mutation "
                               "testing gets the rest"}
    doc = {
        "schema_version": SCHEMA_VERSION,
        "tool": "flashverify",
        "command": "run",
        "environment": result.environment,
        "options": {"device": opts.device, "budget_s": opts.budget_s, "targets": opts.targets,
                    "dtypes": list(result.dtypes), "seed": opts.seed, "mutants": opts.mutants, "fa3": opts.fa3,
                    "shrink": opts.shrink,
                    "max_examples_per_cell": opts.max_examples, "report_dir": str(opts.report_dir),
                    "artifact_dir": str(opts.artifact_dir)},
        "summary": summary,
        "budget": budget,
        "targets": result.targets,
        "cells": cells,
        "violations": violations,
        "artifacts": arts,
        "coverage": _coverage(cells, result.dtypes),
        "mutation": mut,
        "fa3": result.fa3,
    }
    return clean(doc)


def write(doc: dict[str, Any], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "report.json"
    path.write_text(json.dumps(doc, indent=1, allow_nan=False))
    return path


def load(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def validate(doc: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError if ``doc`` does not match reports/schema.json."""
    import jsonschema

    jsonschema.validate(doc, load_schema(), cls=jsonschema.Draft202012Validator)
