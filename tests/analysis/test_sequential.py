"""The sequential intervals against closed forms and brute-force simulation: the error
spent by the boundaries, Yuen's statistic against scipy's, and coverage under optional
stopping (peeking after every step and stopping at the first interval that excludes the
truth) at least the nominal level, where plain intervals fall far below it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from rcpforge.analysis.sequential import arm, boundaries, factor_interval, information, spent

ALPHA = 0.05


def test_one_look_is_the_fixed_sample_interval():
    assert boundaries([1.0], ALPHA)[0] == pytest.approx(stats.norm.isf(ALPHA / 2))
    assert boundaries([0.4], ALPHA, "pocock")[0] == pytest.approx(stats.norm.isf(spent(ALPHA, 0.4, "pocock") / 2))


@pytest.mark.parametrize("times,spending", [
    ([0.5, 1.0], "obrien_fleming"),
    ([0.2, 0.4, 0.6, 0.8, 1.0], "obrien_fleming"),
    ([0.3, 0.35, 0.7, 1.0], "pocock"),
    ([0.25, 0.6, 0.65, 0.9], "obrien_fleming"),
    ([0.1, 0.3, 0.6, 1.0], "calibrated"),  # half the error at the first look, 0.1
])
def test_boundaries_spend_what_the_spending_function_says(times, spending):
    """Brownian motion observed at the looks crosses a boundary by look k with the
    probability spent by t_k, for every k (400k paths: 3 standard errors is 0.001)."""
    c = np.asarray(boundaries(times, ALPHA, spending))
    t = np.asarray(times)
    rng = np.random.default_rng(11)
    paths = np.cumsum(rng.standard_normal((400_000, len(t))) * np.sqrt(np.diff(np.r_[0.0, t])), axis=1)
    crossed = np.maximum.accumulate(np.abs(paths / np.sqrt(t)) >= c, axis=1).mean(axis=0)
    for k in range(len(t)):
        assert crossed[k] == pytest.approx(spent(ALPHA, t[k], spending, t[0]), abs=0.0012), (k, crossed, c)


def test_boundaries_refuse_looks_out_of_order():
    with pytest.raises(ValueError, match="increasing"):
        boundaries([0.5, 0.5], ALPHA)


def test_yuen_statistic_and_degrees_of_freedom_are_scipys():
    rng = np.random.default_rng(3)
    c, r = rng.lognormal(0.1, 0.08, 20), rng.lognormal(0.0, 0.05, 20)
    z = 1.96
    interval = factor_interval(c.tolist(), r.tolist(), z, trim=2)
    ours_c, ours_r = arm(c, 2, 1.0), arm(r, 2, 1.0)
    se = math.sqrt(ours_c.variance_term + ours_r.variance_term)
    reference = stats.ttest_ind(np.log(c), np.log(r), trim=0.1, equal_var=False)
    assert (ours_c.mean - ours_r.mean) / se == pytest.approx(reference.statistic, rel=1e-9)
    df = se ** 4 / (ours_c.variance_term ** 2 / (ours_c.kept - 1) + ours_r.variance_term ** 2 / (ours_r.kept - 1))
    assert df == pytest.approx(reference.df, rel=1e-9)
    half = stats.t.isf(stats.norm.sf(z), df) * se
    assert interval.low == pytest.approx(math.exp(ours_c.mean - ours_r.mean - half))
    assert interval.high == pytest.approx(math.exp(ours_c.mean - ours_r.mean + half))


def test_censored_runs_beyond_the_trim_leave_that_side_unbounded():
    ref = [100.0, 104, 98, 101, 99, 103]
    slow = [150.0, math.inf, math.inf, 160, 155, 158]  # 2 of 6 did not converge; the trim drops 1
    interval = factor_interval(slow, ref, 2.5)
    assert interval.factor is None and interval.high is None
    assert interval.low is not None and interval.low > 1.2  # still surely slower
    assert "2 of 6 candidate runs did not converge" in interval.reason
    one = factor_interval([150.0, math.inf, 152, 160, 155, 158], ref, 2.5)  # one: it only counts as the largest
    assert one.factor is not None and one.low is not None and one.high is not None


def test_a_look_that_spends_nothing_has_no_interval():
    interval = factor_interval([1.0, 2, 3, 4, 5], [1.0, 2, 3, 4, 5], math.inf)
    assert interval.low is None and interval.high is None and "spends no error" in interval.reason


def _peeking_coverage(z_bounds, looks, rng, sims=2000) -> float:
    """Share of simulated comparisons (true factor 1) whose interval covers 1 at the
    look they stop at, when they stop at the first look whose interval excludes 1."""
    covered = 0
    for _ in range(sims):
        c, r = rng.lognormal(0, 0.06, looks[-1]), rng.lognormal(0, 0.06, looks[-1])
        for n, z in zip(looks, z_bounds, strict=True):
            interval = factor_interval(c[:n].tolist(), r[:n].tolist(), z)
            low = 0.0 if interval.low is None else interval.low  # None: unbounded
            high = math.inf if interval.high is None else interval.high
            if not low <= 1.0 <= high:
                break
        else:
            covered += 1
    return covered / sims


def test_coverage_under_optional_stopping_is_at_least_nominal():
    looks = [5, 8, 11, 14, 17, 20, 23]
    full = information(looks[-1], looks[-1], 1)
    times = [information(n, n, 1) / full for n in looks]
    rng = np.random.default_rng(5)
    sequential = _peeking_coverage(boundaries(times, ALPHA, "obrien_fleming"), looks, rng)
    # 2000 comparisons: 3 standard errors of a 95% rate is 0.015
    assert sequential >= 0.95 - 0.015, sequential
    # the same peeking with a plain 95% interval at every look: far below nominal
    naive = _peeking_coverage([stats.norm.isf(ALPHA / 2)] * len(looks), looks, np.random.default_rng(5))
    assert naive < 0.90, naive


def _half_width(n: int, spread: float, z: float) -> float:
    """The relative half-width of Yuen's interval at n runs per recipe, both of the given
    spread, by the formula written out: d = (n-1) s^2 / (h (h-1)), Welch's df."""
    h = n - 2
    d = (n - 1) * spread / (h * (h - 1))
    df = (2 * d) ** 2 / (2 * d * d / (h - 1))
    return math.sinh(stats.t.isf(stats.norm.sf(z), df) * math.sqrt(2 * d))


