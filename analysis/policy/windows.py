"""Runs in order, scored by windows: the rules' M > N score, and the `window` cheater who
picks the best stretch of a longer sequence.

The rule for M > N runs (training rules, Benchmark Results, Scoring): the olympic mean
of each window of N consecutive runs, a non-converged run counting as infinite time, and
the window with the median score (the lower middle one when the count of windows is
even: a real window)."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy.ndimage import maximum_filter1d, minimum_filter1d

from rcpforge.analysis.policy.submitters import finite_floor, olympic


def window_olympics(runs: np.ndarray, n: int, trim: int) -> np.ndarray:
    """The olympic mean of every N consecutive runs, over the last axis. With trim 1, in
    time linear in the runs: sums from a cumulative sum, minima and maxima from scipy's
    running filters (a reduction over each window would cost N per window)."""
    if trim != 1:
        return olympic(sliding_window_view(runs, n, axis=-1), trim)
    count = runs.shape[-1] - n + 1
    anchor = finite_floor(runs)
    failed_runs = np.isinf(runs)
    shifted = runs - anchor
    sums = _sliding_sums(np.where(failed_runs, 0.0, shifted), n)
    failed = _sliding_sums(failed_runs.astype(np.int32), n)
    centre = slice(n // 2, n // 2 + count)  # a running filter's output sits at the window's centre
    lowest = minimum_filter1d(shifted, n, axis=-1)[..., centre]
    largest = np.where(failed > 0, 0.0, maximum_filter1d(shifted, n, axis=-1)[..., centre])
    with np.errstate(invalid="ignore"):
        means = (sums - lowest - largest) / (n - 2) + anchor
    return np.where(failed > 1, np.inf, means)


def _sliding_sums(values: np.ndarray, n: int) -> np.ndarray:
    total = np.cumsum(values, axis=-1)
    out = total[..., n - 1 :].copy()
    out[..., 1:] -= total[..., : total.shape[-1] - n]
    return out


def window_scores(runs: np.ndarray, n: int, trim: int) -> np.ndarray:
    """The rules' score of M > N runs in their order, over the last axis."""
    windows = window_olympics(runs, n, trim)
    return np.partition(windows, (windows.shape[-1] - 1) // 2, axis=-1)[..., (windows.shape[-1] - 1) // 2]


def best_windows(sets: np.ndarray, picks, n: int, trim: int) -> dict[int, np.ndarray]:
    """The `window` cheater under N-run scoring, per k in `picks`: the first k sets of
    (sims, kmax, N) as one sequence of k x N runs, and the fastest olympic mean of N
    consecutive ones (the k sets themselves are among its windows). The windows of the
    largest k are scored once; a smaller k's are a prefix of them."""
    scores = window_olympics(sets.reshape(len(sets), -1), n, trim)
    return {k: scores[:, : (k - 1) * n + 1].min(axis=1) for k in picks}


def luckiest_stretches(groups: np.ndarray, picks, n: int, trim: int) -> dict[int, np.ndarray]:
    """The `window` cheater under M > N scoring, per k in `picks`: the first k groups of
    (sims, kmax, M) as one sequence of k x M runs, and the fastest M > N score of M
    consecutive runs in it."""
    m = groups.shape[2]
    scores = window_olympics(groups.reshape(len(groups), -1), n, trim)
    return {k: _fastest_median(scores[:, : k * m - n + 1], m - n + 1) for k in picks}


def _fastest_median(scores: np.ndarray, span: int) -> np.ndarray:
    """Per row, the smallest lower-middle score over every `span` consecutive scores.

    A sliding median costs `span` per stretch; the smallest one is found instead by
    bisection over each row's sorted scores: the smallest v such that some stretch has
    at least (the median's rank + 1) scores at or below v, counted for every stretch at
    once with a cumulative sum. Exact: v is one of the scores, the one a sliding median
    would give."""
    needed = (span - 1) // 2 + 1
    values = np.sort(scores, axis=1)
    rows = np.arange(len(scores))
    low = np.zeros(len(scores), np.int64)
    high = np.full(len(scores), values.shape[1] - 1)
    while (low < high).any():
        middle = (low + high) // 2
        counts = np.cumsum(scores <= values[rows, middle][:, None], axis=1, dtype=np.int16)
        in_stretch = counts[:, span - 1 :].copy()
        in_stretch[:, 1:] -= counts[:, : counts.shape[1] - span]
        reached = (in_stretch >= needed).any(axis=1)
        high = np.where(reached, middle, high)
        low = np.where(reached, low, middle + 1)
    return values[rows, low]
