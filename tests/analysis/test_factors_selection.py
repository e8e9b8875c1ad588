"""Convergence factors, derived RCPs and M-of-N statistics against closed forms and the
checker (derived RCP files load in RCP_Checker with the scaled means)."""

from __future__ import annotations

import io
import json

import mlperf_logging.rcp_checker.rcp_checker as checker_mod
import numpy as np
import pyarrow as pa
import pytest

from rcpforge.analysis.factors import (
    derived_notes,
    derived_rcps,
    factor_basis,
    factor_curve,
    factors,
    factors_json,
    pairwise_factors,
)
from rcpforge.analysis.rcp_table import rcp_records
from rcpforge.analysis.selection import SelectionSettings, median_window_scores, outlier_sets, selection
from rcpforge.analysis.stats import expected_max_std_normal


def _runs(cells: dict[tuple[str, int], list]) -> pa.Table:
    rows = []
    for (recipe, bs), values in cells.items():
        for seed, v in enumerate(values):
            status = v if isinstance(v, str) else "converged"
            rows.append({"recipe": recipe, "batch_size": bs, "seed": seed, "status": status,
                         "samples_to_target": None if isinstance(v, str) else float(v)})
    return pa.Table.from_pylist(rows)


REF = {16: list(np.random.default_rng(0).normal(1000, 30, 12).round()),
       32: list(np.random.default_rng(1).normal(1400, 40, 12).round()),
       64: list(np.random.default_rng(2).normal(2000, 50, 12).round())}


def test_factor_of_a_scaled_recipe_and_its_derived_rcps(monkeypatch):
    cells = {("bf16", bs): v for bs, v in REF.items()}
    cells[("fp4", 16)] = [v * 1.10 for v in REF[16]]
    cells[("fp4", 64)] = [v * 1.20 for v in REF[64]]
    runs = _runs(cells)
    found = factors(runs, "bf16", "unit", resamples=2000, seed=1)
    by_bs = {f.batch_size: f for f in found}
    assert set(by_bs) == {16, 64}
    assert by_bs[16].factor == pytest.approx(1.10) and by_bs[64].factor == pytest.approx(1.20)
    assert by_bs[16].ci_low < 1.10 < by_bs[16].ci_high and by_bs[64].verdict == "slower"
    assert by_bs[16].prob_candidate_faster < 0.5
    curve = factor_curve(found, "fp4")
    monkeypatch.setitem(checker_mod.submission_runs["training"], "unit", 10)
    reference = rcp_records(runs, "bf16", "unit", {})
    derived = derived_rcps(reference, "fp4", curve)
    assert {r["Precision"] for r in derived.values()} == {"fp4"}
    # the batch size without fp4 runs says so, in its record and in a note; the measured ones do not
    by_record_bs = {r["BS"]: r for r in derived.values()}
    assert by_record_bs[32]["Platform"].endswith("(not measured here: interpolated between batch sizes 16 and 64)")
    assert by_record_bs[64]["Platform"].endswith("(the factor measured at this batch size)")
    (note,) = derived_notes(derived, "fp4", curve[0])
    assert "at batch size 32: not measured here" in note and "measure fp4 at batch size 32" in note
    assert factor_basis(128, [16, 64]) == "not measured here: batch size 64's, the nearest measured"
    ref_chk = checker_mod.RCP_Checker("training", "6.0.0", "unit", False, io.StringIO(json.dumps(reference)))
    der_chk = checker_mod.RCP_Checker("training", "6.0.0", "unit", False, io.StringIO(json.dumps(derived)))
    expected_factor = {16: 1.10, 32: 1.10 + 0.10 * (32 - 16) / (64 - 16), 64: 1.20}
    for name, rec in der_chk.rcp_data.items():
        assert rec["RCP Mean"] == pytest.approx(ref_chk.rcp_data[name]["RCP Mean"] * expected_factor[rec["BS"]])


