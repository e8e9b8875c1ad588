"""Statistics beside the checker (docs/rcp-rules.md, the section of that name): olympic means
of many resampled sets at once, stratified bootstrap intervals, probability of
improvement, and order statistics of the best of K draws, exact where a closed form
exists. Every Monte Carlo takes an explicit seed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import integrate, stats
from scipy.special import gammaln


def olympic_means(sets: np.ndarray, trim: int = 1) -> np.ndarray:
    """Olympic mean of each row of a (sets, runs) array."""
    ordered = np.sort(sets, axis=-1)
    return ordered[..., trim : ordered.shape[-1] - trim].mean(axis=-1)


def resample_olympic(values: Sequence[float], n: int, draws: int, rng: np.random.Generator, trim: int = 1) -> np.ndarray:
    """`draws` olympic means of n runs drawn with replacement from `values`."""
    data = np.asarray(values, dtype=float)
    return olympic_means(data[rng.integers(0, len(data), size=(draws, n))], trim)


@dataclass(frozen=True)
class Interval:
    """A ratio and its percentile interval. A bound is None where censored resamples
    decide it: `low` None is unbounded below (the reference's olympic mean is infinite in
    too many resamples), `high` None unbounded above (the candidate's). The shares say
    in how many resamples each olympic mean was infinite."""

    estimate: float
    low: float | None
    high: float | None
    candidate_censored: float = 0.0
    reference_censored: float = 0.0


def bootstrap_ratio(candidate: Sequence[float], reference: Sequence[float], *, trim: int = 1,
                    resamples: int = 10_000, confidence: float = 0.95, seed: int = 0) -> Interval:
    """Ratio of olympic means, candidate / reference, with a stratified percentile
    bootstrap interval: each group is resampled within itself, at its own size.

    A run that did not converge is censored: pass it as inf. A resample with more of
    them than olympic scoring drops has an infinite olympic mean, so its ratio is +inf
    (candidate), 0 (reference) or unknown (both; counted against both bounds). Where
    such ratios reach a percentile, that bound is unbounded (None), never 0 or inf."""
    rng = np.random.default_rng(seed)
    c = resample_olympic(candidate, len(candidate), resamples, rng, trim)
    r = resample_olympic(reference, len(reference), resamples, rng, trim)
    tail = (1 - confidence) / 2
    point = olympic_means(np.asarray([candidate], float), trim)[0] / olympic_means(np.asarray([reference], float), trim)[0]
    c_inf, r_inf = np.isinf(c), np.isinf(r)
    if not (c_inf.any() or r_inf.any()):
        low, high = np.quantile(c / r, [tail, 1 - tail])
        return Interval(float(point), float(low), float(high))
    finite = np.sort(c[~(c_inf | r_inf)] / r[~(c_inf | r_inf)])
    # A resample censored on both sides may be anything: below every finite ratio for the
    # low bound, above every one for the high bound.
    low = _censored_percentile(finite, int(r_inf.sum()), int((c_inf & ~r_inf).sum()), tail, unbounded="below")
    high = _censored_percentile(finite, int((r_inf & ~c_inf).sum()), int(c_inf.sum()), 1 - tail, unbounded="above")
    return Interval(float(point), low, high, float(c_inf.mean()), float(r_inf.mean()))


def _censored_percentile(finite: np.ndarray, below: int, above: int, q: float, unbounded: str) -> float | None:
    """np.quantile's linear percentile at q of `below` ratios under every finite one,
    the sorted `finite` ones and `above` ratios over them. Where it reaches the censored
    ratios on the `unbounded` side the bound is None; on the other side (a percentile
    past the median: no defined factor gets there) the nearest finite ratio stands in,
    a wider interval, never a bound of 0 or inf."""
    n = below + len(finite) + above
    h = (n - 1) * q
    i, j = int(np.floor(h)), int(np.ceil(h))
    if (unbounded == "below" and i < below) or (unbounded == "above" and j >= below + len(finite)):
        return None
    if len(finite) == 0:
        return None
    lo, hi = min(max(i - below, 0), len(finite) - 1), min(max(j - below, 0), len(finite) - 1)
    return float(finite[lo] + (h - i) * (finite[hi] - finite[lo]))


def prob_improvement(x: Sequence[float], y: Sequence[float]) -> float:
    """P(X < Y), ties counted half: the Mann-Whitney U of Y over X divided by n_x n_y."""
    a, b = np.asarray(x, float)[:, None], np.asarray(y, float)[None, :]
    return float(((a < b).sum() + 0.5 * (a == b).sum()) / (a.size * b.size))


def mann_whitney_p(x: Sequence[float], y: Sequence[float]) -> float:
    return float(stats.mannwhitneyu(x, y, alternative="two-sided").pvalue)


def expected_max_std_normal(k: int) -> float:
    """e_K = E[max of K independent standard normals] = int x K phi(x) Phi(x)^(K-1) dx."""
    value, _ = integrate.quad(lambda x: x * k * stats.norm.pdf(x) * stats.norm.cdf(x) ** (k - 1), -np.inf, np.inf)
    return float(value)


def expected_min_of_k(sample: Sequence[float], k: int) -> float:
    """E[min of k draws with replacement] from an empirical sample, exactly:
    the i-th smallest of M is the minimum with probability ((M-i+1)/M)^k - ((M-i)/M)^k."""
    v = np.sort(np.asarray(sample, float))
    m = len(v)
    i = np.arange(1, m + 1)
    weights = ((m - i + 1) / m) ** k - ((m - i) / m) ** k
    return float(np.dot(weights, v))


def expected_best_of_n(values: Sequence[float], n: int, lower_is_better: bool = True) -> float:
    """Expected best of n draws without replacement from M values (Tang et al. 2020):
    sum_i v(i) C(i-1, n-1) / C(M, n) over the values sorted worst to best."""
    v = np.sort(np.asarray(values, float))
    if lower_is_better:
        v = v[::-1]
    m = len(v)
    if not 1 <= n <= m:
        raise ValueError(f"n must be between 1 and {m}, got {n}")
    i = np.arange(1, m + 1)
    # In log space: C(M, n) overflows floats for a few hundred runs.
    log_w = _log_comb(i - 1, n - 1) - _log_comb(np.array([m]), n)[0]
    return float(np.dot(np.exp(log_w), v))


def _log_comb(a: np.ndarray, b: int) -> np.ndarray:
    """log C(a, b), -inf where a < b."""
    a = np.asarray(a, float)
    out = np.full(a.shape, -np.inf)
    ok = a >= b
    out[ok] = gammaln(a[ok] + 1) - gammaln(b + 1) - gammaln(a[ok] - b + 1)
    return out


def best_passing_of_k(sample: Sequence[float], threshold: float, k: int) -> tuple[float, float | None]:
    """Keep the smallest of k draws that is still >= threshold (the fastest set that
    passes). Returns (probability that one passes = 1 - (1 - p)^k, expected kept value
    given that one passes), exact over the empirical sample."""
    v = np.sort(np.asarray(sample, float))
    m = len(v)
    failing = int(np.searchsorted(v, threshold, side="left"))
    passing = v[failing:]
    p_pass = 1 - (failing / m) ** k
    if len(passing) == 0:
        return 0.0, None
    j = np.arange(1, len(passing) + 1)
    # Only draws that all fail or are >= w(j) leave w(j) as the kept one.
    probs = ((failing + len(passing) - j + 1) / m) ** k - ((failing + len(passing) - j) / m) ** k
    return float(p_pass), float(np.dot(probs, passing) / p_pass)


def robust_z(values: Sequence[float]) -> np.ndarray:
    """0.6745 (x - median) / MAD (Iglewicz and Hoaglin); with MAD = 0, the mean absolute
    deviation scaled by 1.2533 (zero spread gives z = 0)."""
    x = np.asarray(values, float)
    med = np.median(x)
    mad = np.median(np.abs(x - med))
    if mad > 0:
        return 0.6745 * (x - med) / mad
    meanad = np.mean(np.abs(x - med))
    return (x - med) / (1.253314 * meanad) if meanad > 0 else np.zeros_like(x)
