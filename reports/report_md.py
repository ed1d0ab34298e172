"""report.md of ``python -m verify run``, rendered from report.json (``render(doc)``).

``row_values`` and ``num`` are shared with the HTML report, so both show the same
numbers, each to three significant digits of the JSON value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Columns of the per-dtype tables: (key, header).
COLUMNS = [
    ("target", "target"), ("op", "op"), ("status", "status"), ("examples", "examples"), ("stop", "stop"),
    ("max_error", "max error"), ("p99_error", "p99 error"), ("median_error", "median error"),
    ("tolerance", "tolerance (min..max)"), ("ratio", "max error / tolerance"), ("flash_rule", "flash rule (x naive)"),
    ("lse", "LSE max error (/ tolerance)"), ("rtol", "rtol"), ("atol", "atol"),
]
SPECIAL_COLUMNS = [("mask:fully-masked-row", "fully masked rows"), ("special:nan", "NaN inputs"),
                   ("special:+inf", "+inf inputs")]


def num(x: Any) -> str:
    """Three significant digits; None as an em dash; "inf"/"nan" strings as they are."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, str):
        return x
    if isinstance(x, int):
        return str(x)
    if x == 0:
        return "0"
    return f"{x:.3g}"


def ratio_text(x: Any) -> str:
    """An error over its tolerance as :func:`num` gives it, with more digits where 3 would read 1
    for a value that is not 1: a passing 0.9996 reads 0.9996 and a failing 1.0004 reads 1.0004
    (1 would hide which side of its tolerance the cell is on)."""
    if not isinstance(x, float) or x == 1.0:
        return num(x)
    for digits in (3, 4, 5, 6, 7, 8):
        text = f"{x:.{digits}g}"
        if text != "1":
            return text
    return "0.99999999" if x < 1.0 else "1.00000001"


def row_values(c: dict[str, Any]) -> dict[str, str]:
    """The text of each column for one cell."""
    unit = c["error_unit"]
    rec = c.get("recommended_assert_close") or {}
    if c["status"] == "unsupported":
        blank = "—"
        return {"target": c["target"], "op": c["op"], "status": "unsupported", "examples": "0", "stop": blank,
                "max_error": blank, "p99_error": blank, "median_error": blank, "tolerance": blank, "ratio": blank,
                "flash_rule": blank, "lse": blank, "rtol": blank, "atol": blank}
    lo, hi = c["tolerance_range"]
    return {
        "target": c["target"], "op": c["op"],
        "status": c["status"].upper() if c["status"] == "violated" else c["status"],
        "examples": str(c["examples"]), "stop": c["stop_reason"] + (" (cut)" if c["cut_by_budget"] else ""),
        "max_error": f"{num(c['max_error'])} {unit}", "p99_error": f"{num(c['p99_error'])} {unit}",
        "median_error": f"{num(c['median_error'])} {unit}",
        "tolerance": f"{num(lo)}..{num(hi)} {unit}", "ratio": ratio_text(c["max_error_over_tolerance"]),
        "flash_rule": num(c["flash_rule_ratio_max"]),
        "lse": (f"{num(c['lse']['max_error'])} u·max(1,|lse|) ({ratio_text(c['lse']['max_error_over_tolerance'])})" if c.get("lse")
                else "—"),
        "rtol": num(rec.get("rtol")), "atol": num(rec.get("atol")),
    }


MUTATION_HEADERS = ["mutant", "op", "result", "dtype", "examples", "seconds to kill", "budget per dtype (s)",
                    "bug class", "reference"]


def mutation_row(r: dict[str, Any]) -> list[str]:
    result = r["status"] + (" (stopped by the budget)" if r.get("budget_limited") else "")
    return [r["name"], r["op"], result, r["dtype"] or "—", num(r["examples"]), num(r["seconds_to_kill"]),
            num(r["budget_per_dtype_s"]), r["bug_class"], r["reference"] or ""]


def special_values_text(s: dict[str, Any]) -> str:
    if not s["exercised"]:
        return "not exercised"
    text = f"{s['passed']}/{s['examples']} passed"
    if s["violation_kinds"]:
        text += " (" + ", ".join(f"{k} x{n}" for k, n in sorted(s["violation_kinds"].items())) + ")"
    return text


def violation_items(v: dict[str, Any]) -> list[tuple[str, str | None]]:
    """The detail lines of one violation as (text, code-or-None), shared by the Markdown and HTML reports."""
    d = v["detail"] or {}
    items: list[tuple[str, str | None]] = []
    if d.get("error") is not None:
        items.append((f"worst element {d.get('index')}: got {d.get('got')}, exact {d.get('expected')}, "
                      f"error {num(d.get('error'))} {d.get('unit')} > tolerance {num(d.get('tolerance'))}", None))
    if v["counterexample"]:
        items.append(("shrunk counterexample: ", v["counterexample"]))
    if v["examples_to_first_failure"] is not None:
        items.append((f"found after {v['examples_to_first_failure']} examples, "
                      f"{num(v['seconds_to_first_failure'])} s", None))
    if v["artifact"]:
        items.append(("artifact: ", v["artifact"]))
    return items


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(esc(v) for v in r) + " |" for r in rows]
    return out


