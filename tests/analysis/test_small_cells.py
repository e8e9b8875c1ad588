"""Small cells (issue 38, item 6): one rule marks a cell too small for its limits to mean
anything, whatever its stdev (0 included), in `analyze`'s RCP table and in `check`'s
minimum acceptable mean alike; a full cell (2N runs) is not marked."""

from __future__ import annotations

import csv
import json

import pytest

from rcpforge.analysis.check import check_directory
from rcpforge.sweeps.spec import load_campaign
from tests.analysis.mllog_dirs import write_results
from tests.analysis.stores import file_runs
from tests.conftest import run_cli
from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.cli import invoke

# N = 3 (tiny's rcp.submission_runs): 2N = 6. (recipe, batch size) -> samples to converge.
CELLS = {
    ("bf16", 16): [4000, 4000, 4000],  # 3 runs, stdev 0
    ("bf16", 64): [9000, 9500, 10_000],  # 3 runs with spread
    ("fp8_tensorwise", 16): [4200, 4700, 5200],  # 3 runs with spread
    ("fp8_tensorwise", 64): [9000] * 6,  # full (2N runs), stdev 0
}
SMALL = ("not an RCP (3 of 2N = 6 runs); min acceptable mean and max speedup not meaningful: the checker's t-test "
         "has no degrees of freedom (olympic scoring leaves 1 reference run(s) and 1 submission run(s))")


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("small")
    path = write_campaign(folder, tiny_campaign(name="small", seeds=6))
    spec = load_campaign(path)
    file_runs(spec.tracking_uri, spec.name, (folder / "art").as_uri(),
              [{"recipe": r, "batch_size": bs, "seed": s, "status": "converged", "samples": v}
               for (r, bs), values in CELLS.items() for s, v in enumerate(values)])
    proc = run_cli("analyze", str(path), "--out", str(folder / "out"), "--resamples", "200")
    assert proc.returncode == 0, proc.stderr
    with open(folder / "out" / "rcp_table.csv") as fh:
        table = {(r["recipe"], int(r["batch_size"])): r for r in csv.DictReader(fh)}
    return folder, proc, table


def _row(stdout: str, recipe: str, bs: int) -> str:
    return next(line for line in stdout.splitlines() if f" {recipe} " in line and f" {bs} " in line)


def test_a_3_run_cell_with_stdev_0_is_marked_as_its_3_run_neighbours_in_analyze(analyzed):
    _, proc, table = analyzed
    for recipe, bs in (("bf16", 16), ("bf16", 64), ("fp8_tensorwise", 16)):
        line = _row(proc.stdout, recipe, bs)
        assert line.count("n/m") == 2 and "not an RCP (3 of 2N = 6 runs)" in line, line
        assert table[(recipe, bs)]["note"] == SMALL and table[(recipe, bs)]["degenerate"] == "true"
        assert f"note: {recipe} bs {bs}: {SMALL}; its RCP record is written" in " ".join(proc.stderr.split())
    assert float(table[("bf16", 16)]["stdev"]) == 0  # the numbers stay the checker's
    assert float(table[("bf16", 16)]["min_acceptable_mean"]) == 4000


def test_a_full_cell_gets_no_note_even_with_stdev_0(analyzed):
    folder, proc, table = analyzed
    line = _row(proc.stdout, "fp8_tensorwise", 64)
    assert "n/m" not in line and "not an RCP" not in line
    assert table[("fp8_tensorwise", 64)]["note"] == "" and table[("fp8_tensorwise", 64)]["degenerate"] == "false"
    results = write_results(folder / "full", "rcpforge_tiny", 64, [9000.0] * 3)
    result = check_directory(results, folder / "out" / "rcps_small_fp8_tensorwise.json")
    assert result.rcp_name == "rcpforge_tiny_ref_64" and result.rcp_note is None


def test_check_gives_a_too_small_rcp_the_note_of_its_cell(analyzed, cli):
    """The stdev-0 cell and its neighbours with spread: check's minimum acceptable mean
    carries the note analyze's table gives the cell, word for word (one rule)."""
    folder, _, table = analyzed
    for recipe, bs in (("bf16", 16), ("bf16", 64), ("fp8_tensorwise", 16)):
        results = write_results(folder / f"{recipe}{bs}", "rcpforge_tiny", bs, [float(v) for v in CELLS[recipe, bs]])
        rcps = folder / "out" / f"rcps_small_{recipe}.json"
        got = json.loads(invoke("check", str(results), "--rcps", str(rcps), "--json").output)
        assert got["rcp_name"] == f"rcpforge_tiny_ref_{bs}" and got["rcp_note"] == table[(recipe, bs)]["note"] == SMALL
        assert got["min_acceptable_mean"] == pytest.approx(float(table[(recipe, bs)]["min_acceptable_mean"]))
    proc = cli("check", str(folder / "bf1616"), "--rcps", str(folder / "out" / "rcps_small_bf16.json"))
    assert "min acceptable mean 4,000.0000 (not meaningful, see the note)" in proc.stdout
    assert f"note: RCP rcpforge_tiny_ref_16: {SMALL}" in " ".join(proc.stdout.split())
