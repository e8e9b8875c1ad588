"""RCP records, pruning and `rcp-stats` against the checker's RCP_Checker (the oracle)
on every RCP file shipped for rulesets 5.1.0, 6.0.0 and 6.1.0."""

from __future__ import annotations

import json

import mlperf_logging.rcp_checker.rcp_checker as checker_mod
import numpy as np
import pytest
from scipy.spatial import ConvexHull

from rcpforge.analysis.rcp_set import SUBMISSION_RUNS, RcpError, RcpSet, load_rcp_sets, stats_rows
from tests.analysis.mllog_dirs import rcp_file

RULESETS = ("5.1.0", "6.0.0", "6.1.0")


def test_run_counts_equal_the_checkers():
    assert SUBMISSION_RUNS == checker_mod.submission_runs["training"]


@pytest.mark.parametrize("ruleset", RULESETS)
def test_rcp_stats_equal_the_checker_on_every_shipped_file(ruleset):
    sets = load_rcp_sets(ruleset)
    assert sets
    for rcp_set in sets:
        checker = checker_mod.RCP_Checker("training", ruleset, rcp_set.benchmark, verbose=False)
        rows = {r["record"]: r for r in stats_rows(rcp_set)}
        assert list(rows) == list(checker.rcp_data)
        for name, record in checker.rcp_data.items():
            row = rows[name]
            assert row["batch_size"] == record["BS"]
            assert row["mean"] == record["RCP Mean"]
            assert row["stdev"] == record["RCP Stdev"]
            assert row["min_acceptable_mean"] == record["Min Epochs"]
            assert row["max_speedup"] == record["Max Speedup"]
        assert {n for n, r in rows.items() if r["kept_by_pruning"]} == set(checker.pruned_rcp_data)


def _set_from_means(tmp_path, means: dict[int, float]) -> RcpSet:
    records = {bs: [m - 2, m - 1, m, m, m + 1, m + 2] for bs, m in means.items()}
    return RcpSet.from_file(rcp_file(tmp_path / "r.json", "resnet", records))


def test_the_checker_pruning_is_not_the_convex_envelope(tmp_path):
    # After dropping 300 (above the line 200-400), 200 sits above the line 100-400; the
    # checker never steps back to re-test it (mlcommons/logging issue 368).
    means = {100: 10.0, 200: 20.0, 300: 40.0, 400: 30.0, 500: 31.0}
    rcp_set = _set_from_means(tmp_path, means)
    checker = checker_mod.RCP_Checker("training", "6.0.0", "resnet", False, open(tmp_path / "r.json"))
    rows = {r["batch_size"]: r for r in stats_rows(rcp_set)}
    assert {bs for bs, r in rows.items() if r["kept_by_pruning"]} == {r["BS"] for r in checker.pruned_rcp_data.values()}
    pts = np.array([[bs, rows[bs]["mean"]] for bs in sorted(rows)])
    hull = ConvexHull(pts)
    # Lower hull from scipy: vertices on facets whose outward normal points down.
    lower = {int(pts[i, 0]) for eq, simplex in zip(hull.equations, hull.simplices) if eq[1] < 0 for i in simplex}
    assert {bs for bs, r in rows.items() if r["kept_by_envelope"]} == lower
    mlperf_only, envelope_only = rcp_set.differences()
    assert mlperf_only == ["resnet_ref_200"] and envelope_only == []


def test_pruning_drops_batch_sizes_below_the_fastest(tmp_path):
    rows = stats_rows(_set_from_means(tmp_path, {100: 50.0, 200: 20.0, 400: 30.0}))
    assert [r["kept_by_pruning"] for r in rows] == [False, True, True]
    assert [r["kept_by_envelope"] for r in rows] == [False, True, True]


def test_bad_sources_are_one_line_errors(tmp_path):
    with pytest.raises(RcpError, match="neither an RCP file nor a ruleset"):
        load_rcp_sets("9.9.9")
    with pytest.raises(RcpError, match="ships no RCPs"):
        load_rcp_sets("6.1.0", benchmark="bert")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"x": {"BS": 1}}))
    with pytest.raises(RcpError, match="not a readable RCP file"):
        load_rcp_sets(str(bad))
