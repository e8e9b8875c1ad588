"""The campaign report: every section and figure present, numbers equal `analyze`'s, and
it renders in a real headless Chromium."""

from __future__ import annotations

import base64
import csv
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.helpers.browser import chromium, layout_problems

SECTIONS = ("settings", "rcp-table", "curves", "distribution", "rcp-curve", "cost", "factors", "selection",
            "rcp-health")
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
    """Every table of the page by id: its columns (data-key) and their headers as shown,
    and per row, keyed by column, the exact value of each numeric cell (its data-value)
    or the text of the others, and (in "texts") every cell's text as shown."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, dict] = {}
        self._table = self._cell = None
        self._row: list | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(a.get("id", ""), {"header": [], "shown": [], "rows": [], "texts": []})
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag == "th" and self._row is not None:
            self._table["header"].append(a["data-key"])
            self._cell = ["th", None, ""]
        elif tag == "td" and self._row is not None:
            self._cell = ["td", a.get("data-value"), ""]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            kind, value, text = self._cell
            if kind == "th":
                self._table["shown"].append(text)
            else:
                self._row.append((float(value) if value not in (None, "None") else text, text))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row:
                self._table["rows"].append(dict(zip(self._table["header"], (v for v, _ in self._row))))
                self._table["texts"].append(dict(zip(self._table["header"], (t for _, t in self._row))))
            self._row = None
        elif tag == "table":
            self._table = None


def _tables(out) -> dict[str, dict]:
    tables = _Tables()
    tables.feed((out / "report.html").read_text())
    return tables.tables


def test_factor_and_selection_tables_equal_analyze_outputs(report):
    import json

    out, _ = report
    tables = _tables(out)
    factors = json.loads((out / "factors.json").read_text())["factors"]
    shown = tables["table-factors"]["rows"]
    assert len(shown) == len(factors) > 0
    for row, f in zip(shown, factors):
        assert (row["candidate"], row["batch_size"]) == (f["candidate"], f["batch_size"])
        for col, key in (("factor", "factor"), ("ci_low", "ci_low"), ("ci_high", "ci_high"),
                         ("p_candidate_faster", "prob_candidate_faster"), ("mann_whitney_p", "mann_whitney_p")):
            # an unbounded side is null in the JSON and says so in the report
            shown = "unbounded" if f.get(f"{key}_unbounded") else "-"
            assert row[col] == (f[key] if f[key] is not None else shown), col
    cells = json.loads((out / "selection.json").read_text())["cells"]
    shown = tables["table-selection"]["rows"]
    assert len(shown) == len(cells) > 0
    for row, cell in zip(shown, cells):
        assert row["honest_mean"] == cell["honest"]["mean"]
        for best in cell["best_of_k"]:
            assert row[f"gain_best_of_{best['k']}"] == best["gain"]
def test_the_cost_table_is_each_cells_recorded_compute(report):
    """Core-hours per cell: the sum of its runs' recorded wall times (one process each)."""
    from tests.cluster.helpers import runs_of

    out, campaign = report
    tables = _tables(out)
    _, runs = runs_of(campaign)
    shown = tables["table-cost"]["rows"]
    assert len(shown) == 4
    for row in shown:
        walls = [r.data.metrics["run_wall_s"] for r in runs if r.data.tags["rcpforge.recipe"] == row["recipe"]
                 and r.data.tags["rcpforge.batch_size"] == str(int(row["batch_size"]))]
        assert len(walls) == 3 and row["core_hours"] == pytest.approx(sum(walls) / 3600, rel=1e-9)


def test_table_numbers_equal_those_of_analyze(report):
    out, _ = report
    tables = _tables(out)
    shown = tables["table-rcp-table"]["rows"]
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


