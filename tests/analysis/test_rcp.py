"""Our RCP arithmetic against the reference checker (mlperf-logging is the oracle)."""

from __future__ import annotations

import glob
import io
import json
import os

import mlperf_logging.rcp_checker.rcp_checker as checker_mod
import numpy as np
import pytest

from rcpforge.analysis.rcp import min_acceptable_mean, olympic_mean, rcp_stats

RULESETS = ("5.1.0", "6.0.0", "6.1.0")


def _shipped_rcp_files():
    base = os.path.dirname(checker_mod.__file__)
    for ruleset in RULESETS:
        for path in sorted(glob.glob(os.path.join(base, f"training_{ruleset}", "rcps_*.json"))):
            benchmark = os.path.basename(path)[len("rcps_"):-len(".json")]
            if benchmark in checker_mod.submission_runs["training"]:
                yield ruleset, benchmark, path


@pytest.mark.parametrize("ruleset,benchmark,path", list(_shipped_rcp_files()))
def test_stats_equal_the_checker_on_every_shipped_rcp(ruleset, benchmark, path):
    checker = checker_mod.RCP_Checker("training", ruleset, benchmark, verbose=False)
    raw = json.load(open(path))
    n = checker_mod.submission_runs["training"][benchmark]
    for name, record in checker.rcp_data.items():
        key = "samples to converge" if benchmark in ("llama2_70b_lora", "flux1") else "Epochs to converge"
        ours = rcp_stats(raw[name][key], record["BS"], benchmark, n)
        assert ours.mean == record["RCP Mean"]
        assert ours.stdev == record["RCP Stdev"]
        assert ours.min_acceptable_mean == record["Min Epochs"]
        assert ours.max_speedup == record["Max Speedup"]


def test_olympic_mean_drops_one_run_at_each_end():
    assert olympic_mean([10, 1, 5, 6, 100]) == pytest.approx(np.mean([5, 6, 10]))
    assert olympic_mean([3, 1, 2, 9, 4, 5, 6, 7, 8, 0], trim=4) == pytest.approx(4.5)


def test_min_acceptable_mean_matches_the_closed_form():
    from scipy import stats

    mean, sd, n_ref, n = 1000.0, 50.0, 18, 10
    m_star = min_acceptable_mean(mean, sd, n_ref, n)
    closed = mean - stats.t.ppf(0.95, n_ref + n - 2 - 2) * sd * np.sqrt(1 / n_ref + 1 / (n - 2))
    assert m_star == pytest.approx(closed, rel=6e-5)
    assert min_acceptable_mean(mean, 0.0, n_ref, n) == mean


def test_written_records_load_in_the_checker(tmp_path, monkeypatch):
    from rcpforge.analysis.rcp_table import rcp_records, rcp_table
    import pyarrow as pa

    values = {16: [120, 100, 110, 130, 90, 105], 64: [40, 42, 39, 45, 41, 44]}
    rows = [
        {"recipe": "bf16", "batch_size": bs, "seed": i, "status": "converged", "samples_to_target": float(v)}
        for bs, vs in values.items() for i, v in enumerate(vs)
    ]
    runs = pa.Table.from_pylist(rows)
    monkeypatch.setitem(checker_mod.submission_runs["training"], "rcpforge_unit", 3)
    records = rcp_records(runs, "bf16", "rcpforge_unit", {16: {"lr": 0.1}, 64: {"lr": 0.2}})
    assert {r["Precision"] for r in records.values()} == {"bf16"}
    checker = checker_mod.RCP_Checker("training", "6.0.0", "rcpforge_unit", False, io.StringIO(json.dumps(records)))
    table = {r["batch_size"]: r for r in rcp_table(runs, "rcpforge_unit", 3).to_pylist()}
    for record in checker.rcp_data.values():
        row = table[record["BS"]]
        assert row["olympic_mean"] == record["RCP Mean"]
        assert row["stdev"] == record["RCP Stdev"]
        assert row["min_acceptable_mean"] == record["Min Epochs"]
        assert row["max_speedup"] == record["Max Speedup"]


def test_incomplete_cell_gets_no_statistics_and_no_record():
    from rcpforge.analysis.rcp_table import rcp_records, rcp_table
    import pyarrow as pa

    rows = [{"recipe": "bf16", "batch_size": 8, "seed": i, "status": s, "samples_to_target": v}
            for i, (s, v) in enumerate([("converged", 10.0), ("converged", 12.0), ("not_converged", None), ("converged", 11.0)])]
    runs = pa.Table.from_pylist(rows)
    row = rcp_table(runs, "x", 3).to_pylist()[0]
    assert (row["runs"], row["converged"], row["not_converged"]) == (4, 3, 1)
    assert row["olympic_mean"] is None
    assert rcp_records(runs, "bf16", "x", {}) == {}


