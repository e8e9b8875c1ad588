"""The round's outputs (`analysis/round/report.py`): Parquet with every submission's
numbers, and the self-contained HTML round report, rendered in headless Chromium like
the campaign report: no console errors, figures embedded, every table within the page."""

from __future__ import annotations

import json
import re
import subprocess

import pyarrow.parquet as pq
import pytest

from tests.helpers.browser import chromium, layout_problems
from tests.helpers.cli import invoke
from tests.helpers.round_data import cherry_pick_round, write_submission


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """The cherry-pick round with two precision-labelled submissions more, written by
    `rcpforge round --json --parquet --html`."""
    tmp = tmp_path_factory.mktemp("round_report")
    root, rcps = cherry_pick_round(tmp)
    for i, precision in enumerate(("fp8", "fp8")):
        system = "carina_ngpu2048_ngc25.04_nemo_a_long_system_name" if i else "sys"  # a real round's kind of name
        write_submission(root / f"IBM+CoreWeave+fp8lab{i}" / "results" / system / "bert", "bert", 256, [41.0 + i] * 10,
                         {"lowest_numerical_precision_in_linear": precision})
    result = invoke("round", "--no-import", str(root), "--rcps", str(rcps), "--json",
                    "--parquet", str(tmp / "round.parquet"), "--html", str(tmp / "round.html"))
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    return tmp, rows


def test_parquet_holds_every_submission_as_the_json_does(outputs):
    tmp, rows = outputs
    table = pq.read_table(tmp / "round.parquet")
    assert table.num_rows == len(rows) == 9
    assert {"dir", "group", "robust_z", "p_value", "flagged", "run_values", "precision"} <= set(table.column_names)
    by_dir = {d: i for i, d in enumerate(table.column("dir").to_pylist())}
    for row in rows:
        i = by_dir[row["dir"]]
        assert table.column("p_value")[i].as_py() == row["p_value"]
        assert table.column("flagged")[i].as_py() == row["flagged"]
        assert table.column("run_values")[i].as_py() == row["run_values"]


def test_round_report_is_self_contained_and_shows_the_flag(outputs):
    tmp, rows = outputs
    page = (tmp / "round.html").read_text()
    (flagged,) = [r for r in rows if r["flagged"]]
    assert "lab6" in flagged["dir"]
    flags = page[page.index('id="table-flags"'):]
    assert flagged["dir"] in flags[: flags.index("</table>")]
    figures = re.findall(r'<img id="fig-(\w+)" alt="[^"]*" src="data:image/png;base64,', page)
    assert figures == ["groups", "deviations", "precision"]
    assert "http://" not in page and "https://" not in page  # nothing to fetch


def test_round_report_renders_in_headless_chromium(outputs, tmp_path):
    tmp, _ = outputs
    shot = tmp_path / "shot.png"
    proc = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", f"--screenshot={shot}", "--window-size=1200,1600", (tmp / "round.html").as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.exists(), proc.stderr[-2000:]
    assert [line for line in proc.stderr.splitlines() if ":CONSOLE" in line] == []
    import matplotlib.image as mpimg

    assert mpimg.imread(shot)[..., :3].std() > 0.05  # not a blank page
    opened = tmp_path / "opened.html"  # the folded table of every submission laid out too
    opened.write_text((tmp / "round.html").read_text().replace("<details>", "<details open>"))
    for width in (1200, 700):  # a screen, and about a printed A4 page's width
        layout = layout_problems(opened, width, tmp_path)
        assert layout["tables"] == 4 and layout["problems"] == [], (width, layout)  # flags, groups, precision, all
