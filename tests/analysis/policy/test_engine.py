"""The policy engine (`analysis/policy/`): today's rule against an independent brute
force on every shipped RCP of 5.1.0 and 6.0.0 (the checker's own thresholds), exact
enumeration on a 4-value distribution, bit-for-bit reproducibility and the properties a
cherry-picker's numbers must have."""

from __future__ import annotations

import copy
import functools
import itertools
import math
from collections import Counter

import mlperf_logging.rcp_checker.rcp_checker as checker_mod
import numpy as np
import pytest

from rcpforge.analysis.policy.cases import rcp_set_cases, ruleset_cases
from rcpforge.analysis.policy.distributions import eval_grid, on_grid
from rcpforge.analysis.policy.health import coarse_mark
from rcpforge.analysis.policy.rules import preset_rules
from rcpforge.analysis.policy.simulate import PolicySettings, simulate_case
from rcpforge.analysis.policy.thresholds import bootstrapped, min_acceptable_means, today
from rcpforge.analysis.rcp import min_acceptable_mean
from rcpforge.analysis.rcp_set import load_rcp_sets
from tests.analysis.policy.exact import exact as exact_probability
from tests.analysis.policy.exact import olympic_pmf, small_set


def _rules(*names: str) -> tuple:
    presets = preset_rules()
    return tuple(presets[name] for name in names)


TODAY_ONLY = dict(rules=_rules("today"), factors=(1.0,), picks=(1,), pick_modes=("sets",))


@functools.lru_cache
def _checker(ruleset: str, benchmark: str):
    """The checker of a benchmark's RCPs, read and pruned once (its lookups do not change it)."""
    return checker_mod.RCP_Checker("training", ruleset, benchmark, False)


def _checker_threshold(ruleset: str, benchmark: str, bs) -> float:
    """The checker's own minimum acceptable mean at `bs` (its pruned pass, its
    interpolation, its llama31_405b slack), read off the record its check_directory
    would test."""
    checker = _checker(ruleset, benchmark)
    record = checker._find_rcp(bs, "pruned_rcps")
    if record is None:
        low, high = checker._find_top_min_rcp(bs, "pruned_rcps"), checker._find_bottom_max_rcp(bs, "pruned_rcps")
        record = checker._create_interp_rcp(bs, low, high)[1] if low and high else checker._find_min_rcp("pruned_rcps")
    record = copy.deepcopy(record)
    checker._eval_submission_record(record, [1.0] * 10, "")  # applies the 405b slack to the record, as it does
    return record["RCP Mean"] / record["Max Speedup"]


def _brute_force(runs, n: int, trim: int, threshold: float, sims: int, seed: int) -> float:
    drawn = np.sort(np.random.default_rng(seed).choice(np.asarray(runs, float), size=(sims, n), replace=True), axis=1)
    return float(np.mean(np.mean(drawn[:, trim : n - trim], axis=1) < threshold))


@pytest.mark.parametrize("ruleset", ["5.1.0", "6.0.0"])
def test_todays_honest_rejection_equals_a_brute_force_on_every_shipped_rcp(ruleset):
    sims = 3000
    compared = 0
    for rcp_set in load_rcp_sets(ruleset):
        trim = 4 if rcp_set.benchmark == "unet3d" else 1
        for case in rcp_set_cases(rcp_set, None, ruleset, sims):
            row = simulate_case(case, PolicySettings(sims=sims, seed=1, **TODAY_ONLY))[0]
            threshold = _checker_threshold(ruleset, rcp_set.benchmark, case.batch_size)
            assert today(rcp_set, case.batch_size, ruleset).minimum == pytest.approx(threshold, rel=1e-12)
            brute = _brute_force(case.candidate.values, rcp_set.submission_runs, trim, threshold, sims, seed=99)
            se = math.sqrt(max(brute * (1 - brute), row["honest_rejected"] * (1 - row["honest_rejected"]), 1e-4) / sims)
            assert abs(row["honest_rejected"] - brute) < 4.5 * math.sqrt(2) * se, (rcp_set.benchmark, case.batch_size)
            compared += 1
    assert compared >= 20


def test_small_case_matches_exact_enumeration():
    rcp_set, sims = small_set(), 40_000
    case = rcp_set_cases(rcp_set, None, None, sims)[0]
    threshold = today(rcp_set, 8, None).minimum
    runs = list(case.candidate.values)
    rows = simulate_case(case, PolicySettings(sims=sims, seed=3, rules=_rules("today", "m_of_n"), factors=(1.0,),
                                              picks=(1, 2), pick_modes=("sets", "runs")))
    by = {(r["policy"], r["pick"], r["pick_mode"]): r for r in rows}
    honest = exact_probability(runs, 4, lambda s: np.mean(s[1:3]) < threshold)
    best_of_2 = 1 - (1 - honest) ** 2  # the faster of two independent sets is rejected if either is
    best_4_of_8 = exact_probability(runs, 8, lambda s: np.mean(s[1:3]) < threshold)  # s sorted: the 4 best are s[:4]
    median_window = _exact_windows(runs, threshold)
    for key, exact in ((("today", 1, "sets"), honest), (("today", 2, "sets"), best_of_2),
                       (("today", 2, "runs"), best_4_of_8), (("m_of_n", 1, "sets"), median_window)):
        se = math.sqrt(exact * (1 - exact) / sims)
        assert abs(by[key]["caught"] - exact) < 4.5 * se + 1e-12, (key, by[key]["caught"], exact)
    assert 0.001 < honest < 0.99 and best_of_2 > honest  # the case is not trivial