def test_min_acceptable_mean_of_an_infinite_rcp_is_nan_not_a_hang():
    # the checker's bisection would loop forever on an infinite mean (an RCP file may say
    # Infinity, or sums may overflow)
    import math

    assert math.isnan(min_acceptable_mean(float("inf"), 10.0, 8, 10))
    assert math.isnan(min_acceptable_mean(1000.0, float("inf"), 8, 10))
    assert min_acceptable_mean(float("inf"), 0.0, 8, 10) == float("inf")  # stdev 0: the checker returns the mean


def test_min_acceptable_mean_of_a_huge_rcp_ends_at_the_resolution_of_a_double(monkeypatch):
    # Above ~1e12 neighbouring doubles are more than the 1e-4 tolerance apart, and the
    # checker's loop never ends. A fuzzed RCP file with epochs ~1e20 hung the CLI here.
    import rcpforge.analysis.rcp as rcp

    calls = []

    def counted(*args):
        calls.append(args)
        assert len(calls) < 200, "the bisection does not end"  # [0, 1e20] to the last bit: ~70 halvings
        return real(*args)

    real = rcp._one_sided_p
    monkeypatch.setattr(rcp, "_one_sided_p", counted)
    mean, sd = 1e20, 1e19
    m_star = rcp.min_acceptable_mean(mean, sd, 8, 10)
    assert 0 < m_star < mean
    # and it is the checker's answer, as far as a double resolves it
    from scipy import stats

    closed = mean - stats.t.ppf(0.95, 8 + 10 - 2 - 2) * sd * np.sqrt(1 / 8 + 1 / (10 - 2))
    assert m_star == pytest.approx(closed, rel=6e-5)


# --- cells of fewer than 2N runs, and statistics that say nothing ---

def _cells(cells: dict[tuple[str, int], list[float]]):
    import pyarrow as pa

    return pa.Table.from_pylist([
        {"recipe": recipe, "batch_size": bs, "seed": i, "status": "converged", "samples_to_target": float(v)}
        for (recipe, bs), values in cells.items() for i, v in enumerate(values)])


SHORT = {("bf16", 16): [10_000, 20_000, 30_000],  # 3 runs: not an RCP with N = 3
         ("bf16", 64): [4_000, 4_100, 3_900, 4_200, 4_050, 3_950]}  # 2N = 6 runs: an RCP


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the checker's 0-dof t-test
def test_a_cell_of_fewer_than_2n_runs_keeps_its_record_marked_not_an_rcp(monkeypatch):
    from rcpforge.analysis.rcp_table import NOTE_KEY, rcp_records, rcp_table

    runs = _cells(SHORT)
    table = {r["batch_size"]: r for r in rcp_table(runs, "rcpforge_unit", 3).to_pylist()}
    short, full = table[16], table[64]
    assert (short["is_rcp"], full["is_rcp"]) == (False, True)
    assert short["note"].startswith("not an RCP (3 of 2N = 6 runs); min acceptable mean and max speedup not meaningful")
    assert full["note"] is None and full["degenerate"] is False
    records = rcp_records(runs, "bf16", "rcpforge_unit", {}, submission_runs=3)
    assert records["rcpforge_unit_ref_16"][NOTE_KEY] == "not an RCP (3 of 2N = 6 runs)"
    assert NOTE_KEY not in records["rcpforge_unit_ref_64"]
    # The checker reads the marked file as it is, the note ignored, with our statistics.
    monkeypatch.setitem(checker_mod.submission_runs["training"], "rcpforge_unit", 3)
    checker = checker_mod.RCP_Checker("training", "6.0.0", "rcpforge_unit", False, io.StringIO(json.dumps(records)))
    for record in checker.rcp_data.values():
        row = table[record["BS"]]
        assert (row["olympic_mean"], row["min_acceptable_mean"], row["max_speedup"]) == (
            record["RCP Mean"], record["Min Epochs"], record["Max Speedup"])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the checker's 0-dof t-test
def test_three_runs_with_n_3_give_a_t_test_without_degrees_of_freedom(monkeypatch):
    """Olympic scoring leaves 1 reference and 1 submission run: scipy's p-value is NaN, so
    the checker's bisection ends at the mean (max speedup 1). With N = 5 the bound
    mean - t s sqrt(1/1 + 1/3) is negative for this spread and the bisection ends at 0."""
    values = [10_000.0, 20_000.0, 30_000.0]
    monkeypatch.setitem(checker_mod.submission_runs["training"], "rcpforge_unit", 3)
    checker = checker_mod.RCP_Checker("training", "6.0.0", "rcpforge_unit", False, io.StringIO(json.dumps(
        {"r": {"Benchmark": "rcpforge_unit", "BS": 16, "Hyperparams": {}, "Epochs to converge": values}})))
    three = rcp_stats(values, 16, "rcpforge_unit", 3)
    assert three.min_acceptable_mean == checker.rcp_data["r"]["Min Epochs"]
    assert three.max_speedup == pytest.approx(1.0, abs=1e-8)
    assert "no degrees of freedom" in three.degenerate
    five = rcp_stats(values, 16, "rcpforge_unit", 5)
    assert five.min_acceptable_mean < 1e-4 and five.max_speedup > 1e8
    assert "above 0" in five.degenerate
    assert rcp_stats([4_000, 4_100, 3_900, 4_200, 4_050, 3_950], 64, "rcpforge_unit", 3).degenerate is None


