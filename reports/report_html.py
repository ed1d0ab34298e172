"""index.html of ``python -m verify run``: one self-contained page rendered from report.json.

Figures are drawn with matplotlib and inlined as base64 PNG; the CSS is inline and
there is no external resource of any kind, so the page reads the same offline.  A
six-line inline script only marks ``<body data-images-decoded="n/m">`` once the
page has loaded (and logs a console error for an image that failed to decode), so
a headless browser can check the page; the report does not need it.

Per dtype: the error distribution (histogram of the sampled element errors), error
against row length, error against input range, measured error against the a-priori
bound, and the cross-target comparison.  Regenerate from a saved report with
``python -m reports.report_html DIR/report.json``.
"""

from __future__ import annotations

import base64
import html
import io
import math
import sys
from pathlib import Path
from typing import Any

from reports.report_md import (COLUMNS, MUTATION_HEADERS, SPECIAL_COLUMNS, dtypes_in, mutation_row, num, row_values,
                               special_values_text, verdict_reasons, versions_text,
                               violation_items)

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1280px;color:#1b1f24;
line-height:1.45;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.3em} h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.8em}
h3{margin-top:1.3em}
table{border-collapse:collapse;margin:.6em 0 1em;font-size:.86em}
th,td{border:1px solid #d0d7de;padding:.25em .55em;text-align:left;vertical-align:top}
th{background:#f3f5f7} td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.violated td{background:#ffebe9} tr.unsupported td{color:#8c959f}
.verdict-PASS{color:#1a7f37} .verdict-FAIL{color:#cf222e}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.85em;background:#f6f8fa}
pre{padding:.6em;overflow-x:auto;border:1px solid #d0d7de}
figure{margin:1em 0} figure img{max-width:100%;border:1px solid #d0d7de}
figcaption{font-size:.85em;color:#57606a}
.note{color:#57606a;font-size:.9em}
"""

SCRIPT = """<script>
window.addEventListener("load", function () {
  var imgs = document.images, ok = 0;
  for (var i = 0; i < imgs.length; i++) {
    if (imgs[i].complete && imgs[i].naturalWidth > 0) { ok++; }
    else { console.error("figure " + i + " failed to decode"); }
  }
  document.body.setAttribute("data-images-decoded", ok + "/" + imgs.length);
});
</script>"""

FLOOR = 1e-4  # errors of exactly 0 are drawn here on log axes


def e(x: Any) -> str:
    return html.escape(str(x), quote=True)


# --------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _log(ax, which: str = "xy") -> None:
    """Log axes with a bounded number of ticks (errors and ranges may span 1e-4 .. 1e300).

    Call after plotting: an axis whose data spans less than a decade and a half stays linear,
    where a log axis would show no tick label at all.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    for w in which:
        lo, hi = ax.dataLim.intervalx if w == "x" else ax.dataLim.intervaly
        if not (lo > 0 and math.isfinite(hi)) or hi / lo < 30:
            continue
        axis = ax.xaxis if w == "x" else ax.yaxis
        (ax.set_xscale if w == "x" else ax.set_yscale)("log")
        axis.set_major_locator(LogLocator(base=10, numticks=7))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # plain text: no mathtext parsing
        axis.set_minor_locator(NullLocator())


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    _plt().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _colors(names: list[str]) -> dict[str, Any]:
    plt = _plt()
    cmap = plt.get_cmap("tab10")
    return {n: cmap(i % 10) for i, n in enumerate(names)}


def _zero_at(values: list[float]) -> float:
    """Where errors of exactly 0 are drawn on a log axis: a decade below the smallest nonzero one."""
    pos = [v for v in values if v > 0 and math.isfinite(v)]
    return min(FLOOR, min(pos) / 10) if pos else FLOOR


def _clip(v: float, zero: float) -> float:
    if not math.isfinite(v):
        return 1e308 if v > 0 else zero
    return v if v > 0 else zero


def _f(x: Any) -> float:
    if isinstance(x, str):
        return float(x)
    return float(x) if x is not None else float("nan")


def op_figure(cells: list[dict[str, Any]], op: str, dtype: str, colors: dict[str, Any]) -> str | None:
    """2 x 2 panels for one op in one dtype: distribution, vs length, vs input range, vs the bound."""
    cells = [c for c in cells if c["op"] == op and c["status"] != "unsupported" and c["examples"]]
    if not cells:
        return None
    plt = _plt()
    unit = cells[0]["error_unit"]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.2))
    ax = axes[0][0]
    for c in cells:
        h = c["error_histogram"]
        if not h:
            continue
        counts = h["counts"]
        total = max(h["samples"], 1)
        edges = [10 ** (h["log10_min"] + i * h["log10_step"]) for i in range(len(counts) + 1)]
        frac = [n / total for n in counts]
        ax.stairs(frac, edges, color=colors[c["target"]], linewidth=1.6,
                  label=f"{c['target']} ({100 * h['zeros'] / total:.0f}% exact)")
    _log(ax, "x")
    ax.set_xlabel(f"element error ({unit})")
    ax.set_ylabel("fraction of sampled elements")
    ax.set_title("error distribution")
    ax.legend(fontsize=7)

    all_errors = [_f(r[2]) for c in cells for r in c["examples_detail"]["rows"]]
    all_errors += [_f(p[1]) for c in cells for p in c["error_vs_tolerance"]]
    zero = _zero_at(all_errors)

    def scatter(ax, xkey: int, xlabel: str, title: str) -> None:
        for c in cells:
            rows = c["examples_detail"]["rows"]
            xs = [_clip(_f(r[xkey]), 1e-3) for r in rows]
            ys = [_clip(_f(r[2]), zero) for r in rows]
            bad = [bool(r[6]) for r in rows]
            ax.scatter([x for x, b in zip(xs, bad) if not b], [y for y, b in zip(ys, bad) if not b], s=9,
                       alpha=.55, color=colors[c["target"]], label=c["target"])
            if any(bad):
                ax.scatter([x for x, b in zip(xs, bad) if b], [y for y, b in zip(ys, bad) if b], s=60,
                           marker="x", color="#cf222e", label=f"{c['target']}: violation")
        _log(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"max error of the example ({unit})")
        ax.set_title(title)
        ax.legend(fontsize=7)

    scatter(axes[0][1], 0, "row length" if op == "softmax" else "key length Nk", "error vs row length")
    scatter(axes[1][0], 1, "logit spread max-min of a row (0 drawn at 0.001)" if op == "softmax"
            else "score range bound 2|scale| max|q_i| max|k_j| (0 drawn at 0.001)", "error vs input range")
    ax = axes[1][1]
    lo, hi = math.inf, 0.0
    for c in cells:
        pairs = c["error_vs_tolerance"]
        if not pairs:
            continue
        tols = [_f(p[0]) for p in pairs]
        errs = [_clip(_f(p[1]), zero) for p in pairs]
        lo, hi = min(lo, min(tols)), max(hi, max(tols), max(errs))
        ax.scatter(tols, errs, s=8, alpha=.5, color=colors[c["target"]], label=c["target"])
    if hi > 0 and lo < math.inf:
        ax.plot([lo, hi], [lo, hi], color="#cf222e", linewidth=1.2, label="error = tolerance (a-priori bound)")
    _log(ax)
    ax.set_xlabel(f"tolerance of the element ({unit})")
    ax.set_ylabel(f"measured error ({unit})")
    ax.set_title("measured error against the a-priori bound")
    ax.legend(fontsize=7)
    fig.suptitle(f"{op}, {dtype}: {len(cells)} target(s); errors of exactly 0 drawn at {zero:.3g}", fontsize=11)
    fig.tight_layout()
    return _png(fig)


def comparison_figure(cells: list[dict[str, Any]], dtype: str, colors: dict[str, Any]) -> str | None:
    cells = [c for c in cells if c["status"] != "unsupported" and c["examples"]]
    if not cells:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(13, 0.5 * len(cells) + 1.8))
    names = [f"{c['target']} [{c['error_unit']}]" for c in cells]
    ys = list(range(len(cells)))
    ax = axes[0]
    zero = _zero_at([_f(c[k]) for c in cells for k in ("max_error", "p99_error", "median_error")])
    for y, c in zip(ys, cells):
        col = colors[c["target"]]
        for key, marker in (("max_error", "o"), ("p99_error", "s"), ("median_error", "^")):
            ax.scatter([_clip(_f(c[key]), zero)], [y], marker=marker, color=col, s=36)
    ax.scatter([], [], marker="o", color="gray", label="max")
    ax.scatter([], [], marker="s", color="gray", label="p99")
    ax.scatter([], [], marker="^", color="gray", label="median")
    _log(ax, "x")
    ax.set_yticks(ys, names)
    ax.set_title(f"element error (ULP or u*cond; 0 at {zero:.2g})")
    ax.legend(fontsize=7)
    ax = axes[1]
    rzero = _zero_at([_f(c["max_error_over_tolerance"]) for c in cells])
    ratios = [_clip(_f(c["max_error_over_tolerance"]), rzero) for c in cells]
    ax.barh(ys, [r - rzero for r in ratios], left=rzero,
            color=[("#cf222e" if c["status"] == "violated" else colors[c["target"]]) for c in cells])
    ax.axvline(1.0, color="#cf222e", linewidth=1)
    _log(ax, "x")
    ax.set_yticks(ys, [""] * len(ys))
    ax.set_title("max error / tolerance (violation > 1)")
    ax = axes[2]
    flash = [_f(c["flash_rule_ratio_max"]) for c in cells]
    ax.barh(ys, flash, color=[colors[c["target"]] for c in cells])
    ax.axvline(2.0, color="#cf222e", linewidth=1)
    ax.set_yticks(ys, [""] * len(ys))
    ax.set_title("flash rule: err / naive err (limit 2)")
    for a in axes:
        a.invert_yaxis()
    fig.suptitle(f"{dtype}: cross-target comparison", fontsize=11)
    fig.tight_layout()
    return _png(fig)


# --------------------------------------------------------------------------------------
# page
# --------------------------------------------------------------------------------------


def _tr(values: list[str], cls: str = "", fields: list[str] | None = None, numeric: set[str] = frozenset(),
        attrs: str = "") -> str:
    tds = []
    for i, v in enumerate(values):
        f = fields[i] if fields else None
        c = ' class="num"' if f in numeric else ""
        df = f' data-field="{e(f)}"' if f else ""
        tds.append(f"<td{c}{df}>{e(v)}</td>")
    return f'<tr{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}{attrs}>' + "".join(tds) + "</tr>"


def _table(headers: list[str], rows: list[str], cls: str = "") -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    return f'<table{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}><thead><tr>{head}</tr></thead><tbody>' + \
        "".join(rows) + "</tbody></table>"


def _figure(b64: str | None, alt: str, caption: str) -> str:
    if b64 is None:
        return ""
    return (f'<figure><img alt="{e(alt)}" src="data:image/png;base64,{b64}">'
            f"<figcaption>{e(caption)}</figcaption></figure>")


def render(doc: dict[str, Any]) -> str:
    import warnings

    with warnings.catch_warnings():  # log axes over ranges up to 1e308 make numpy warn about overflow
        warnings.simplefilter("ignore", RuntimeWarning)
        return _render(doc)


def _render(doc: dict[str, Any]) -> str:
    env, summ, bud = doc["environment"], doc["summary"], doc["budget"]
    try:
        _plt()
        have_plots = True
    except ImportError:
        have_plots = False
    P: list[str] = []
    P.append(f'<h1>flashverify campaign report: <span class="verdict-{e(summ["verdict"])}" id="verdict">'
             f'{e(summ["verdict"])}</span></h1>')
    versions = versions_text(env)
    info = [
        ("verdict", f"{summ['verdict']} (exit code {summ['exit_code']})" + verdict_reasons(summ)),
        ("device", f"{env['device']}: {env['device_name']}"
                   + (" (Triton interpreter)" if env.get("triton_interpret") else "")),
        ("budget", f"{num(bud['total_s'])} s; wall {num(bud['wall_s'])} s (FA3 {num(bud['fa3_s'])} s, mutation "
                   f"{num(bud['mutants_s'])} s, cells {num(bud['cells_s'])} s)"),
        ("seed", str(env["seed"])), ("command", env["command_line"]), ("rerun", env["rerun_command"]),
        ("date", env["date"]), ("versions", versions),
        ("git", (env.get("git_commit") or "unknown")[:12] + (" (uncommitted changes)" if env.get("git_dirty") else "")),
    ]
    P.append(_table(["", ""], [_tr([k, v], fields=["key", k]) for k, v in info], "info"))

    P.append("<h2>What was covered</h2><ul>")
    P.append(f"<li>{summ['cells_run']} cells searched ({summ['passed']} passed, {summ['violated']} violated), "
             f"{summ['unsupported']} unsupported; <span id=\"total-examples\">{summ['examples']}</span> "
             "examples in all.</li>")
    P.append(f"<li>The budget, not an example count, ends each cell: {summ['cells_stopped_by_budget']} of "
             f"{summ['cells_run']} cells stopped when their share was spent (column <i>stop</i>; <i>(cut)</i> marks "
             "a search interrupted mid-run).</li>")
    for op, cov in doc["coverage"].items():
        never = ", ".join(cov["never_hit"])
        P.append(f"<li>{e(op)}: {cov['features_hit']}/{cov['features_total']} adversarial features exercised"
                 + (f"; never hit: <code>{e(never)}</code>" if never else "") + "</li>")
    for t in doc["targets"]:
        if not t["run"]:
            P.append(f"<li>Not run here: {e(t['name'])} ({e(t['reason'])})</li>")
    P.append("</ul>")
    P.append('<p class="note">Errors in ULPs (softmax) or u x sum_j p_j|v_j| (attention, u*cond); tolerance = the '
             "a-priori bound applied; max error / tolerance above 1 is a violation; flash rule = max|err| / "
             "max|err| of "
             "a same-dtype naive implementation (flash-attention accepts 2); rtol/atol = recommended "
             "<code>torch.testing.assert_close</code> tolerances (2x the measured errors).</p>")
    if not have_plots:
        P.append('<p class="note">matplotlib is not installed: figures omitted (pip install matplotlib).</p>')

    targets_order = list(dict.fromkeys(c["target"] for c in doc["cells"]))
    colors = _colors(targets_order) if have_plots else {}
    fields = [k for k, _ in COLUMNS]
    numeric = {"examples", "max_error", "p99_error", "median_error", "tolerance", "ratio", "flash_rule", "rtol", "atol"}
    for dtype in dtypes_in(doc):
        cells = [c for c in doc["cells"] if c["dtype"] == dtype]
        P.append(f'<h2 id="dtype-{e(dtype)}">{e(dtype)}</h2>')
        rows = []
        for c in cells:
            vals = row_values(c)
            rows.append(_tr([vals[k] for k in fields], c["status"], fields, numeric,
                            f' data-target="{e(c["target"])}" data-dtype="{e(dtype)}"'))
        P.append(_table([h for _, h in COLUMNS], rows, "cells"))
        run = [c for c in cells if c["status"] != "unsupported"]
        if run:
            P.append("<p>Special-value contract (examples with the feature that passed; violation kind if any):</p>")
            P.append(_table(["target"] + [h for _, h in SPECIAL_COLUMNS],
                            [_tr([c["target"]] + [special_values_text(c["special_values"][f])
                                                  for f, _ in SPECIAL_COLUMNS]) for c in run]))
        if have_plots:
            for op in ("softmax", "attention"):
                P.append(_figure(op_figure(cells, op, dtype, colors), f"{op} {dtype} error figures",
                                 f"{op}, {dtype}: distribution of sampled element errors; per-example max error "
                                 "against row length and input range (red x: the violating example); sampled "
                                 "element errors against their tolerance (red line: the bound)."))
            P.append(_figure(comparison_figure(cells, dtype, colors), f"{dtype} cross-target comparison",
                             f"{dtype}: max / p99 / median error, error over tolerance and the flash-attention "
                             "rule, per target."))

    P.append("<h2>Violations</h2>")
    if not doc["violations"]:
        P.append("<p>None.</p>")
    for v in doc["violations"]:
        P.append(f'<h3 class="violation" data-target="{e(v["target"])}" data-dtype="{e(v["dtype"])}">'
                 f"{e(v['target'])} ({e(v['op'])}, {e(v['dtype'])}): {e(v['kind'])}</h3>")
        P.append(f"<p>{e(v['message'] or '')}</p><ul>")
        for text, code in violation_items(v):
            P.append(f"<li>{e(text)}" + (f"<code>{e(code)}</code>" if code else "") + "</li>")
        P.append("</ul>")
        if v["replay_command"]:
            P.append(f'<pre class="replay">{e(v["replay_command"])}</pre>')

    P.append("<h2>Saved inputs</h2><p>Every violation and each cell's worst case is saved; "
             "<code>python -m verify replay FILE</code> re-runs it bit for bit.</p>")
    if doc["artifacts"]:
        P.append(_table(["kind", "target", "dtype", "file", "input"],
                        [_tr([a["kind"], a["target"], a["dtype"], a["path"], a["description"] or ""])
                         for a in doc["artifacts"]]))

    mut = doc["mutation"]
    P.append("<h2>Mutation testing</h2>")
    if not mut["enabled"]:
        P.append(f"<p>Not run ({e(mut['reason'])}).</p>")
    else:
        s = mut["summary"]
        score = "—" if s["mutation_score"] is None else f"{100 * s['mutation_score']:.0f}%"
        P.append(f"<p>Mutation score <b id=\"mutation-score\">{e(score)}</b> ({s['killed']}/{s['mutants']} killed); "
                 f"time to kill: median {e(num(s['median_seconds_to_kill']))} s, max "
                 f"{e(num(s['max_seconds_to_kill']))} s; survivors: {e(', '.join(s['survivors']) or 'none')}; "
                 f"failed controls: {e(', '.join(s['controls_failed']) or 'none')}. "
                 f"Budget {e(num(mut['budget_s']))} s.</p>")
        limited = [r["name"] for r in mut["results"] if r["status"] == "survived" and r.get("budget_limited")]
        if limited:
            P.append(f"<p><b>{len(limited)} survivor(s) were stopped by the time budget, not by the example limit</b> "
                     f"({e(', '.join(limited))}): a larger --budget gives mutation testing more time.</p>")
        P.append(_table(MUTATION_HEADERS,
                        [_tr(mutation_row(r), "violated" if r["status"] in ("survived", "control-failed") else "")
                         for r in mut["results"]]))

    fa3 = doc["fa3"]
    P.append("<h2>FlashAttention-3 Table 3, reproduced</h2>")
    if not fa3:
        P.append("<p>Not run.</p>")
    else:
        st = fa3["setting"]
        P.append(f"<p>{e(fa3['source'])}. Q, K, V entries from {e(fa3['distribution'])} (seed {fa3['seed']}); "
                 f"metric: {e(fa3['metric'])}.</p><p>Setting: <b>{e(st['label'])}</b>, on {e(fa3['device'])}. The "
                 "paper's numbers are printed beside ours; its sizes and hardware differ, so compare magnitudes "
                 "and ordering, not digits.</p>")
        rows = []
        for r in fa3["rows"]:
            paper = ", ".join(f"{k} {num(v)}" for k, v in r["paper"].items()) or "—"
            ours = num(r["rmse"]) if r["error"] is None else f"failed: {r['error'][:80]}"
            rows.append(_tr([r["dtype"], r["label"], ours, num(r["rmse_over_floor"]), paper],
                            fields=["dtype", "label", "rmse", "rmse_over_floor", "paper"],
                            numeric={"rmse", "rmse_over_floor"}))
        P.append(_table(["dtype", "implementation", "RMSE (ours)", "RMSE / floor", "paper, Table 3"], rows, "fa3"))
        if fa3.get("fp8_note"):
            p8 = fa3["paper"].get("float8_e4m3fn", {})
            P.append(f"<p>FP8 e4m3: {e(fa3['fp8_note'])} (paper: "
                     + e(", ".join(f"{k} {num(v)}" for k, v in p8.items())) + ").</p>")

    body = "\n".join(p for p in P if p)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>flashverify report: {e(summ['verdict'])}</title><style>{CSS}</style></head>\n"
            f"<body>\n{body}\n{SCRIPT}\n</body></html>\n")


def write(doc: dict[str, Any], directory: Path) -> Path:
    path = directory / "index.html"
    path.write_text(render(doc), encoding="utf-8")
    return path


if __name__ == "__main__":  # python -m reports.report_html DIR/report.json
    import json

    src = Path(sys.argv[1])
    out = write(json.loads(src.read_text()), src.parent)
    print(out)
