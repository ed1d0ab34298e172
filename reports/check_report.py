"""The report of one ``python -m verify check`` run: a console line per cell and report.json."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import torch

from reports.report_md import ratio_text

CHECK_SCHEMA = "flashverify-check/1"


def cell_line(cell) -> str:
    """One console line summarising a target x dtype cell."""
    if cell.status in ("unsupported", "error"):
        return f"  {cell.dtype:<9} {cell.status}: {cell.reason}"
    s = cell.summary
    cut = " (cut by budget)" if cell.cut_by_budget else ""
    if cell.max_tolerance_seen == 0 and cell.max_error == 0:  # a hang or an exception: nothing measured
        return f"  {cell.dtype:<9} {cell.status.upper():<8} {cell.examples} examples{cut}, no output measured, {cell.seconds:.1f}s"
    return (f"  {cell.dtype:<9} {cell.status.upper():<8} {cell.examples} examples{cut}, "
            f"max {cell.max_error:.3g} {cell.error_unit} (p99 {s.p99:.3g}, median {s.median:.3g}), "
            f"{ratio_text(cell.max_ratio)} of tolerance, flash rule {cell.flash_rule_max:.2f}x naive, "
            + (f"LSE max {cell.lse_max_error:.3g} u*max(1,|lse|) ({ratio_text(cell.lse_max_ratio)} of tolerance, {cell.lse_rows} rows), "
               if cell.lse_rows else "")
            + f"{cell.seconds:.1f}s")


def cell_to_dict(cell) -> dict[str, Any]:
    s = cell.summary
    v = cell.violation
    return {
        "target": cell.target, "op": cell.op, "dtype": cell.dtype, "device": cell.device, "status": cell.status,
        "reason": cell.reason, "examples": cell.examples, "seconds": round(cell.seconds, 3),
        "warmup_seconds": round(cell.warmup_seconds, 3),
        "error_unit": cell.error_unit, "max_error": cell.max_error, "p99_error": s.p99, "median_error": s.median,
        "max_error_over_tolerance": cell.max_ratio,
        "tolerance_range": [cell.min_tolerance_seen, cell.max_tolerance_seen],
        "normwise_relative_error_max": cell.normwise_max,
        "flash_rule_ratio_max": cell.flash_rule_max, "flash_rule_examples_over_2": cell.flash_rule_over_2,
        "flushed_to_zero": cell.flushed, "ill_conditioned_elements": cell.ill_conditioned,
        "uncertified_oracle_rows": cell.uncertified_rows, "negative_zeros": cell.negative_zeros,
        "oracle_fallback_rows": cell.fallback_rows, "features": dict(cell.features),
        "violation": v.to_dict() if v else None, "counterexample": cell.counterexample,
        "artifact": cell.artifact, "worst_case": cell.worst_case, "worst_case_artifact": cell.worst_artifact,
        "cut_by_budget": cell.cut_by_budget, "grid_probe": cell.grid_probe, "tiles_probe": cell.tiles_probe,
        "wide_probe": cell.wide_probe, "probe_round": cell.probe_round,
        "lse": ({"rows": cell.lse_rows, "max_error": cell.lse_max_error, "max_error_over_tolerance": cell.lse_max_ratio}
                if cell.lse_rows else None),
    }


def write_check_report(cells, directory: Path, options: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": CHECK_SCHEMA,
        "options": {k: v for k, v in options.items() if isinstance(v, (str, int, float, bool, list, type(None)))},
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "platform": platform.platform()},
        "cells": [cell_to_dict(c) for c in cells],
    }
    path = directory / "report.json"
    path.write_text(json.dumps(doc, indent=2, default=str))
    return path