def test_candidates_against_each_other_are_each_pair_once_and_the_reverse_is_the_reciprocal():
    cells = {("bf16", 16): REF[16], ("a", 16): [v * 1.1 for v in REF[16]], ("b", 16): [v * 1.21 for v in REF[16]],
             ("c", 16): [v * 0.9 for v in REF[16]], ("c", 32): REF[32]}
    runs = _runs(cells)
    pairs = pairwise_factors(runs, ["a", "b", "c"], "unit", resamples=2000, seed=2)
    assert [(f.candidate, f.reference, f.batch_size) for f in pairs] == [("b", "a", 16), ("c", "a", 16), ("c", "b", 16)]
    by_pair = {(f.candidate, f.reference): f for f in pairs}
    assert by_pair[("b", "a")].factor == pytest.approx(1.1) and by_pair[("b", "a")].verdict == "slower"
    assert by_pair[("c", "b")].factor == pytest.approx(0.9 / 1.21) and by_pair[("c", "b")].verdict == "faster"
    (back,) = pairwise_factors(runs, ["b", "a"], "unit", resamples=2000, seed=2)
    assert back.factor == pytest.approx(1 / by_pair[("b", "a")].factor)
    # the interval's bounds swap as reciprocals, up to the bootstrap's noise (other draws)
    assert back.ci_low == pytest.approx(1 / by_pair[("b", "a")].ci_high, rel=0.01)
    assert back.ci_high == pytest.approx(1 / by_pair[("b", "a")].ci_low, rel=0.01)
    assert pairwise_factors(runs, ["a"], "unit") == []


def test_factor_undefined_with_more_failures_than_olympic_scoring_drops():
    runs = _runs({("bf16", 16): REF[16], ("fp4", 16): REF[16][:10] + ["diverged", "not_converged"]})
    (f,) = factors(runs, "bf16", "unit", resamples=200)
    assert f.factor is None and f.verdict == "undefined"


def test_best_of_k_gain_is_sigma_e_k_for_normal_runs():
    values = np.random.default_rng(4).normal(1000, 40, 400)
    s = SelectionSettings(ks=(2, 5, 10), ms_factor=(2,), max_m_factor=1, draws=200_000, window_draws=200)
    sel = selection("bf16", 16, values, 10, 1, None, None, s)
    honest = sel.honest
    for row in sel.best_of_k:
        e_k = expected_max_std_normal(row["k"])
        assert row["expected_olympic_mean"] == pytest.approx(honest["mean"] - honest["stdev"] * e_k, abs=0.3)
        assert row["pass_prob"] == 1.0
    assert sel.best_n_of_m[0]["gain"] > 0


def test_pass_probability_of_the_best_of_k_is_one_minus_fail_to_the_k():
    values = np.random.default_rng(6).normal(1000, 40, 200)
    s = SelectionSettings(ks=(2, 3), ms_factor=(), max_m_factor=1, draws=50_000, window_draws=100)
    sel = selection("fp4", 16, values, 10, 1, 1010.0, 1000.0, s)
    p = sel.honest["pass_prob"]
    assert 0.2 < p < 0.8
    for row in sel.best_of_k:
        assert row["pass_prob"] == pytest.approx(1 - (1 - p) ** row["k"])


def test_normalization_takes_back_most_of_the_gain_below_the_rcp_mean():
    values = np.random.default_rng(6).normal(1000, 40, 200)
    s = SelectionSettings(ks=(2, 5), ms_factor=(2,), max_m_factor=1, draws=50_000, window_draws=100)
    sel = selection("bf16", 16, values, 10, 1, 1000.0, 900.0, s)
    for row in sel.best_of_k + sel.best_n_of_m:
        assert row["pass_prob"] == pytest.approx(1.0)
        assert 0 <= row["gain_normalized"] < row["gain"]


