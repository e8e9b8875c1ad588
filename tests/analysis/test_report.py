"""The campaign report: every section and figure present, numbers equal `analyze`'s, and
it renders in a real headless Chromium."""

from __future__ import annotations

import base64
import csv
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

SECTIONS = ("settings", "rcp-table", "curves", "distribution", "rcp-curve", "cost", "factors", "selection")
FIGURES = ("curves", "distribution", "rcp-curve", "factors")


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sections: list[str] = []
        self.images: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.sections.append(a["id"])
        elif tag == "img":
            self.images[a["id"].removeprefix("fig-")] = a["src"]


@pytest.fixture(scope="module")
def report(finished, tmp_path_factory):
    from tests.conftest import run_cli

    path, campaign, _, _ = finished
    out = tmp_path_factory.mktemp("report")
    made = run_cli("report", str(path), "--out", str(out / "report.html"))
    assert made.returncode == 0, made.stderr
    analyzed = run_cli("analyze", str(path), "--out", str(out))
    assert analyzed.returncode == 0, analyzed.stderr
    return out, campaign


def test_every_section_and_figure_is_present_and_non_empty(report):
    out, _ = report
    page = _Page()
    page.feed((out / "report.html").read_text())
    assert set(SECTIONS) <= set(page.sections)
    for key in FIGURES:
        src = page.images[key]
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


class _Tables(HTMLParser):
    """Every table of the page by id: its header and, per row, the exact value of each
    numeric cell (its data-value) or the text of the others."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, dict] = {}
        self._table = self._cell = None
        self._row: list | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(a.get("id", ""), {"header": [], "rows": []})
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = [tag, a.get("data-value"), ""]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            kind, value, text = self._cell
            self._row.append(text if kind == "th" else (float(value) if value not in (None, "None") else text))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row and all(isinstance(c, str) for c in self._row) and not self._table["header"]:
                self._table["header"] = self._row
            else:
                self._table["rows"].append(dict(zip(self._table["header"], self._row)))
            self._row = None
        elif tag == "table":
            self._table = None


def test_factor_and_selection_tables_equal_analyze_outputs(report):
    import json

    out, _ = report
    tables = _Tables()
    tables.feed((out / "report.html").read_text())
    factors = json.loads((out / "factors.json").read_text())["factors"]
    shown = tables.tables["table-factors"]["rows"]
    assert len(shown) == len(factors) > 0
    for row, f in zip(shown, factors):
        assert (row["candidate"], row["batch_size"]) == (f["candidate"], f["batch_size"])
        for col, key in (("factor", "factor"), ("ci_low", "ci_low"), ("ci_high", "ci_high"),
                         ("p_candidate_faster", "prob_candidate_faster"), ("mann_whitney_p", "mann_whitney_p")):
            # an unbounded side is null in the JSON and says so in the report
            shown = "unbounded" if f.get(f"{key}_unbounded") else "-"
            assert row[col] == (f[key] if f[key] is not None else shown), col
    cells = json.loads((out / "selection.json").read_text())["cells"]
    shown = tables.tables["table-selection"]["rows"]
    assert len(shown) == len(cells) > 0
    for row, cell in zip(shown, cells):
        assert row["honest_mean"] == cell["honest"]["mean"]
        for best in cell["best_of_k"]:
            assert row[f"gain_best_of_{best['k']}"] == best["gain"]
def test_the_cost_table_is_each_cells_recorded_compute(report):
    """Core-hours per cell: the sum of its runs' recorded wall times (one process each)."""
    from tests.cluster.helpers import runs_of

    out, campaign = report
    tables = _Tables()
    tables.feed((out / "report.html").read_text())
    _, runs = runs_of(campaign)
    shown = tables.tables["table-cost"]["rows"]
    assert len(shown) == 4
    for row in shown:
        walls = [r.data.metrics["run_wall_s"] for r in runs if r.data.tags["rcpforge.recipe"] == row["recipe"]
                 and r.data.tags["rcpforge.batch_size"] == str(int(row["batch_size"]))]
        assert len(walls) == 3 and row["core_hours"] == pytest.approx(sum(walls) / 3600, rel=1e-9)


def test_table_numbers_equal_those_of_analyze(report):
    out, _ = report
    tables = _Tables()
    tables.feed((out / "report.html").read_text())
    shown = tables.tables["table-rcp-table"]["rows"]
    expected = list(csv.DictReader(open(out / "rcp_table.csv")))
    assert len(shown) == len(expected) == 4
    for row, want in zip(shown, expected):
        assert row["recipe"] == want["recipe"]
        for col, value in want.items():
            if col in ("is_rcp", "degenerate"):
                assert row[col] == {"true": "yes", "false": "no", "": "-"}[value], col
            elif col == "note":
                assert row[col] == (value or "-")
            elif col != "recipe":
                assert row[col] == (float(value) if value != "" else "-"), col
    # the tiny campaign's cells have 3 runs and N = 3: marked, their limits shown n/m
    assert all(row["note"].startswith("not an RCP (3 of 2N = 6 runs)") for row in shown)
    page = (out / "report.html").read_text()
    assert page.count(">n/m</td>") == 2 * sum(want["degenerate"] == "true" for want in expected) > 0


def test_markdown_report_writes_pngs_beside_it(finished, tmp_path, cli):
    path, _, _, _ = finished
    made = cli("report", str(path), "--out", str(tmp_path / "r.md"), "--format", "md")
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "r.md").read_text()
    for key in FIGURES:
        assert f"]({key}.png)" in text
        assert (tmp_path / f"{key}.png").read_bytes()[:4] == b"\x89PNG"
    assert "| recipe | batch_size |" in text


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_renders_in_headless_chromium(report, tmp_path):
    browser = _chromium()
    if browser is None:
        from tests.conftest import missing_service

        missing_service("chromium is not installed (apt-get install chromium)")
    out, _ = report
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
         f"--screenshot={shot}", "--window-size=1200,1600", (out / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert shot.exists(), proc.stderr[-2000:]
    console_errors = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert console_errors == []
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1000
    assert pixels[..., :3].std() > 0.05  # not a blank page