def verdict_reasons(summ: dict[str, Any]) -> str:
    """': 2 violated cell(s), 1 surviving mutant(s)' (empty when nothing failed), for both reports."""
    why = []
    if summ["violated"]:
        why.append(f"{summ['violated']} violated cell(s)")
    if summ["mutant_survivors"]:
        why.append(f"{len(summ['mutant_survivors'])} surviving mutant(s)")
    if summ["controls_failed"]:
        why.append(f"{len(summ['controls_failed'])} failed control(s)")
    return ": " + ", ".join(why) if why else ""


def versions_text(env: dict[str, Any]) -> str:
    return ", ".join(f"{k} {env[k]}" for k in ("python", "torch", "triton", "hypothesis", "mpmath", "numpy")
                     if env.get(k))


def dtypes_in(doc: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(c["dtype"] for c in doc["cells"]))


def render(doc: dict[str, Any]) -> str:
    env, summ, bud = doc["environment"], doc["summary"], doc["budget"]
    L: list[str] = []
    L.append(f"# flashverify campaign report: {summ['verdict']}")
    L.append("")
    verdict = f"**{summ['verdict']}** (exit code {summ['exit_code']})" + verdict_reasons(summ)
    versions = versions_text(env)
    git = (env.get("git_commit") or "unknown")[:12] + (" (uncommitted changes)" if env.get("git_dirty") else "")
    L += _table(["", ""], [
        ["verdict", verdict],
        ["device", f"{env['device']}: {env['device_name']}"
                   + (" (Triton interpreter)" if env.get("triton_interpret") else "")],
        ["budget", f"{num(bud['total_s'])} s; wall {num(bud['wall_s'])} s (FA3 {num(bud['fa3_s'])} s, mutation "
                   f"{num(bud['mutants_s'])} s, cells {num(bud['cells_s'])} s)"
                   + (f"; {env['jobs']} jobs side by side" if env.get("jobs", 1) > 1 else "")],
        ["seed", str(env["seed"])],
        ["command", f"`{env['command_line']}`"],
        ["rerun", f"`{env['rerun_command']}`"],
        ["date", env["date"]],
        ["versions", versions],
        ["git", git],
    ])
    L.append("")

    # ---- coverage ---------------------------------------------------------------------
    L.append("## What was covered")
    L.append("")
    L.append(f"- {summ['cells_run']} cells searched ({summ['passed']} passed, {summ['violated']} violated), "
             f"{summ['unsupported']} unsupported (the target does not declare the dtype); "
             f"{summ['examples']} examples in all.")
    L.append(f"- The budget, not an example count, ends each cell: {summ['cells_stopped_by_budget']} of "
             f"{summ['cells_run']} cells stopped when their share of the budget was spent (column *stop*; "
             f"*(cut)* marks a search interrupted mid-run). More budget means more examples per cell, nothing else.")
    for op, cov in doc["coverage"].items():
        never = ", ".join(cov["never_hit"][:12]) + (" ..." if len(cov["never_hit"]) > 12 else "")
        L.append(f"- {op}: {cov['features_hit']}/{cov['features_total']} adversarial features exercised"
                 + (f"; never hit: {never}" if cov["never_hit"] else ""))
    skipped = [t for t in doc["targets"] if not t["run"]]
    if skipped:
        L.append("- Not run here: " + "; ".join(f"{t['name']} ({t['reason']})" for t in skipped))
    L.append("")
    L.append("Errors are in ULPs of the dtype (softmax) or in units of u x sum_j p_j |v_j| (attention, u*cond); "
             "*tolerance* is the a-priori bound applied (range over elements); *max error / tolerance* above 1 is "
             "a violation; *flash rule* is max|err| / (max|err of a same-dtype naive implementation| + fwd_atol / 2), "
             "fwd_atol = 2 max|(ref + 0.3 - 0.3) - ref| in the output dtype (flash-attention's FA3 tests "
             f"accept up to 2); *rtol/atol*: recommended `torch.testing.assert_close` tolerances "
             "derived from the measured errors with a safety margin of 2 (see report.json for the basis).")
    L.append("")

    # ---- per dtype --------------------------------------------------------------------
    for dtype in dtypes_in(doc):
        cells = [c for c in doc["cells"] if c["dtype"] == dtype]
        L.append(f"## {dtype}")
        L.append("")
        rows = [[row_values(c)[k] for k, _ in COLUMNS] for c in cells]
        L += _table([h for _, h in COLUMNS], rows)
        L.append("")
        run = [c for c in cells if c["status"] != "unsupported"]
        if run:
            L.append("Special-value contract (examples with the feature that passed; violation kind if any):")
            L.append("")
            L += _table(["target"] + [h for _, h in SPECIAL_COLUMNS],
                        [[c["target"]] + [special_values_text(c["special_values"][f]) for f, _ in SPECIAL_COLUMNS]
                         for c in run])
            L.append("")

    # ---- violations -------------------------------------------------------------------
    L.append("## Violations")
    L.append("")
    if not doc["violations"]:
        L.append("None.")
        L.append("")
    for v in doc["violations"]:
        L.append(f"### {v['target']} ({v['op']}, {v['dtype']}): {v['kind']}")
        L.append("")
        L.append(v["message"] or "")
        L.append("")
        for text, code in violation_items(v):
            L.append(f"- {text}" + (f"`{code}`" if code else ""))
        if v["artifact"]:
            L.append("")
            L.append("```")
            L.append(v["replay_command"])
            L.append("```")
        L.append("")

    # ---- artifacts --------------------------------------------------------------------
    L.append("## Saved inputs")
    L.append("")
    L.append("Every violation and each cell's worst case (largest error / tolerance) is saved; "
             "`python -m verify replay FILE` re-runs it bit for bit.")
    L.append("")
    if doc["artifacts"]:
        L += _table(["kind", "target", "dtype", "file", "input"],
                    [[a["kind"], a["target"], a["dtype"], f"`{a['path']}`", a["description"] or ""]
                     for a in doc["artifacts"]])
    else:
        L.append("None.")
    L.append("")

    # ---- mutation ---------------------------------------------------------------------
    L += render_mutation(doc["mutation"])
    L += render_fa3(doc["fa3"])
    return "\n".join(L).rstrip() + "\n"


