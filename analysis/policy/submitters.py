"""Simulated submissions, vectorised: one row per simulated submitter.

Every submitter draws its runs (indices into the distribution's runs, with replacement)
once, for the largest k; a pick of k uses the first k sets of those draws (common random
numbers: a larger k sees the same runs and more, so its kept score can only be as fast
or faster, and the honest submitter is the first set, the same for every k).

Cherry-picking, in two forms:
- `sets`: the best of k complete submissions (the one with the fastest score; a submitter
  who reruns the whole submission and keeps the best). The rules' Scoring section forbids
  it ("Running multiple iterations of N runs to try find the lowest one ... is prohibited");
- `runs`: the N fastest of k x N runs (the worst case: not a legal submission, but a log
  audit sees only the N runs submitted). Under M > N scoring: the M fastest of k x M
  runs, kept in the order they were drawn."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from rcpforge.analysis.stats import olympic_means

PICK_MODES = ("sets", "runs")


def draw(values: np.ndarray, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Runs drawn with replacement from `values`, in an array of `shape`."""
    return values[rng.integers(0, len(values), size=shape)]


def olympic(runs: np.ndarray, trim: int) -> np.ndarray:
    """Olympic means over the last axis; a set with more than one non-converged run (inf)
    is infinite: an invalid result (training rules, Benchmark Results)."""
    with np.errstate(invalid="ignore"):
        means = olympic_means(runs, trim)
    return np.where(np.isinf(runs).sum(axis=-1) > 1, np.inf, means)


def kept_olympic(sets: np.ndarray, k: int, mode: str, trim: int) -> np.ndarray:
    """The olympic mean a k-fold cherry-picker submits; `sets` is (sims, kmax, N)."""
    n = sets.shape[2]
    if mode == "sets":
        return olympic(sets[:, :k, :], trim).min(axis=1)
    pooled = sets[:, :k, :].reshape(len(sets), k * n)
    return olympic(np.partition(pooled, n - 1, axis=1)[:, :n], trim)


def window_scores(runs: np.ndarray, n: int, trim: int) -> np.ndarray:
    """The rules' score of M > N runs in their order (training rules, Benchmark Results,
    Scoring): the olympic mean of each window of N consecutive runs, a non-converged run
    counting as infinite time, and the window with the median score (the lower middle one
    when the count of windows is even: a real window). Over the last axis."""
    windows = olympic(sliding_window_view(runs, n, axis=-1), trim)
    return np.sort(windows, axis=-1)[..., (windows.shape[-1] - 1) // 2]


def kept_window(sets: np.ndarray, k: int, mode: str, n: int, trim: int) -> np.ndarray:
    """The M > N score a k-fold cherry-picker submits; `sets` is (sims, kmax, M)."""
    if mode == "sets":
        return window_scores(sets[:, :k, :], n, trim).min(axis=1)
    m = sets.shape[2]
    pooled = sets[:, :k, :].reshape(len(sets), k * m)
    fastest = np.sort(np.argpartition(pooled, m - 1, axis=1)[:, :m], axis=1)  # drawn order kept
    return window_scores(np.take_along_axis(pooled, fastest, axis=1), n, trim)
