"""Our RCP arithmetic against the reference checker (mlperf-logging is the oracle)."""

from __future__ import annotations

import glob
import io
import json
import os

import mlperf_logging.rcp_checker.rcp_checker as checker_mod
import numpy as np
import pytest

from analysis.rcp import min_acceptable_mean, olympic_mean, rcp_stats

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
    from analysis.rcp_table import rcp_records, rcp_table
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
    from analysis.rcp_table import rcp_records, rcp_table
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
    import analysis.rcp as rcp

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
