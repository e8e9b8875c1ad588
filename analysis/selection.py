"""M-of-N statistics: what selecting among runs is worth, from a recipe's measured run
distribution at one batch size.

- honest: the olympic mean of N runs drawn from the measured runs (seeded Monte Carlo);
- best of K sets of N: the fastest set that still passes the RCP test; its pass
  probability 1 - (1 - p)^K and expected olympic mean exactly (order statistics over the
  Monte Carlo sample of set means);
- best N of M: the N fastest of M runs (Monte Carlo);
- runs required: the smallest M whose median-window score (the rules' scoring of M > N
  runs: the window of N consecutive runs with the median score) leaves a submitter who
  repeats the whole M-run procedure K times a gain under the tolerance;
- outlier sets: N-run sets whose olympic mean is a robust-z outlier against the others.

Gains are relative to the honest expected olympic mean, positive when selection makes
the result look faster; `*_normalized` applies the checker's normalization (a result
faster than the RCP mean is scored at the RCP mean), which takes back gains below it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from rcpforge.trainers.contract.mllog.read import NOT_CONVERGED
from rcpforge.analysis.stats import best_passing_of_k, expected_min_of_k, olympic_means, robust_z


@dataclass(frozen=True)
class SelectionSettings:
    ks: tuple[int, ...] = (2, 3, 5, 10)
    ms_factor: tuple[int, ...] = (2, 3)  # best N of M for M = factor x N
    k_required: int = 5
    tolerance: float = 0.01
    max_m_factor: int = 5
    draws: int = 20_000
    window_draws: int = 4_000
    outlier_z: float = 3.5
    seed: int = 0


@dataclass
class Selection:
    recipe: str
    batch_size: int
    runs: int
    n: int
    rcp_mean: float | None
    min_acceptable_mean: float | None
    honest: dict
    best_of_k: list[dict] = field(default_factory=list)
    best_n_of_m: list[dict] = field(default_factory=list)
    runs_required: int | None = None
    runs_required_gain: float | None = None
    outlier_sets: list[dict] = field(default_factory=list)


def _gain(honest: float, selected: float | None) -> float | None:
    return None if selected is None else 1 - selected / honest


def median_window_scores(values: Sequence[float], n: int, m: int, draws: int, rng: np.random.Generator, trim: int = 1) -> np.ndarray:
    """Score of each of `draws` M-run sequences: the median of its windows' olympic means
    (the lower middle one when the count of windows is even: it is a real window)."""
    data = np.asarray(values, float)[rng.integers(0, len(values), size=(draws, m))]
    windows = olympic_means(sliding_window_view(data, n, axis=1), trim)
    return np.sort(windows, axis=1)[:, (windows.shape[1] - 1) // 2]


def runs_required(values: Sequence[float], n: int, trim: int, s: SelectionSettings) -> tuple[int | None, float | None]:
    rng = np.random.default_rng(s.seed + 1)
    gain = None
    for m in range(n, s.max_m_factor * n + 1):
        scores = median_window_scores(values, n, m, s.window_draws, rng, trim)
        gain = _gain(float(scores.mean()), expected_min_of_k(scores, s.k_required))
        if gain <= s.tolerance:
            return m, gain
    return None, gain


def outlier_sets(values: Sequence[float], n: int, trim: int, z_max: float) -> list[dict]:
    """Consecutive N-run sets (in the given order) flagged against each other."""
    count = len(values) // n
    if count < 3:
        return []
    means = olympic_means(np.asarray(values[: count * n], float).reshape(count, n), trim)
    z = robust_z(means)
    return [{"set": i, "olympic_mean": float(means[i]), "robust_z": float(z[i])} for i in range(count) if abs(z[i]) > z_max]


def _valid_means(sets: np.ndarray, trim: int) -> tuple[np.ndarray, np.ndarray]:
    """Olympic means of the sets that are results, and which are. A set with more
    non-converged runs than olympic scoring drops is "Insufficient convergence": it
    fails and has no olympic mean."""
    valid = (sets >= NOT_CONVERGED).sum(axis=1) <= trim
    means = olympic_means(sets[valid], trim) if valid.any() else np.array([np.nan])
    return means, valid


def selection(recipe: str, bs: int, values: Sequence[float], n: int, trim: int,
              rcp_mean: float | None, min_acceptable: float | None, s: SelectionSettings = SelectionSettings()) -> Selection:
    rng = np.random.default_rng(s.seed)
    data = np.asarray(values, float)
    sample, valid = _valid_means(data[rng.integers(0, len(data), size=(s.draws, n))], trim)
    threshold = -np.inf if min_acceptable is None else min_acceptable
    p = None if min_acceptable is None else float(np.mean(valid) * np.mean(sample >= threshold))
    q05, q50, q95 = (float(q) for q in np.quantile(sample, [0.05, 0.5, 0.95]))
    out = Selection(recipe, bs, len(values), n, rcp_mean, min_acceptable,
                    {"mean": float(sample.mean()), "stdev": float(sample.std()), "q05": q05, "median": q50, "q95": q95,
                     "pass_prob": p, "insufficient_convergence_prob": float(1 - valid.mean())})
    norm = (lambda x: np.maximum(x, rcp_mean)) if rcp_mean is not None else (lambda x: x)
    out.best_of_k = _best_of_k(sample, valid, threshold, norm, s.ks)
    honest, honest_norm = float(sample.mean()), float(norm(sample).mean())
    for factor in s.ms_factor:
        m = factor * n
        fastest = np.sort(data[rng.integers(0, len(data), size=(s.draws, m))], axis=1)[:, :n]
        best, ok = _valid_means(fastest, trim)
        out.best_n_of_m.append({"m": m, "pass_prob": float(np.mean(ok) * np.mean(best >= threshold)),
                                "expected_olympic_mean": float(best.mean()), "gain": _gain(honest, float(best.mean())),
                                "gain_normalized": _gain(honest_norm, float(norm(best).mean()))})
    out.runs_required, out.runs_required_gain = runs_required(values, n, trim, s)
    out.outlier_sets = outlier_sets(values, n, trim, s.outlier_z)
    return out


def _best_of_k(sample: np.ndarray, valid: np.ndarray, threshold: float, norm, ks: Sequence[int]) -> list[dict]:
    # Invalid sets stay among the draws as failing ones (-inf: below any threshold).
    draws = np.full(valid.shape, -np.inf)
    draws[valid] = sample
    floor = threshold if np.isfinite(threshold) else np.finfo(float).min
    normed = np.where(np.isfinite(draws), norm(draws), -np.inf)
    honest, honest_norm = float(sample.mean()), float(norm(sample).mean())
    rows = []
    for k in ks:
        p_pass, kept = best_passing_of_k(draws, floor, k)
        _, kept_norm = best_passing_of_k(normed, floor, k)
        rows.append({"k": k, "pass_prob": p_pass, "expected_olympic_mean": kept,
                     "gain": _gain(honest, kept), "gain_normalized": _gain(honest_norm, kept_norm)})
    return rows


def selection_json(found: list[Selection], s: SelectionSettings) -> dict:
    return {"settings": asdict(s), "cells": [asdict(x) for x in found]}
