"""`rcpforge round` on the shared v5.0 round: every submission's verdict, message and
normalization factor are `mlperf_logging.rcp_checker`'s (ruleset 5.0.0, pruned RCPs)."""

from __future__ import annotations

import json

import pytest
from mlperf_logging.rcp_checker import rcp_checker

from analysis.round import analyze_round
from tests.conftest import run_cli


def test_every_v50_submission_gets_the_checkers_verdict(round_v50):
    rows = analyze_round(round_v50, "5.0.0")
    assert len(rows) == 201  # every results directory of the round
    for row in rows:
        expected = rcp_checker.check_directory(str(round_v50 / row["dir"]), "training", "5.0.0", False, False,
                                               rcp_pass="pruned_rcps")
        assert (row["passed"], row["message"]) == expected[:2], row["dir"]
        assert row["norm_factor"] == pytest.approx(float(expected[2]), rel=1e-12), row["dir"]
        if row["rcp_mean"] is not None:
            assert row["vs_rcp_pct"] == pytest.approx((row["olympic_mean"] / row["rcp_mean"] - 1) * 100)
    messages = [r["message"] for r in rows]
    assert (messages.count("RCP found"), messages.count("RCP Interpolation")) == (128, 64)


def test_round_json_and_bad_input(round_v50_subset, tmp_path):
    proc = run_cli("round", str(round_v50_subset), "--rcps", "5.0.0", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) == 5 and {"dir", "benchmark", "batch_size", "olympic_mean", "window_olympic_mean", "rcp_mean",
                               "passed", "message", "norm_factor", "group", "robust_z", "p_value",
                               "flagged"} <= set(rows[0])
    for args in ((str(tmp_path / "nosuch"), "--rcps", "5.0.0"), (str(tmp_path), "--rcps", "5.0.0"),
                 (str(round_v50_subset), "--rcps", "9.9")):
        bad = run_cli("round", *args)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