def test_the_report_shows_todays_honest_rejection_per_rcp(report):
    """One row per RCP record analyze writes, its rate the one `rcp-stats`' engine gives
    for that record with the report's sims and seed, and the eval grid's mark."""
    from rcpforge.analysis.check import DEFAULT_RULESET
    from rcpforge.analysis.policy.health import REPORT_SIMS, rcp_health
    from rcpforge.analysis.rcp_set import load_rcp_sets

    out, campaign = report
    shown = _tables(out)["table-rcp-health"]["rows"]
    expected = []
    for recipe in (r.name for r in campaign.recipes):
        for rcp_set in load_rcp_sets(str(out / f"rcps_{campaign.name}_{recipe}.json")):
            for name, h in rcp_health(rcp_set, DEFAULT_RULESET, REPORT_SIMS, seed=0).items():
                expected.append({"recipe": recipe, "batch_size": float(rcp_set.full[name].bs), "runs": 3.0,
                                 "honest_rejected": h["honest_rejected"], "honest_rejected_se": h["honest_rejected_se"],
                                 "eval_grid": h["coarse"] or "-"})
    assert len(shown) == len(expected) == 4
    assert sorted(shown, key=lambda r: (r["recipe"], r["batch_size"])) == sorted(
        expected, key=lambda r: (r["recipe"], r["batch_size"]))
    assert f"from {REPORT_SIMS:,} seeded simulated submissions (seed 0)" in (out / "report.html").read_text()


def test_markdown_report_writes_pngs_beside_it(finished, tmp_path, cli):
    """The format follows --out's name (no --format), the figures are named after the
    report, readable headers, and the settings come last."""
    path, _, _, _ = finished
    made = cli("report", str(path), "--out", str(tmp_path / "r.md"))
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "r.md").read_text()
    assert not text.lstrip().startswith("<")
    for key in FIGURES:
        assert f"](r-{key}.png)" in text
        assert (tmp_path / f"r-{key}.png").read_bytes()[:4] == b"\x89PNG"
    assert "| recipe | batch size | runs |" in text and "| max speedup |" in text and "| runs required |" in text
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0].startswith("## Convergence factors") and headings[1] == "## RCP table"
    assert headings[-1] == "## Campaign settings"


def test_report_format_follows_the_file_name_unless_given(tmp_path, cli):
    import typer

    from rcpforge.orchestrator.cli.report import report_format

    assert report_format(Path("y.md"), None) == "md"
    assert report_format(Path("out/r.HTML"), None) == "html"
    assert report_format(Path("y.md"), "html") == "html"  # --format overrides the name
    with pytest.raises(typer.Exit) as failed:
        report_format(Path("y.txt"), None)
    assert failed.value.exit_code == 2
    made = cli("report", str(tmp_path / "campaign.yaml"), "--out", str(tmp_path / "y.txt"))
    assert made.returncode == 2 and "Traceback" not in made.stderr
    assert made.stderr.strip().count("\n") == 0 and "--format html|md" in made.stderr


def test_markdown_reports_in_one_folder_keep_their_own_figures(tmp_path):
    from rcpforge.analysis.report import Section, write_report

    for name in ("a", "b"):
        figure = b"\x89PNG" + name.encode()
        write_report(tmp_path / f"{name}.md", name, [Section("curves", "Curves", figure=figure)], "md")
    for name in ("a", "b"):
        assert (tmp_path / f"{name}-curves.png").read_bytes() == b"\x89PNG" + name.encode()
        assert f"]({name}-curves.png)" in (tmp_path / f"{name}.md").read_text()


def test_the_headline_comes_first_and_the_settings_last_folded(report):
    out, _ = report
    page = _Page()
    html = (out / "report.html").read_text()
    page.feed(html)
    assert page.sections[:3] == ["factors", "rcp-table", "selection"]
    assert page.sections[-1] == "settings"
    assert '<section id="settings"><details><summary>' in html


def test_table_headers_are_readable(report):
    from rcpforge.analysis.display import header

    out, _ = report
    tables = _tables(out)
    assert len(tables) == 7  # factors, RCP table, selection, RCP health, cost, and a precision map per recipe
    for key, table in tables.items():
        assert table["shown"] == [header(c) for c in table["header"]], key
        assert not [h for h in table["shown"] if "_" in h], key
    assert {"batch size", "min acceptable mean", "max speedup", "pending or failed", "is RCP"} <= set(
        tables["table-rcp-table"]["shown"])
    assert {"runs required", "outlier sets", "gain, best of 5"} <= set(tables["table-selection"]["shown"])
    assert {"P(candidate faster)", "Mann-Whitney p", "CI low"} <= set(tables["table-factors"]["shown"])


