"""Precision across a round (`analysis/round/precision.py`): a synthetic round whose FP8
submissions converge 10% later than the RCP and whose BF16 ones do not; the precision
disclosed in the MLLOG lines, or given by a precision map."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rcpforge.analysis.rcp_set import RcpError
from rcpforge.analysis.round.precision import load_precision_map, precision_factors
from rcpforge.analysis.round.verdicts import analyze_round
from tests.analysis.mllog_dirs import rcp_file
from tests.helpers.cli import invoke, one_line_usage_error
from tests.helpers.round_data import write_submission

BENCH, BS, N, MEAN = "bert", 256, 10, 40.0
FACTOR = {"fp8": 1.1, "bf16": 1.0}


def _round(tmp_path, disclose: bool = True):
    """Eight submissions per precision, runs normal around MEAN x factor (symmetric, so
    the olympic mean is unbiased); the RCP's olympic mean is exactly MEAN (runs evenly
    spread around it), so each precision's factor is known."""
    rng = np.random.default_rng(7)
    rcps = rcp_file(tmp_path / "rcps.json", BENCH, {BS: [MEAN + d for d in np.linspace(-4, 4, 2 * N)]})
    for precision, factor in FACTOR.items():
        for i in range(8):
            logged = {"lowest_numerical_precision_in_linear": precision} if disclose else {}
            values = rng.normal(MEAN * factor, 0.05 * MEAN * factor, N)
            write_submission(tmp_path / "round" / f"{precision}-{i}", BENCH, BS, [float(v) for v in values], logged)
    return tmp_path / "round", rcps


def test_factor_by_precision_recovers_the_known_factor_with_a_bootstrap_interval(tmp_path):
    root, rcps = _round(tmp_path)
    rows = analyze_round(root, str(rcps))
    assert {r["precision"] for r in rows} == {"fp8", "bf16"}
    found = {f["precision"]: f for f in precision_factors(rows)}
    for precision, factor in FACTOR.items():
        f = found[precision]
        assert f["benchmark"] == BENCH and f["submissions"] == 8
        assert f["factor"] == pytest.approx(factor, abs=0.02)
        assert f["ci_low"] < f["factor"] < f["ci_high"] and 0.003 < f["ci_high"] - f["ci_low"] < 0.06
    assert found["bf16"]["ci_high"] < found["fp8"]["ci_low"]  # the two precisions are told apart
    assert precision_factors(rows, seed=3) != precision_factors(rows, seed=4)  # the seed is the bootstrap's
    assert precision_factors(rows) == precision_factors(rows)


def test_the_bootstrap_interval_covers_the_true_factor_about_as_often_as_it_says():
    """200 rounds of 8 submissions whose ratios scatter around 1.1: the 95% interval
    over submissions holds 1.1 in most of them (a percentile bootstrap of 8 covers
    somewhat less than it says, about 90%)."""
    rng = np.random.default_rng(11)
    covered = 0
    for k in range(200):
        rows = [{"benchmark": "b", "precision": "fp8", "olympic_mean": 1.1 * (1 + 0.02 * z), "rcp_mean": 1.0}
                for z in rng.standard_normal(8)]
        (f,) = precision_factors(rows, resamples=2000, seed=k)
        covered += f["ci_low"] < 1.1 < f["ci_high"]
    assert 0.8 <= covered / 200 <= 0.98


def test_a_precision_map_labels_a_round_that_discloses_nothing(tmp_path):
    root, rcps = _round(tmp_path, disclose=False)
    assert {r["precision"] for r in analyze_round(root, str(rcps))} == {None}
    csv_map = tmp_path / "map.csv"
    csv_map.write_text("dir,precision\n" + "".join(f"{p}-{i},{p.upper()}\n" for p in FACTOR for i in range(8)))
    json_map = tmp_path / "map.json"
    json_map.write_text(json.dumps({f"round/fp8-{i}": "FP8" for i in range(8)}))  # a longer path: its tail matches
    for mapping, labels in ((csv_map, {"FP8", "BF16"}), (json_map, {"FP8", None})):
        rows = analyze_round(root, str(rcps), precision_map=load_precision_map(mapping))
        assert {r["precision"] for r in rows} == labels
    assert {f["precision"] for f in precision_factors(rows)} == {"FP8"}
    bad = tmp_path / "bad.csv"
    bad.write_text("fp8-0\n")
    with pytest.raises(RcpError, match="bad.csv:1"):
        load_precision_map(bad)
    one_line_usage_error(invoke("round", "--no-import", str(root), "--rcps", str(rcps), "--precision-map", str(bad)),
                         "--precision-map")
    result = invoke("round", "--no-import", str(root), "--rcps", str(rcps), "--precision-map", str(csv_map))
    assert result.exit_code == 0 and "olympic mean / RCP mean by precision" in result.output