def test_advantage_kept_and_its_standard_error_match_an_exact_computation():
    """Best of 2 submissions under today's rule, on the 4-value RCP: the exact law of the
    score an uncaught picker keeps (max(olympic mean, RCP mean) of the faster of two
    independent sets, given it passes) gives the expected advantage and, over the
    uncaught share of the sims, the standard error of its mean."""
    rcp_set, sims = small_set(), 40_000
    case = rcp_set_cases(rcp_set, None, None, sims)[0]
    threshold = today(rcp_set, 8, None)
    rows = simulate_case(case, PolicySettings(sims=sims, seed=5, rules=_rules("today"), factors=(1.0,), picks=(1, 2),
                                              pick_modes=("sets",)))
    row = next(r for r in rows if r["pick"] == 2)
    pmf = olympic_pmf(list(case.candidate.values), 4, 1)
    true_mean = sum(x * p for x, p in pmf.items())
    best = Counter()
    for (a, pa), (b, pb) in itertools.product(pmf.items(), repeat=2):
        best[min(a, b)] += pa * pb
    passing = {max(x, threshold.rcp_mean): 0.0 for x in best if x >= threshold.minimum}
    for x, p in best.items():
        if x >= threshold.minimum:
            passing[max(x, threshold.rcp_mean)] += p
    uncaught = sum(passing.values())
    mean = sum(x * p for x, p in passing.items()) / uncaught
    var = sum((x - mean) ** 2 * p for x, p in passing.items()) / uncaught
    se_pct = math.sqrt(var / (sims * uncaught)) / true_mean * 100
    assert 0.05 < uncaught < 0.999 and var > 0  # the case is not trivial: some caught, scores spread
    assert row["advantage_kept_pct_se"] == pytest.approx(se_pct, rel=0.05)
    assert abs(row["advantage_kept_pct"] - (true_mean - mean) / true_mean * 100) < 4.5 * se_pct
    grid = case.candidate.grid
    assert grid == 10.0
    assert row["advantage_kept_evals_se"] == pytest.approx(row["advantage_kept_pct_se"] / 100 * true_mean / grid,
                                                           rel=0.01)
    # every picker caught (a recipe twice as fast): no advantage kept, no error for it
    fast = simulate_case(case, PolicySettings(sims=2000, seed=5, rules=_rules("today"), factors=(0.5,), picks=(2,),
                                              pick_modes=("sets",)))[0]
    assert fast["caught"] == 1.0
    assert fast["advantage_kept_pct_se"] is None and fast["advantage_kept_evals_se"] is None


def _exact_windows(runs: list[float], threshold: float) -> float:
    """M = 2N = 8 ordered runs, every sequence (4 values, 4^8) with its probability, the
    rules' score written out: 5 windows of 4 consecutive runs, each's olympic mean (the
    middle two), the median (third) window."""
    probs = {v: c / len(runs) for v, c in Counter(runs).items()}
    values = sorted(probs)
    seqs = np.asarray(list(itertools.product(values, repeat=8)), float)
    weight = np.prod(np.vectorize(probs.get)(seqs), axis=1)
    windows = np.sort(np.stack([seqs[:, i : i + 4] for i in range(5)], axis=1), axis=2)[:, :, 1:3].mean(axis=2)
    score = np.sort(windows, axis=1)[:, 2]
    return float(weight[score < threshold].sum())


def test_same_seed_same_figures_bit_for_bit_and_another_seed_others():
    cases = ruleset_cases("5.1.0", "llama31_8b", [32], 2000)
    settings = PolicySettings(sims=1000, seed=7, picks=(1, 3))
    first, again = simulate_case(cases[0], settings), simulate_case(cases[0], settings)
    assert first == again
    other = simulate_case(cases[0], PolicySettings(sims=1000, seed=8, picks=(1, 3)))
    assert [r["caught"] for r in other] != [r["caught"] for r in first]


