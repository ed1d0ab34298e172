"""``python -m verify run`` and its report: schema, agreement of the three files, violations that replay, the HTML
in a real browser.  CPU; about a minute in all (two short campaigns are shared by the tests through fixtures).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"


def verify(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "verify", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def shared_run(tmp_path_factory, name: str, *args: str) -> tuple[Path, subprocess.CompletedProcess]:
    """Run ``python -m verify run ARGS --report out`` once per test session, even across xdist workers."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers of this session
    work = root / f"report-{name}"
    record = work / "result.json"
    with FileLock(str(work) + ".lock"):
        if not record.exists():
            work.mkdir(parents=True, exist_ok=True)
            r = verify("run", *args, "--report", "out", cwd=work)
            record.write_text(json.dumps({"returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr}))
    rec = json.loads(record.read_text())
    return work, subprocess.CompletedProcess([], rec["returncode"], rec["stdout"], rec["stderr"])


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> Path:
    """A small passing campaign: one softmax and one attention target, every dtype, no mutants."""
    work, r = shared_run(tmp_path_factory, "clean", "--budget", "20", "--targets", "torch.softmax",
                         "ref-blocked-attention", "--no-mutants", "--device", "cpu", "--seed", "11",
                         "--progress", "plain")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return work / "out"


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A campaign over a mutant named explicitly: a planted violation."""
    # --no-shrink: shrinking this counterexample takes ~15 s of CPU, which the test-suite cannot afford
    return shared_run(tmp_path_factory, "planted", "--budget", "10", "--targets", "softmax-tail-pad-zero",
                      "--dtypes", "float32", "--no-mutants", "--no-fa3", "--no-shrink", "--device", "cpu",
                      "--seed", "5")


# --------------------------------------------------------------------------------------
# parsing the Markdown and HTML back
# --------------------------------------------------------------------------------------


MD_HEADERS = {"max error": "max_error", "p99 error": "p99_error", "tolerance (min..max)": "tolerance",
              "max error / tolerance": "ratio", "flash rule (x naive)": "flash_rule"}


def md_tables(md: str) -> dict[str, list[dict[str, str]]]:
    """The first table under each '## dtype' heading, as rows of {column key: text}."""
    out: dict[str, list[dict[str, str]]] = {}
    for section in re.split(r"^## ", md, flags=re.M)[1:]:
        title, _, body = section.partition("\n")
        lines = [ln for ln in body.splitlines() if ln.startswith("|")]
        if len(lines) < 2:
            continue
        head = [MD_HEADERS.get(h.strip(), h.strip()) for h in lines[0].strip("|").split("|")]
        rows = []
        for ln in lines[2:]:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", ln.strip().strip("|"))]
            if len(cells) != len(head):
                break  # the next table (special values) starts
            rows.append(dict(zip(head, cells)))
        out[title.strip()] = rows
    return out


class _CellTables(HTMLParser):
    """Rows of the per-dtype tables (tr[data-target][data-dtype] > td[data-field]) and a few ids."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[tuple[str, str], dict[str, str]] = {}
        self.ids: dict[str, str] = {}
        self.imgs: list[str] = []
        self._row = None
        self._field = None
        self._id = None
        self._text = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-target" in a:
            self._row = self.rows.setdefault((a["data-target"], a["data-dtype"]), {})
        elif tag == "td" and self._row is not None and "data-field" in a:
            self._field, self._text = a["data-field"], ""
        elif tag == "img":
            self.imgs.append(a.get("src", ""))
        if "id" in a:
            self._id, self._text = a["id"], ""

    def handle_data(self, data):
        self._text += data

    def handle_endtag(self, tag):
        if tag == "td" and self._field is not None:
            self._row[self._field] = self._text.strip()
            self._field = None
        elif tag == "tr":
            self._row = None
        elif self._id is not None and tag in ("span", "b", "h2"):
            self.ids[self._id] = self._text.strip()
            self._id = None


def first_number(text: str) -> float:
    m = re.match(r"\s*([-+0-9.eE]+|inf|nan)", text)
    assert m, f"no number in {text!r}"
    return float(m.group(1))


def close(shown: float, exact) -> bool:
    """``shown`` is ``exact`` printed to three significant digits."""
    exact = float(exact)
    return math.isclose(shown, exact, rel_tol=5e-3, abs_tol=1e-300)


def assert_row_matches(row: dict[str, str], cell: dict, where: str) -> None:
    assert row["status"].lower() == cell["status"], where
    assert int(row["examples"]) == cell["examples"], where
    if cell["status"] == "unsupported":
        return
    assert close(first_number(row["max_error"]), cell["max_error"]), (where, row, cell["max_error"])
    assert close(first_number(row["p99_error"]), cell["p99_error"]), where
    assert close(first_number(row["ratio"]), cell["max_error_over_tolerance"]), where
    assert close(first_number(row["flash_rule"]), cell["flash_rule_ratio_max"]), where
    lo, hi = row["tolerance"].split()[0].split("..")
    assert close(float(lo), cell["tolerance_range"][0]) and close(float(hi), cell["tolerance_range"][1]), where
    rec = cell["recommended_assert_close"]
    if rec is None:
        assert row["rtol"] == "—" and row["atol"] == "—", where
    else:
        assert close(float(row["rtol"]), rec["rtol"]) and close(float(row["atol"]), rec["atol"]), where


# --------------------------------------------------------------------------------------
# the tests
# --------------------------------------------------------------------------------------


def test_report_json_validates_against_the_schema(clean_run: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    doc = json.loads((clean_run / "report.json").read_text())
    schema = json.loads((ROOT / "reports" / "schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    assert doc["schema_version"] == 1 and doc["summary"]["verdict"] == "PASS"
    env = doc["environment"]
    assert env["seed"] == 11 and env["budget_s"] == 20 and env["device"] == "cpu" and env["torch"]
    assert "--seed 11" in env["rerun_command"] and env["date"]
    cells = {(c["target"], c["dtype"]): c for c in doc["cells"]}
    assert {t for t, _ in cells} == {"torch.softmax", "ref-blocked-attention"}
    assert {d for _, d in cells} == {"float16", "bfloat16", "float32", "float64"}
    for c in doc["cells"]:
        assert c["status"] == "passed" and c["examples"] > 0, c["target"]
        assert c["stop_reason"] in ("budget", "max-examples", "exhausted")
        assert c["budget_s"] > 0 and c["worst_case_artifact"]
        assert set(c["special_values"]) == {"mask:fully-masked-row", "special:nan", "special:+inf"}
        rec = c["recommended_assert_close"]
        assert rec["rtol"] > 0 and rec["atol"] > 0 and rec["margin"] == 2
        assert c["examples_detail"]["total"] == c["examples"]
    # the per-dtype budget was shared out: total time close to the budget, not to an example count
    assert doc["budget"]["wall_s"] < 2 * 20
    assert doc["fa3"]["rows"] and "CPU-sized" in doc["fa3"]["setting"]["label"]
    assert any(r["target"] == "ref-blocked-attention" and r["dtype"] == "float16" for r in doc["fa3"]["rows"])
    assert doc["mutation"]["enabled"] is False


def test_markdown_and_html_show_the_json_numbers(clean_run: Path) -> None:
    doc = json.loads((clean_run / "report.json").read_text())
    md = (clean_run / "report.md").read_text()
    tables = md_tables(md)
    page = _CellTables()
    page.feed((clean_run / "index.html").read_text())
    for c in doc["cells"]:
        rows = [r for r in tables[c["dtype"]] if r["target"] == c["target"]]
        assert len(rows) == 1, (c["target"], c["dtype"])
        assert_row_matches(rows[0], c, f"report.md {c['target']} {c['dtype']}")
        assert_row_matches(page.rows[(c["target"], c["dtype"])], c, f"index.html {c['target']} {c['dtype']}")
    total = doc["summary"]["examples"]
    assert f"{total} examples in all" in md
    assert page.ids["total-examples"] == str(total)
    assert page.ids["verdict"] == "PASS"
    # the FA3 section prints the paper's numbers beside ours
    fa3 = [r for r in doc["fa3"]["rows"] if r["role"] == "baseline" and r["dtype"] == "float16"][0]
    assert doc["fa3"]["paper"]["float16"]["baseline"] == 3.2e-4
    assert "baseline 0.00032" in md and f"{fa3['rmse']:.3g}" in md
    # one figure per (op, dtype) plus one comparison per dtype, all inlined
    assert len(page.imgs) == 3 * 4 and all(s.startswith("data:image/png;base64,") for s in page.imgs)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", (clean_run / "index.html").read_text())


def test_planted_violation_in_all_three_files_and_replays(planted_run) -> None:
    work, r = planted_run
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    out = work / "out"
    doc = json.loads((out / "report.json").read_text())
    pytest.importorskip("jsonschema").validate(doc, json.loads((ROOT / "reports" / "schema.json").read_text()))
    assert doc["summary"]["verdict"] == "FAIL" and doc["summary"]["exit_code"] == 1
    (v,) = doc["violations"]
    assert v["target"] == "softmax-tail-pad-zero" and v["dtype"] == "float32" and v["kind"]
    cmd = v["replay_command"]
    assert cmd.startswith("python -m verify replay ") and (work / v["artifact"]).exists()
    cell = doc["cells"][0]
    assert cell["status"] == "violated" and cell["stop_reason"] == "violation"
    assert cell["recommended_assert_close"] is None
    assert any(a["kind"] == "violation" and a["path"] == v["artifact"] for a in doc["artifacts"])

    md = (out / "report.md").read_text()
    row = md_tables(md)["float32"][0]
    assert_row_matches(row, cell, "report.md")
    assert row["status"] == "VIOLATED"
    assert f"### softmax-tail-pad-zero (softmax, float32): {v['kind']}" in md and cmd in md

    html = (out / "index.html").read_text()
    page = _CellTables()
    page.feed(html)
    assert_row_matches(page.rows[("softmax-tail-pad-zero", "float32")], cell, "index.html")
    assert page.ids["verdict"] == "FAIL"
    assert 'class="violation" data-target="softmax-tail-pad-zero"' in html and cmd in html
    assert f"replay: {cmd}" in r.stdout

    rep = subprocess.run([sys.executable, *cmd.split()[1:]], cwd=work, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert rep.returncode == 1 and "VIOLATION" in rep.stdout, rep.stdout + rep.stderr


@pytest.mark.parametrize("args, needle", [
    (["--targets", "no-such-target"], "no registered target"),
    (["--dtypes", "float7"], "unknown dtype 'float7'"),
    (["--budget", "0"], "--budget must be a positive"),
    (["--device", "tpu"], "--device must be"),
])
def test_bad_arguments_exit_2(args: list[str], needle: str, tmp_path: Path, capsys) -> None:
    from verify.cli import main

    assert main(["run", *args, "--report", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed (apt-get install chromium)")
def test_html_renders_in_headless_chromium(clean_run: Path, tmp_path: Path) -> None:
    page = (clean_run / "index.html").resolve()
    r = _chromium(tmp_path, "--dump-dom", page.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    console = [ln for ln in r.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console
    m = re.search(r'data-images-decoded="(\d+)/(\d+)"', r.stdout)
    assert m, "the page's load handler did not run"
    assert int(m.group(1)) == int(m.group(2)) == 12
    shot = tmp_path / "report.png"
    r = _chromium(tmp_path, "--window-size=1280,2000", f"--screenshot={shot}", page.as_uri())
    assert r.returncode == 0 and shot.exists() and shot.stat().st_size > 50_000
    if os.environ.get("FLASHVERIFY_KEEP_SCREENSHOT"):
        shutil.copy(shot, os.environ["FLASHVERIFY_KEEP_SCREENSHOT"])


def test_a_ratio_near_one_shows_which_side_of_its_tolerance_it_is_on() -> None:
    from reports.report_md import ratio_text
    ratio = ratio_text

    assert [ratio_text(x) for x in (0.99961, 1.0, 1.0004, 0.0149, 256.3)] == ["0.9996", "1", "1.0004", "0.0149", "256"]
    assert ratio(0.99961) == "0.9996" and ratio(0.0) == "0" and ratio(None) == "—"