def test_runs_required():
    s = SelectionSettings(ks=(), ms_factor=(), draws=1000, window_draws=2000, tolerance=0.01, max_m_factor=4)
    flat = selection("bf16", 8, [500.0] * 12, 5, 1, None, None, s)
    assert flat.runs_required == 5 and flat.runs_required_gain == 0
    noisy = np.random.default_rng(8).normal(1000, 30, 300)
    s = SelectionSettings(**{**s.__dict__, "max_m_factor": 6})
    loose = selection("fp4", 8, noisy, 5, 1, None, None, s)
    assert loose.runs_required is not None and 5 < loose.runs_required and loose.runs_required_gain <= 0.01
    strict = selection("fp4", 8, noisy, 5, 1, None, None, SelectionSettings(**{**s.__dict__, "tolerance": 0.005}))
    assert strict.runs_required is None and strict.runs_required_gain > 0.005


def test_median_window_is_a_real_window():
    scores = median_window_scores([1.0, 2.0, 3.0, 4.0], 3, 5, 50, np.random.default_rng(0))
    # With 3-run windows the olympic mean is the window's middle run: one of the values.
    assert set(np.unique(scores)) <= {1.0, 2.0, 3.0, 4.0} and len(np.unique(scores)) > 1


def test_outlier_sets_flag_a_shifted_set():
    values = list(np.random.default_rng(2).normal(100, 1, 50))
    values[20:25] = [v - 30 for v in values[20:25]]
    flagged = outlier_sets(values, 5, 1, 3.5)
    assert [f["set"] for f in flagged] == [4]


def test_analyze_runs_derives_from_published_rcps(tmp_path):
    from rcpforge.analysis.rcp_set import ruleset_file
    from rcpforge.analysis.analyze import AnalysisRequest, analyze_runs

    published = json.loads(ruleset_file("6.1.0", "llama31_8b").read_text())
    cells = {("bf16", 16): REF[16], ("bf16", 64): REF[64],
             ("fp4", 16): [v * 1.10 for v in REF[16]], ("fp4", 64): [v * 1.20 for v in REF[64]]}
    req = AnalysisRequest("c", "unit", 3, ["bf16", "fp4"], {}, resamples=500,
                          selection=SelectionSettings(draws=500, window_draws=100, max_m_factor=2), reference_rcps=published)
    analyze_runs(_runs(cells), req, tmp_path)
    derived = json.loads((tmp_path / "rcps_c_fp4_derived.json").read_text())
    assert set(derived) == set(published)
    for name, rec in derived.items():
        factor = np.interp(rec["BS"], [16, 64], [1.10, 1.20])
        assert rec["Precision"] == "fp4"
        assert rec["Epochs to converge"] == pytest.approx([v * factor for v in published[name]["Epochs to converge"]])


def test_sets_with_too_many_failures_are_insufficient_convergence():
    # Half the runs fail: a 5-run set is invalid when 2 or more fail, P = 1 - 6/32.
    values = [1000.0 + i for i in range(50)] + [1e9] * 50
    s = SelectionSettings(ks=(3,), ms_factor=(2,), max_m_factor=1, draws=40_000, window_draws=100)
    sel = selection("fp4", 16, values, 5, 1, 1030.0, 990.0, s)
    assert sel.honest["insufficient_convergence_prob"] == pytest.approx(1 - 6 / 32, abs=0.01)
    assert sel.honest["mean"] < 1100  # only valid sets have an olympic mean
    p = sel.honest["pass_prob"]
    assert sel.best_of_k[0]["pass_prob"] == pytest.approx(1 - (1 - p) ** 3, abs=0.01)


def _strict_json(data) -> dict:
    """JSON as any parser takes it: no bare Infinity or NaN."""
    return json.loads(json.dumps(data, allow_nan=False))


@pytest.mark.parametrize("cand_failed, ref_failed, scale", [
    (1, 0, 1.30), (0, 1, 0.70), (1, 1, 1.0), (0, 1, 1.05), (1, 0, 0.95)])