def test_the_report_shows_each_recipes_precision_map(report):
    out, _ = report
    tables = _tables(out)
    for recipe, fc1 in (("bf16", ["bf16"] * 3), ("fp8_tensorwise", ["e4m3", "e5m2 x e4m3", "e5m2 x e4m3"])):
        table = tables[f"table-precision-map-{recipe}"]
        rows = {r["layer"]: [r["fprop"], r["dgrad"], r["wgrad"]] for r in table["rows"]}
        assert rows["blocks.0.fc1"] == fc1 and rows["blocks.0.attn_qk"] == rows["lm_head"] == ["bf16"] * 3
    html = (out / "report.html").read_text()
    assert "linear fp8, attn bfloat16, comm fp32" in html and "linear bfloat16, attn bfloat16, comm fp32" in html


def _md_table(text: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first markdown table under the `## heading...` line, by header."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"## {heading}"))
    block = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            block.append([c.strip() for c in line.strip("|").split(" | ")])
    if not block:
        return []
    return [dict(zip(block[0], row)) for row in block[2:]]


def test_the_report_shows_every_value_as_summary_md_does(report):
    out, _ = report
    tables = _tables(out)
    summary = (out / "summary.md").read_text()
    for heading, key in (("RCP table", "table-rcp-table"), ("Convergence factors", "table-factors"),
                         ("Selection", "table-selection")):
        md = _md_table(summary, heading)
        shown = [dict(zip(tables[key]["shown"], row.values())) for row in tables[key]["texts"]]
        assert len(md) == len(shown) > 0
        common = set(md[0]) & set(shown[0])
        assert len(common) >= 6, common
        for m, h in zip(md, shown):
            assert {c: h[c] for c in common} == {c: m[c] for c in common}, heading
            if key == "table-factors":
                assert m["interval"] == f"{h['CI low']} .. {h['CI high']}"
            if key == "table-selection":
                gains = [c.removeprefix("gain, best of ") for c in h if c.startswith("gain, best of ")]
                assert m["best-of-K gain (K: gain)"] == ", ".join(f"{k}: {h[f'gain, best of {k}']}" for k in gains)


def test_runs_required_beyond_the_largest_m_tried_reads_the_same_everywhere():
    """None (no M up to max_m_factor x N keeps the gain under the tolerance) was "-" in
    the report and "> 15" in summary.md."""
    from rcpforge.analysis.campaign_report import selection_section
    from rcpforge.analysis.report import render_html, render_markdown
    from rcpforge.analysis.selection import Selection, SelectionSettings

    cell = Selection("bf16", 16, 3, 3, None, None, {"mean": 10.0, "stdev": 1.0, "pass_prob": 0.5},
                     best_of_k=[{"k": 2, "gain": 0.0123}], runs_required=None)
    section = selection_section([cell], SelectionSettings(max_m_factor=5))
    assert ">&gt; 15</td>" in render_html("r", [section])
    row = render_markdown("r", [section], Path("."))
    assert "| 1.23% | > 15 | - |" in row


def test_report_renders_in_headless_chromium(report, tmp_path):
    browser = chromium()
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


@pytest.mark.parametrize("width", [1200, 700])  # a screen, and about a printed A4 page's width
def test_every_table_column_is_visible_within_the_page_width(report, tmp_path, width):
    out, _ = report
    layout = layout_problems(out / "report.html", width, tmp_path)
    assert layout["width"] > width - 30 and layout["tables"] == 7  # 5, and a precision map per recipe
    assert layout["problems"] == []


def _seed_runs(seeds: int):
    import pyarrow as pa

    cells = [(r, b, s) for r in ("bf16", "fp8") for b in (16, 64) for s in range(seeds)]
    runs = pa.table({"run_id": [f"{r}-{b}-{s}" for r, b, s in cells], "recipe": [c[0] for c in cells],
                     "batch_size": [c[1] for c in cells], "seed": [c[2] for c in cells]})
    points = [(f"{r}-{b}-{s}", t, 1.0 / (t + s)) for r, b, s in cells for t in (1, 2, 3)]
    curves = pa.table({"run_id": [p[0] for p in points], "metric": ["loss"] * len(points),
                       "tokens": [p[1] for p in points], "value": [p[2] for p in points]})
    return runs, curves


def test_eval_curves_name_each_seed_in_a_legend():
    from rcpforge.analysis.plots import eval_curves_figure

    fig = eval_curves_figure(*_seed_runs(3), "loss", 0.3)
    (legend,) = fig.legends
    assert legend.get_title().get_text() == "seed"
    assert [t.get_text() for t in legend.get_texts()] == ["0", "1", "2"]
    colour = {t.get_text(): h.get_color() for t, h in zip(legend.get_texts(), legend.legend_handles)}
    drawn = [line for ax in fig.axes for line in ax.get_lines() if line.get_label().startswith("seed ")]
    assert len(drawn) == 12  # 4 panels x 3 seeds, each seed in its legend colour in every panel
    assert all(line.get_color() == colour[line.get_label().removeprefix("seed ")] for line in drawn)


def test_eval_curves_of_many_seeds_get_a_colour_bar():
    from rcpforge.analysis.plots import LEGEND_SEEDS, eval_curves_figure

    fig = eval_curves_figure(*_seed_runs(LEGEND_SEEDS + 30), "loss", 0.3)
    assert fig.legends == []
    assert [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel() == "seed"] == ["seed"]
    colours = {tuple(line.get_color()) for ax in fig.axes for line in ax.get_lines()
               if line.get_label().startswith("seed ")}
    assert len(colours) == LEGEND_SEEDS + 30


def test_the_rcp_health_section_gives_todays_honest_rejection_and_the_eval_grids_mark():
    """Per RCP record of the campaign: today's honest rejection against an exact
    enumeration (every ordered draw of N = 4 runs from the record's runs, the olympic
    mean against the record's own minimum acceptable mean), the sims count beside it, and
    the mark of an RCP the eval grid squeezed; a cell with a failed run has no record."""
    import itertools
    import math

    import pyarrow as pa

    from rcpforge.analysis.analyze import AnalysisRequest
    from rcpforge.analysis.campaign_report import rcp_health_section
    from rcpforge.analysis.policy.health import REPORT_SIMS
    from rcpforge.analysis.rcp_table import rcp_table
    from rcpforge.analysis.report import render_html, render_markdown

    cells = {("bf16", 16): [7000] * 2 + [10000] * 6,  # 2 distinct values, a fat fast tail
             ("bf16", 64): [19000, 18200, 19500, 18800, 19900, 18100, 19300, 20400],
             ("fp8", 16): [4500] * 7 + [None]}
    runs = pa.Table.from_pylist([
        {"recipe": recipe, "batch_size": bs, "seed": i, "status": "converged" if v else "not_converged",
         "samples_to_target": None if v is None else float(v)}
        for (recipe, bs), values in cells.items() for i, v in enumerate(values)])
    req = AnalysisRequest("c", "rcpforge_unit", 4, ["bf16", "fp8"], {}, seed=3)
    section = rcp_health_section(req, runs)
    rows = {(r["recipe"], r["batch_size"]): r for r in section.rows}
    assert set(rows) == {("bf16", 16), ("bf16", 64)}
    assert rows[("bf16", 16)]["eval_grid"] == "2 distinct values" and rows[("bf16", 64)]["eval_grid"] == "-"
    limits = {(r["recipe"], r["batch_size"]): r["min_acceptable_mean"]
              for r in rcp_table(runs, "rcpforge_unit", 4).to_pylist()}
    for key, row in rows.items():
        values = cells[key]
        exact = sum(sum(sorted(draw)[1:3]) / 2 < limits[key]
                    for draw in itertools.product(values, repeat=4)) / len(values) ** 4
        shown, se = row["honest_rejected"].value, row["honest_rejected_se"].value
        assert abs(shown - exact) < 4.5 * math.sqrt(exact * (1 - exact) / REPORT_SIMS) + 1e-12, (key, shown, exact)
        assert se == pytest.approx(math.sqrt(shown * (1 - shown) / REPORT_SIMS))
    assert 0.03 < rows[("bf16", 16)]["honest_rejected"].value < 0.08  # the case is not trivial
    page = render_html("r", [section])
    assert f"from {REPORT_SIMS:,} seeded simulated submissions (seed 3)" in page
    assert f'data-value="{rows[("bf16", 16)]["honest_rejected"].value!r}">' in page
    coarse = rows[("bf16", 16)]
    assert (f"| bf16 | 16 | 8 | {coarse['honest_rejected'].value:.1%} | {coarse['honest_rejected_se'].value:.1%} "
            "| 2 distinct values |") in render_markdown("r", [section], Path("."))
