"""`rcpforge round` on the shared v5.0 round: every submission's verdict, message and
normalization factor are `mlperf_logging.rcp_checker`'s (ruleset 5.0.0, pruned RCPs)."""

from __future__ import annotations

import json

import pytest
from mlperf_logging.rcp_checker import rcp_checker

from rcpforge.analysis.round.verdicts import analyze_round
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
    # like with like (docs/check-a-round.md's figures): default keys, nothing flagged
    assert len({r["group"] for r in rows}) == 151 and not any(r["flagged"] for r in rows)
    lowest = min((r for r in rows if r["p_value"] is not None), key=lambda r: r["p_value"])
    assert lowest["dir"] == "NVIDIA/results/eos-dfw_n1024_ngc25.01_nemo/llama31_405b" and lowest["p_value"] > 0.005


def test_round_json_and_bad_input(round_v50_subset, tmp_path):
    proc = run_cli("round", "--no-import", str(round_v50_subset), "--rcps", "5.0.0", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) == 5 and {"dir", "benchmark", "batch_size", "olympic_mean", "window_olympic_mean", "rcp_mean",
                               "passed", "message", "norm_factor", "group", "robust_z", "p_value",
                               "flagged"} <= set(rows[0])
    for args in ((str(tmp_path / "nosuch"), "--rcps", "5.0.0"), (str(tmp_path), "--rcps", "5.0.0"),
                 (str(round_v50_subset), "--rcps", "9.9")):
        bad = run_cli("round", "--no-import", *args)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_the_median_window_of_m_over_n_runs_is_taken_by_start_time(tmp_path):
    """Seven resnet runs (N = 5) whose start order is not their file order: the windows by
    start time score 30, 40, 50 (olympic means), so the median window's is 40."""
    from rcpforge.analysis.round.verdicts import window_olympic_mean

    def line(key, value=None, time_ms=0, **meta):
        return ":::MLLOG " + json.dumps({"key": key, "value": value, "time_ms": time_ms, "metadata": meta})

    epochs_by_start = [10, 20, 30, 40, 50, 60, 70]
    file_order = [0, 1, 2, 3, 5, 6, 4]  # result_i holds the file_order[i]-th started run (by name: 43.3)
    for i, k in enumerate(file_order):
        body = [line("submission_benchmark", "resnet"), line("global_batch_size", 1024),
                line("run_start", time_ms=1000 * k), line("eval_accuracy", 0.76, epoch_num=epochs_by_start[k]),
                line("run_stop", time_ms=1000 * k + 500, status="success")]
        (tmp_path / f"result_{i}.txt").write_text("\n".join(body) + "\n")
    assert window_olympic_mean(tmp_path, "resnet", "5.0.0") == 40.0
    (tmp_path / "result_6.txt").unlink()
    (tmp_path / "result_5.txt").unlink()
    assert window_olympic_mean(tmp_path, "resnet", "5.0.0") is None  # M = N: no window