def test_non_converged_runs_never_give_a_zero_or_huge_bound(cand_failed, ref_failed, scale):
    # 1 failure in 12 runs: about a quarter of the resamples hold 2 or more, whose
    # olympic mean is infinite (the old 1e9 stand-in gave bounds of 5e-6 and 2e5 here)
    cand = [v * scale for v in REF[16][: 12 - cand_failed]] + ["not_converged"] * cand_failed
    ref = REF[16][: 12 - ref_failed] + ["diverged"] * ref_failed
    (f,) = factors(_runs({("bf16", 16): ref, ("fp4", 16): cand}), "bf16", "unit", resamples=2000, seed=3)
    assert f.factor == pytest.approx(scale, rel=0.03)
    assert (f.ci_low is None, f.ci_high is None) == (f.ci_low_unbounded, f.ci_high_unbounded) == (
        bool(ref_failed), bool(cand_failed))
    for bound in (f.ci_low, f.ci_high):
        assert bound is None or 0.5 < bound < 2.0
    assert ("lower bound unbounded" in (f.reason or "")) == bool(ref_failed)
    assert ("upper bound unbounded" in (f.reason or "")) == bool(cand_failed)
    # the verdict from the bounds there are: one side suffices for slower or faster
    expected = {1.30: "slower", 0.70: "faster"}.get(scale, "not significant")
    assert f.verdict == expected
    row = _strict_json(factors_json([f], "bf16", 0.95, 2000, 3))["factors"][0]
    assert (row["ci_low"], row["ci_high"]) == (f.ci_low, f.ci_high)
    assert row["ci_high_unbounded"] is bool(cand_failed)


def test_three_runs_with_one_failure_keep_a_finite_side():
    # n = 3, trim 1: a resample with 2 of the failed run (7/27 of them) has an infinite mean
    runs = _runs({("bf16", 16): [1000.0, 1010.0, 990.0], ("fp4", 16): [1100.0, "not_converged", 1120.0]})
    (f,) = factors(runs, "bf16", "unit", resamples=4000, seed=0)
    assert f.ci_high is None and f.ci_low is not None and f.ci_low > 1.0 and f.verdict == "slower"


def test_an_undefined_factor_says_why():
    runs = _runs({("bf16", 16): REF[16], ("fp4", 16): REF[16][:10] + ["diverged", "not_converged"]})
    (f,) = factors(runs, "bf16", "unit", resamples=200)
    assert f.verdict == "undefined" and (f.ci_low, f.ci_high) == (None, None)
    assert f.reason.startswith("2 of 12 fp4 runs did not converge, more than olympic scoring drops (1)")
    assert not (f.ci_low_unbounded or f.ci_high_unbounded)
    short = _runs({("bf16", 16): REF[16], ("fp4", 16): REF[16][:2]})
    assert factors(short, "bf16", "unit", resamples=200)[0].reason == "fp4 has 2 run(s); olympic scoring needs more than 2"


def test_summary_and_report_show_an_unbounded_side(tmp_path):
    from rcpforge.analysis.analyze import AnalysisRequest, summary_markdown
    from rcpforge.analysis.campaign_report import factor_section
    from rcpforge.analysis.report import render_html
    from rcpforge.analysis.rcp_table import rcp_table

    cand = [v * 1.3 for v in REF[16][:11]] + ["not_converged"]
    runs = _runs({("bf16", 16): REF[16], ("fp4", 16): cand})
    found = factors(runs, "bf16", "unit", resamples=1000)
    req = AnalysisRequest("c", "unit", 3, ["bf16", "fp4"], {})
    text = summary_markdown(req, rcp_table(runs, "unit", 3), found, [], [])
    low = f"{found[0].ci_low:.4f}"
    assert f"| {low} .. unbounded | " in text and "upper bound unbounded: fp4's olympic mean is infinite" in text
    page = render_html("r", [factor_section(found, "bf16")])
    assert ">unbounded</td>" in page and f'data-value="{found[0].ci_low!r}"' in page