def test_catch_rate_rises_with_k_and_honest_rejection_does_not_depend_on_k():
    case = ruleset_cases("5.1.0", "llama31_8b", [64], 1000)[0]
    rows = simulate_case(case, PolicySettings(sims=1000, seed=2, picks=(1, 2, 3, 5, 8)))
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["policy"], r["factor"], r["pick_mode"]), []).append(r)
    rose = 0
    for (policy, factor, mode), members in cells.items():
        members.sort(key=lambda r: r["pick"])
        assert len({r["honest_rejected"] for r in members}) == 1, (policy, factor, mode)
        assert members[0]["caught"] == members[0]["honest_rejected"]  # k = 1 is the honest submitter
        caught = [r["caught"] for r in members]
        if mode == "strategic":  # caught only where every one of its k sets is: fewer as k grows
            assert caught == sorted(caught, reverse=True), (policy, factor, caught)
        elif mode in ("sets", "window") or (mode == "runs" and policy != "m_of_n"):
            assert caught == sorted(caught), (policy, factor, mode, caught)
            rose += caught[-1] > caught[0]
    assert rose >= 10


def test_a_slower_recipe_passes_today_and_a_picker_keeps_its_advantage():
    """The loophole the working group weighs: at f = 1.08 today's rule rejects no honest
    or best-of-5 llama31_8b submission, and the picker's score looks faster than its truth."""
    case = ruleset_cases("5.1.0", "llama31_8b", [96], 4000)[0]
    rows = simulate_case(case, PolicySettings(sims=4000, seed=0, rules=_rules("today", "precision_rcp"),
                                              factors=(1.08,), picks=(1, 5)))
    by = {(r["policy"], r["pick"], r["pick_mode"]): r for r in rows}
    assert by[("today", 5, "sets")]["caught"] < 0.01
    assert by[("today", 5, "sets")]["advantage_kept_pct"] > 0.5
    assert by[("precision_rcp", 5, "runs")]["caught"] > by[("today", 5, "runs")]["caught"] + 0.2


def test_closed_form_minimum_is_the_checkers_bisection():
    for mean, stdev, n_ref, n in ((178858.7, 7165.1, 18, 10), (3178.7, 299.9, 18, 10), (313344.0, 9000.0, 4, 3)):
        assert float(min_acceptable_means(mean, stdev, n_ref, n)) == pytest.approx(
            min_acceptable_mean(mean, stdev, n_ref, n), abs=2e-4)


def test_bootstrap_redraws_the_rcp_around_the_checkers_threshold():
    rcp_set = next(iter(load_rcp_sets("5.1.0", "llama31_8b")))
    fixed = today(rcp_set, 64, "5.1.0")
    drawn = bootstrapped(rcp_set, 64, "5.1.0", np.random.default_rng(0), 5000)
    assert np.std(drawn.minimum) > 0
    assert abs(float(np.mean(drawn.minimum)) / fixed.minimum - 1) < 0.01


def test_eval_grid_and_rounding_up_to_it():
    assert eval_grid([159744.0, 172032.0, 184320.0]) == 12288.0
    assert eval_grid([0.65, 0.7, 0.75, 0.7]) == 0.05
    assert eval_grid([4.0, 4.0]) is None
    assert list(on_grid(np.array([159744.0, 172032.0]), 1.08, 12288.0, 159744.0)) == [184320.0, 196608.0]
    assert coarse_mark([1.0, 2.0, 2.0, 3.0]) == "3 distinct values" and coarse_mark([4.0] * 6) == "zero spread"
    assert coarse_mark([1.0, 2.0, 3.0, 4.0]) is None


def test_failed_runs_count_as_infinite_time_and_two_make_a_result_invalid():
    from rcpforge.analysis.policy.submitters import olympic
    from rcpforge.analysis.policy.windows import window_scores

    assert list(olympic(np.array([[1.0, 2.0, 3.0, np.inf], [1.0, 2.0, np.inf, np.inf]]), 1)) == [2.5, np.inf]
    # windows of 3: 2, 3, inf, inf, 5 (olympic means); the median one scores 5
    assert window_scores(np.array([1.0, 2.0, 3.0, np.inf, np.inf, 4.0, 5.0]), 3, 1) == 5.0


def test_a_zero_spread_rcps_own_runs_pass_the_test_their_mean_sets_at_any_factor():
    """Equal runs average to exactly their value (6.0 x 1.04 = 6.24, retinanet 1024 of
    5.1.0, has no exact sum of 3 or 8), so an honest submission against a precision RCP of
    the same runs is never rejected."""
    from rcpforge.analysis.rcp_set import RcpSet

    raw = {"flat": {"Benchmark": "retinanet", "BS": 8, "Hyperparams": {}, "Epochs to converge": [6.0] * 10}}
    case = rcp_set_cases(RcpSet(raw, "retinanet", submission_runs=5), None, None, 200)[0]
    rows = simulate_case(case, PolicySettings(sims=200, rules=_rules("today", "precision_rcp"), factors=(1.0, 1.04),
                                              picks=(1,), pick_modes=("sets",)))
    assert [r["honest_rejected"] for r in rows] == [0.0] * 4 and {r["coarse"] for r in rows} == {"zero spread"}
