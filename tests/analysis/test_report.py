"""The campaign report: every section and figure present, numbers equal `analyze`'s, and
it renders in a real headless Chromium."""

from __future__ import annotations

import base64
import csv
import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

SECTIONS = ("settings", "rcp-table", "curves", "distribution", "rcp-curve")
FIGURES = ("curves", "distribution", "rcp-curve")


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sections: list[str] = []
        self.images: dict[str, str] = {}
        self.cells: list[tuple[str, str]] = []  # (data-value, text) of numeric cells of the RCP table
        self._in_table = False
        self._cell: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.sections.append(a["id"])
        elif tag == "img":
            self.images[a["id"].removeprefix("fig-")] = a["src"]
        elif tag == "table" and a.get("id") == "table-rcp-table":
            self._in_table = True
        elif tag == "td" and self._in_table:
            self._cell = a.get("data-value")
            self.cells.append((self._cell, ""))

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_table = False


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


def test_table_numbers_equal_those_of_analyze(report):
    out, _ = report
    page = _Page()
    page.feed((out / "report.html").read_text())
    shown = [float(v) for v, _ in page.cells if v not in (None, "None")]
    expected = []
    for row in csv.DictReader(open(out / "rcp_table.csv")):
        for col in ("runs", "converged", "not_converged", "diverged", "pending_or_failed",
                    "olympic_mean", "stdev", "min_acceptable_mean", "max_speedup"):
            if row[col] != "":
                expected.append(float(row[col]))
        expected.insert(len(expected) - 9, float(row["batch_size"]))
    assert shown == expected


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
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (see .ci/run) for the rendering test")
        pytest.skip("chromium is not installed (apt-get install chromium)")
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