def test_analyze_marks_a_short_cell_in_the_table_files_and_summary(tmp_path):
    import csv

    from rcpforge.analysis.analyze import AnalysisRequest, analyze_runs
    from rcpforge.analysis.campaign_report import rcp_table_section
    from rcpforge.analysis.report import render_html, render_markdown
    from rcpforge.analysis.selection import SelectionSettings

    req = AnalysisRequest("c", "rcpforge_unit", 3, ["bf16"], {}, resamples=200,
                          selection=SelectionSettings(draws=200, window_draws=50, max_m_factor=1))
    result = analyze_runs(_cells(SHORT), req, tmp_path)
    rows = {int(r["batch_size"]): r for r in csv.DictReader(open(tmp_path / "rcp_table.csv"))}
    assert rows[16]["is_rcp"] == "false" and rows[16]["note"].startswith("not an RCP (3 of 2N = 6 runs)")
    assert rows[64]["is_rcp"] == "true" and rows[64]["note"] == ""
    records = json.loads((tmp_path / "rcps_c_bf16.json").read_text())
    assert records["rcpforge_unit_ref_16"]["rcpforge_note"] == "not an RCP (3 of 2N = 6 runs)"
    summary = (tmp_path / "summary.md").read_text()
    short_line = next(line for line in summary.splitlines() if line.startswith("| bf16 | 16 |"))
    assert "| n/m | n/m | not an RCP (3 of 2N = 6 runs)" in short_line
    full_line = next(line for line in summary.splitlines() if line.startswith("| bf16 | 64 |"))
    assert "n/m" not in full_line and "not an RCP" not in full_line
    # the report's RCP table: the mark, n/m shown, the exact number still carried
    section = rcp_table_section(req, result.table, _cells(SHORT))
    page = render_html("r", [section])
    short_m = result.table.to_pylist()[0]["min_acceptable_mean"]
    assert f'data-value="{short_m!r}">n/m</td>' in page and "not an RCP (3 of 2N = 6 runs)" in page
    assert "| not an RCP (3 of 2N = 6 runs); min acceptable mean" in render_markdown("r", [section], tmp_path)


def test_rcp_stats_reads_the_rcp_files_analyze_writes(tmp_path):
    """A campaign's own benchmark is unknown to the checker: its N travels in the records,
    so `rcp-stats` reads the file as it is; a file without it asks for --submission-runs."""
    from typer.testing import CliRunner

    from rcpforge.analysis.analyze import AnalysisRequest, analyze_runs
    from rcpforge.analysis.rcp_set import RUNS_KEY
    from rcpforge.analysis.selection import SelectionSettings
    from rcpforge.orchestrator.cli import app

    req = AnalysisRequest("c", "rcpforge_unit", 3, ["bf16"], {}, resamples=200,
                          selection=SelectionSettings(draws=200, window_draws=50, max_m_factor=1))
    analyze_runs(_cells(SHORT), req, tmp_path)
    path = tmp_path / "rcps_c_bf16.json"
    records = json.loads(path.read_text())
    assert {r[RUNS_KEY] for r in records.values()} == {3}
    stats = CliRunner().invoke(app, ["rcp-stats", str(path), "--json"])
    assert stats.exit_code == 0, stats.output
    rows = {r["batch_size"]: r for r in json.loads(stats.output)}
    assert rows[64]["min_acceptable_mean"] == pytest.approx(
        rcp_stats(records["rcpforge_unit_ref_64"]["Epochs to converge"], 64, "rcpforge_unit", 3).min_acceptable_mean)
    for record in records.values():
        del record[RUNS_KEY]
    path.write_text(json.dumps(records))
    missing = CliRunner().invoke(app, ["rcp-stats", str(path)])
    assert missing.exit_code == 2 and "--submission-runs" in missing.output and "Traceback" not in missing.output
    given = CliRunner().invoke(app, ["rcp-stats", str(path), "--json", "--submission-runs", "3"])
    assert given.exit_code == 0 and json.loads(given.output) == json.loads(stats.output)
