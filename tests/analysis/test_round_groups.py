"""Like with like across a round (`analysis/round/groups.py`): the probabilities against
brute force (an independent simulation, and exact enumeration for a small pool), the
flags on a synthetic round with one cherry-picked submission, the fallback to the MLLOG
lines without system files, and the --group-by setting."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from rcpforge.analysis.rcp_set import RcpError
from rcpforge.analysis.round.groups import p_lognormal, p_pooled, parse_group_keys
from rcpforge.analysis.round.verdicts import analyze_round
from tests.conftest import run_cli
from tests.helpers.cli import invoke, one_line_usage_error
from tests.helpers.round_data import (
    CHERRY_BENCH,
    CHERRY_BS,
    CHERRY_N,
    cherry_pick_round,
    write_submission,
)


def _olympic(values, trim):
    kept = sorted(values)[trim : len(values) - trim]
    return sum(kept) / len(kept)


def _tolerance(p: float, draws: int, reference_draws: int) -> float:
    """Four standard errors of the difference of two independent estimates of p."""
    return 4 * math.sqrt(max(p * (1 - p), 1e-4) * (1 / draws + 1 / reference_draws)) + 1 / draws


@pytest.mark.parametrize(("m", "trim", "rcp_runs"), [(5, 1, None), (3, 1, None), (10, 4, None), (5, 1, 10)])
def test_lognormal_p_value_matches_a_brute_force_simulation(m, trim, rcp_runs):
    """Sets of m runs drawn one by one from the lognormal (another generator, another
    seed; with `rcp_runs`, its log-mean and log-sd first drawn from their posterior
    given that many RCP runs), olympic means taken the slow way: the share at least as
    fast agrees."""
    mean, stdev, draws, reference = 100.0, 15.0, 50_000, 20_000
    rng = np.random.default_rng(12345)
    sigma2 = math.log1p((stdev / mean) ** 2)
    sets = []
    for _ in range(reference):
        mu, sigma = math.log(mean) - sigma2 / 2, math.sqrt(sigma2)
        if rcp_runs:
            sigma *= math.sqrt((rcp_runs - 1) / rng.chisquare(rcp_runs - 1))
            mu += sigma * rng.standard_normal() / math.sqrt(rcp_runs)
        sets.append(_olympic([math.exp(rng.normal(mu, sigma)) for _ in range(m)], trim))
    for observed in (85.0, 95.0, 100.0, 108.0):
        brute = sum(s <= observed for s in sets) / reference
        p = p_lognormal(observed, m, trim, mean, stdev, rcp_runs, draws=draws, seed=0)
        assert p == pytest.approx(brute, abs=_tolerance(brute, draws, reference)), (m, trim, observed)
    assert p_lognormal(95.0, m, trim, mean, stdev, rcp_runs) == p_lognormal(95.0, m, trim, mean, stdev, rcp_runs)


def test_pooled_p_value_matches_exact_enumeration_with_a_non_converged_run():
    """Four runs drawn with replacement from a pool of four, one of them not converged
    (1e9): all 256 equally likely sets enumerated, olympic means as the checker takes
    them (a set with two failures is slower than anything)."""
    pool, m, draws = [10.0, 12.0, 15.0, 1e9], 4, 50_000
    sets = [_olympic(s, 1) for s in itertools.product(pool, repeat=m)]
    for observed in (11.0, 12.0, 13.5, 20.0):
        exact = sum(s <= observed for s in sets) / len(sets)
        p = p_pooled(observed, m, 1, pool, draws=draws, seed=0)
        assert p == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / draws) + 2 / draws), observed
    assert p_pooled(12.0, m, 1, pool[:3]) is None  # a pool smaller than a submission: no p


BENCH, BS, N = CHERRY_BENCH, CHERRY_BS, CHERRY_N


def test_the_cherry_picked_submission_is_flagged_and_the_honest_ones_are_not(tmp_path):
    root, rcps = cherry_pick_round(tmp_path)
    rows = {r["submitter"]: r for r in analyze_round(root, str(rcps))}
    assert len({r["group"] for r in rows.values()}) == 1
    assert rows["lab0"]["group"] == f"{BENCH} / {BS} / PyTorch 25.04 / Acc X"
    picked = rows.pop("lab6")
    assert picked["flagged"] and picked["p_value"] < 1e-3 and picked["robust_z"] < -3.5, picked
    assert "p " in picked["flag_reason"] and "robust z" in picked["flag_reason"]
    for name, row in rows.items():
        assert not row["flagged"], (name, row["p_value"], row["robust_z"])
        assert row["p_value"] > 1e-3 and row["p_value_pooled"] is not None and row["group_size"] == 7
    scores = [r["score"] for r in [*rows.values(), picked]]
    assert picked["group_spread_pct"] == pytest.approx((max(scores) - min(scores)) / np.median(scores) * 100)


def test_without_system_files_grouping_falls_back_to_the_mllog_lines(tmp_path):
    """The same round as plain folders: the org and platform come from the MLLOG lines
    (platform "1xsys": 1 node of sys), framework from a logged line where there is one."""
    root, rcps = cherry_pick_round(tmp_path, systems=False)
    write_submission(root / "other", BENCH, BS, [40.0] * N,
                     {"submission_org": "lab9", "submission_platform": "2xAcc Y", "framework": "JAX 0.5"})
    rows = {r["submitter"]: r for r in analyze_round(root, str(rcps))}
    assert (rows["lab0"]["system"], rows["lab0"]["accelerator"], rows["lab0"]["nodes"]) == ("1xsys", "sys", "1")
    assert rows["lab0"]["group"] == f"{BENCH} / {BS} / ? / sys" and rows["lab0"]["group_size"] == 7
    assert rows["lab9"]["group"] == f"{BENCH} / {BS} / JAX 0.5 / Acc Y" and rows["lab9"]["robust_z"] is None
    assert rows["lab6"]["flagged"] and not any(r["flagged"] for k, r in rows.items() if k != "lab6")
    by_org = {r["submitter"]: r for r in analyze_round(root, str(rcps), group_by=("benchmark", "submitter"))}
    assert len({r["group"] for r in by_org.values()}) == 8


def test_group_by_setting_and_its_errors(tmp_path):
    assert parse_group_keys(None) == ("benchmark", "batch_size", "framework", "accelerator")
    assert parse_group_keys("benchmark, precision") == ("benchmark", "precision")
    with pytest.raises(RcpError, match="--group-by.*'gpu'"):
        parse_group_keys("benchmark,gpu")
    root, rcps = cherry_pick_round(tmp_path)
    proc = run_cli("round", "--no-import", str(root), "--rcps", str(rcps), "--group-by", "benchmark", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["group"] for r in rows} == {BENCH} and sum(r["flagged"] for r in rows) == 1
    for bad in (["--group-by", "benchmark,gpu"], ["--p-threshold", "2"]):
        one_line_usage_error(invoke("round", "--no-import", str(root), "--rcps", str(rcps), *bad), bad[0])
    table = invoke("round", "--no-import", str(root), "--rcps", str(rcps))
    assert table.exit_code == 0 and "flagged for the chair" in table.output and "lab6" in table.output