def render_mutation(mut: dict[str, Any]) -> list[str]:
    L = ["## Mutation testing", ""]
    if not mut["enabled"]:
        L += [f"Not run ({mut['reason']}).", ""]
        return L
    s = mut["summary"]
    score = "—" if s["mutation_score"] is None else f"{100 * s['mutation_score']:.0f}%"
    L.append(f"Mutation score **{score}** ({s['killed']}/{s['mutants']} known-broken kernels killed); "
             f"time to kill: median {num(s['median_seconds_to_kill'])} s, max {num(s['max_seconds_to_kill'])} s; "
             f"survivors: {', '.join(s['survivors']) or 'none'}; failed controls: "
             f"{', '.join(s['controls_failed']) or 'none'}. Budget {num(mut['budget_s'])} s "
             f"(used {num(mut['seconds'])} s), at most {mut['max_examples_per_dtype']} examples per dtype, "
             "first failure reported unshrunk.")
    if mut.get("floor_s") is not None and mut["floor_s"] > mut["budget_s"]:
        L.append("")
        L.append(f"The budget planned {num(mut['budget_s'])} s for it, less than the {num(mut['floor_s'])} s it "
                 "takes at least here (1 s a mutant and a control dtype), so it could not keep to it.")
    failed = [r for r in mut["results"] if r["status"] == "error"]
    if failed:
        L.append("")
        L.append(f"**The suite failed on {len(failed)} mutant(s)**: no verdict, left out of the score.")
        L += [f"- {r['name']} ({r['dtype'] or '—'}): {r['violation']}" for r in failed]
    limited = [r["name"] for r in mut["results"] if r["status"] == "survived" and r.get("budget_limited")]
    if limited:
        L.append("")
        L.append(f"**{len(limited)} survivor(s) were stopped by the time budget, not by the example limit** "
                 f"({', '.join(limited)}): the search did not get enough time to reach them; a larger --budget "
                 "gives mutation testing more time.")
    L.append("")
    L += _table(MUTATION_HEADERS, [mutation_row(r) for r in mut["results"]])
    L.append("")
    return L


def render_fa3(fa3: dict[str, Any] | None) -> list[str]:
    L = ["## FlashAttention-3 Table 3, reproduced", ""]
    if not fa3:
        return L + ["Not run.", ""]
    st = fa3["setting"]
    L.append(f"{fa3['source']}. Every entry of Q, K and V is drawn from {fa3['distribution']} "
             f"(seed {fa3['seed']}, {fa3['outlier_entries']} entries beyond |5|); metric: {fa3['metric']}.")
    L.append("")
    L.append(f"Setting: **{st['label']}**, scale 1/sqrt(D), no mask, on {fa3['device']}. The paper's numbers are "
             "printed beside ours; its sizes and hardware differ, so compare magnitudes and the ordering "
             "(floor <= flash-style kernels < same-dtype baseline), not digits.")
    L.append("")
    rows = []
    for r in fa3["rows"]:
        paper = ", ".join(f"{k} {num(v)}" for k, v in r["paper"].items()) or "—"
        ours = num(r["rmse"]) if r["error"] is None else f"failed: {r['error'][:80]}"
        rows.append([r["dtype"], r["label"], ours, num(r["rmse_over_floor"]), paper])
    L += _table(["dtype", "implementation", "RMSE (ours)", "RMSE / floor", "paper, Table 3"], rows)
    L.append("")
    if fa3.get("fp8_note"):
        p8 = fa3["paper"].get("float8_e4m3fn", {})
        L.append(f"FP8 e4m3: {fa3['fp8_note']} (paper: " + ", ".join(f"{k} {num(v)}" for k, v in p8.items()) + ").")
        L.append("")
    return L


def write(doc: dict[str, Any], directory: Path) -> Path:
    path = directory / "report.md"
    path.write_text(render(doc))
    return path
