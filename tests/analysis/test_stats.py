"""Statistics against closed forms, scipy and brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from rcpforge.analysis.stats import (
    best_passing_of_k,
    bootstrap_ratio,
    expected_best_of_n,
    expected_max_std_normal,
    expected_min_of_k,
    olympic_means,
    prob_improvement,
    robust_z,
)


@pytest.mark.parametrize("k,e_k", [(2, 0.564), (3, 0.846), (5, 1.163), (10, 1.539)])
def test_e_k_closed_form_values_of_the_rules(k, e_k):
    assert expected_max_std_normal(k) == pytest.approx(e_k, abs=5e-4)


@pytest.mark.parametrize("k,e_k", [(2, 0.564), (5, 1.163), (10, 1.539)])
def test_best_of_k_sets_shifts_the_mean_by_sigma_e_k(k, e_k):
    sample = np.random.default_rng(1).normal(1000.0, 20.0, 400_000)
    assert expected_min_of_k(sample, k) == pytest.approx(1000.0 - 20.0 * e_k, abs=0.1)


def test_best_passing_of_k_pass_probability_and_mean_by_brute_force():
    sample = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    k, threshold = 3, 2.5
    p = 3 / 5
    p_pass, kept = best_passing_of_k(sample, threshold, k)
    assert p_pass == pytest.approx(1 - (1 - p) ** k)
    draws = list(itertools.product(sample, repeat=k))
    kept_values = [min(v for v in d if v >= threshold) for d in draws if any(v >= threshold for v in d)]
    assert p_pass == pytest.approx(len(kept_values) / len(draws))
    assert kept == pytest.approx(np.mean(kept_values))


@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_expected_best_of_n_without_replacement_by_enumeration(n):
    values = [7.0, 3.0, 9.0, 1.0, 4.0, 4.0]
    brute = np.mean([min(c) for c in itertools.combinations(values, n)])
    assert expected_best_of_n(values, n) == pytest.approx(brute)
    assert expected_best_of_n(values, n, lower_is_better=False) == pytest.approx(
        np.mean([max(c) for c in itertools.combinations(values, n)]))


def test_probability_of_improvement_is_mann_whitney_u_over_nm():
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 6, 9).astype(float), rng.integers(1, 7, 7).astype(float)  # with ties
    u_y = stats.mannwhitneyu(y, x).statistic  # pairs with y > x, ties half
    assert prob_improvement(x, y) == pytest.approx(u_y / (len(x) * len(y)))


def test_bootstrap_ratio_agrees_with_scipy_bootstrap():
    rng = np.random.default_rng(5)
    cand, ref = rng.normal(110, 6, 10), rng.normal(100, 5, 12)

    def ratio(c, r, axis=-1):
        return olympic_means(c) / olympic_means(r)

    theirs = stats.bootstrap((cand, ref), ratio, vectorized=True, paired=False, method="percentile",
                             n_resamples=20_000, rng=np.random.default_rng(9))
    ours = bootstrap_ratio(cand, ref, resamples=20_000, seed=2)
    assert ours.estimate == pytest.approx(ratio(cand[None], ref[None])[0])
    assert ours.low == pytest.approx(theirs.confidence_interval.low, abs=4e-3)
    assert ours.high == pytest.approx(theirs.confidence_interval.high, abs=4e-3)


def test_robust_z_flags_only_the_outlier():
    z = robust_z([100, 101, 99, 100.5, 99.5, 80])
    assert abs(z[-1]) > 3.5 and np.all(np.abs(z[:-1]) < 3.5)
    assert np.all(robust_z([5, 5, 5]) == 0)


def test_bootstrap_ratio_with_censored_runs_is_one_sided_and_elsewhere_numpys_percentile():
    """A failed run is inf: a resample with 2 of 3 runs failed has an infinite olympic
    mean (7/27 of them). The high bound is then unbounded (None); the low one is
    np.quantile of the same resamples with the infinite ratios set to any large number."""
    from rcpforge.analysis.stats import resample_olympic

    cand, ref = [110.0, np.inf, 115.0], [100.0, 101.0, 99.0, 102.0, 98.0]
    ours = bootstrap_ratio(cand, ref, resamples=20_000, seed=4)
    rng = np.random.default_rng(4)
    c, r = resample_olympic(cand, 3, 20_000, rng), resample_olympic(ref, 5, 20_000, rng)
    assert ours.candidate_censored == pytest.approx(7 / 27, abs=0.01) and ours.reference_censored == 0
    assert ours.high is None
    assert ours.low == pytest.approx(np.quantile(np.where(np.isinf(c), 1e300, c / r), 0.025), rel=1e-12)
    assert ours.estimate == pytest.approx(115.0 / 100.0)  # the failed run is the dropped slowest
    # the reference's failures make the low bound unbounded and leave the high one numpy's
    flipped = bootstrap_ratio(ref, cand, resamples=20_000, seed=4)
    assert flipped.low is None and flipped.high is not None
    rng = np.random.default_rng(4)
    r2, c2 = resample_olympic(ref, 5, 20_000, rng), resample_olympic(cand, 3, 20_000, rng)
    assert flipped.high == pytest.approx(np.quantile(np.where(np.isinf(c2), 0.0, r2 / c2), 0.975), rel=1e-12)