def test_sizing_finds_the_fewest_runs_for_a_precision():
    from rcpforge.analysis.sequential import runs_for_half_width

    spread = 0.05 ** 2
    fixed = runs_for_half_width(0.03, spread, spread, min_seeds=4, step=1, max_seeds=None, confidence=0.95)
    z = stats.norm.isf(0.025)
    assert _half_width(fixed, spread, z) <= 0.03 < _half_width(fixed - 1, spread, z)
    # the adaptive design's looks: min_seeds, +step, ...; at each the repeated interval's level
    looks = runs_for_half_width(0.03, spread, spread, min_seeds=5, step=3, max_seeds=40, confidence=0.95)
    assert looks is not None and (looks - 5) % 3 == 0 and looks > fixed  # the price of looking
    seen = list(range(5, looks + 1, 3))
    full = information(40, 40, 1)
    c = boundaries([information(n, n, 1) / full for n in seen], ALPHA)
    assert _half_width(looks, spread, c[-1]) <= 0.03 < _half_width(looks - 3, spread, c[-2])
    assert runs_for_half_width(0.03, spread, spread, min_seeds=5, step=3, max_seeds=20, confidence=0.95) is None


def test_runs_tied_on_the_eval_grid_get_the_grid_s_spread_not_none():
    """Five runs of which the three olympic scoring keeps tie (samples come in whole eval
    intervals): the spread is floored by the grid's step, never zero; runs all alike in
    both recipes give no interval at all."""
    cand = [8100250.0, 8370258, 8370258, 8370258, 8370258]
    ref = [8126464.0, 8388608, 8388608, 8388608, 8650752]
    interval = factor_interval(cand, ref, 1.96)
    assert interval.low < interval.factor < interval.high and interval.half_width > 0.005
    alike = factor_interval([5.0] * 5, [5.0] * 5, 1.96)
    assert alike.low is None and alike.high is None and "no spread" in alike.reason


def test_calibrated_spending_spends_half_at_the_first_look_and_all_by_the_last():
    assert spent(ALPHA, 0.1, "calibrated", 0.1) == pytest.approx(ALPHA / 2)
    assert spent(ALPHA, 1.0, "calibrated", 0.1) == pytest.approx(ALPHA)
    between = [spent(ALPHA, t, "calibrated", 0.1) for t in (0.2, 0.5, 0.9)]
    assert ALPHA / 2 < between[0] < between[1] < between[2] < ALPHA
    assert boundaries([0.1], ALPHA, "calibrated")[0] == pytest.approx(stats.norm.isf(ALPHA / 4))
