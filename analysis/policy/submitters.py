"""Simulated submissions, vectorised: one row per simulated submitter.

Every submitter draws its runs (indices into the distribution's runs, with replacement)
once, for the largest k; a pick of k uses the first k sets of those draws (common random
numbers: a larger k sees the same runs and more, so its kept score can only be as fast
or faster, and the honest submitter is the first set, the same for every k).

The cheaters (`pick_mode`), each exploiting one rule (docs/policy.md says which):
- `sets`: the best of k complete submissions (the fastest score). The rules' Scoring
  section forbids it ("Running multiple iterations of N runs to try find the lowest one
  ... is prohibited"), but nothing in a submission shows it;
- `runs`: the N fastest of k x N runs (the worst case: not a legal submission, but a log
  audit sees only the N runs submitted). Under M > N scoring: the M fastest of k x M
  runs, kept in the order they were drawn;
- `window`: k x N runs in one ordered sequence, and the fastest N consecutive ones
  designated (the M > N rule lets a submitter run more than N and designate a window;
  this one designates the best, not the median). Under M > N scoring: k x M runs in one
  sequence and the M consecutive ones whose median window is fastest (`windows`);
- `strategic`: knows the rule's threshold and submits the fastest of its k sets that
  passes (the fastest set where none passes), so it is caught only where no set passes
  (`strategic_pick`; the verdicts come from the rule, `simulate` applies them);
- `poisoned`: the best of k sets, and the party that measures the rule's own reference
  (a precision-specific RCP, a convergence factor) keeps the best of k measurements too
  (`policies`); equal to `sets` under a rule that measures nothing."""

from __future__ import annotations

import numpy as np

PICK_MODES = ("sets", "runs", "window", "strategic", "poisoned")


def draw(values: np.ndarray, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Runs drawn with replacement from `values`, in an array of `shape`."""
    return values[rng.integers(0, len(values), size=shape)]


def olympic(runs: np.ndarray, trim: int) -> np.ndarray:
    """Olympic means over the last axis; a non-converged run (inf) is the slowest, and a
    set with more than one is infinite: an invalid result (training rules, Benchmark
    Results)."""
    if trim == 1:
        anchor = finite_floor(runs)
        shifted = runs - anchor
        means = olympic_trim_one(shifted, np.where(np.isinf(runs), 0.0, shifted), np.isinf(runs).sum(axis=-1))
        return means + anchor[..., 0]
    ordered = np.sort(runs, axis=-1)
    with np.errstate(invalid="ignore"):
        means = ordered[..., trim : runs.shape[-1] - trim].mean(axis=-1)
    return np.where(np.isinf(runs).sum(axis=-1) > 1, np.inf, means)


def finite_floor(runs: np.ndarray) -> np.ndarray:
    """The smallest run over the last axis (kept as an axis of 1), 0 where none is finite:
    the anchor trim-1 means are taken from, so that equal runs average to exactly their
    value (a zero-spread RCP's runs must pass the test their own mean sets)."""
    low = runs.min(axis=-1, keepdims=True)
    return np.where(np.isfinite(low), low, 0.0)


def olympic_trim_one(runs: np.ndarray, finite: np.ndarray, failed: np.ndarray) -> np.ndarray:
    """Trim 1 (every benchmark but UNet3D): (sum - min - max) / (n - 2), three reductions
    instead of a sort, the simulation's hot spot; `runs` are taken from an anchor
    (`finite_floor`), `finite` is `runs` with 0 for inf, `failed` the count of inf per set."""
    with np.errstate(invalid="ignore"):
        largest = np.where(failed > 0, 0.0, runs.max(axis=-1))
        means = (finite.sum(axis=-1) - runs.min(axis=-1) - largest) / (runs.shape[-1] - 2)
    return np.where(failed > 1, np.inf, means)


def fastest_runs(sets: np.ndarray, k: int) -> np.ndarray:
    """The `runs` cheater's runs: of the first k sets of (sims, kmax, size), the `size`
    fastest, kept in the order they were drawn."""
    size = sets.shape[2]
    pooled = sets[:, :k, :].reshape(len(sets), k * size)
    fastest = np.sort(np.argpartition(pooled, size - 1, axis=1)[:, :size], axis=1)
    return np.take_along_axis(pooled, fastest, axis=1)


def best_set(candidates: np.ndarray, k: int) -> np.ndarray:
    """Per simulation, the index of the fastest of the first k candidate scores."""
    return np.argmin(candidates[:, :k], axis=1)


def strategic_pick(candidates: np.ndarray, rejected: np.ndarray, k: int) -> np.ndarray:
    """Per simulation, the index of the fastest of the first k candidates the rule does
    not reject; the fastest of them all where it rejects every one."""
    shown, verdicts = candidates[:, :k], rejected[:, :k]
    passing = np.argmin(np.where(verdicts, np.inf, shown), axis=1)
    return np.where(verdicts.all(axis=1), np.argmin(shown, axis=1), passing)
