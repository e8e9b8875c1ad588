"""Intervals for a convergence factor that stay valid when an adaptive campaign looks at
its runs after every step and stops a cell once they answer its question.

Looking at a plain 95% interval after every step and stopping when it looks good makes
it cover far less than 95% of the time. Here every look spends part of the error budget
instead (group-sequential repeated confidence intervals, Jennison & Turnbull 1989, with
Lan & DeMets 1983 error spending): the intervals of all looks of a comparison cover the
true factor together with probability at least the confidence level, so the one at
whatever look the campaign stopped on does too, and looks may come at any information
levels, which adaptive allocation makes unpredictable.

The statistic is Yuen's trimmed two-sample t on log samples-to-target: the olympic
(trimmed) mean of each arm's logs, the arms' winsorized variances and Welch's degrees of
freedom. Olympic trimming is the checker's, and it treats a run that did not converge
as censored, the way the checker does: as long as an arm has no more of them than the
trim drops, they only count as its largest values. With more, that arm's mean is
unbounded above, so one bound of the factor is unbounded and the other is computed with
the censored runs at the largest converged value seen (they needed at least as much),
which errs wide. The boundaries are computed for the normal limit; each look's level is
then taken at the t quantile of its degrees of freedom, the usual small-sample form.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, special, stats

SPENDING = ("obrien_fleming", "pocock", "calibrated")
# The calibrated spending's share of the error spent at a comparison's first look; the
# rest is spent O'Brien-Fleming-type over the information after it. Chosen by the runs
# it saves in benchmarks/adaptive.py at no fewer answers than the fixed 2N design
# (docs/adaptive.md): a clear difference is decided at the first look, and a close one
# needs its late intervals nearly as narrow as a fixed design's.
FIRST_LOOK_SHARE = 0.5
# Welch's degrees of freedom overstate a trimmed t's on 5 runs of unequal spread (a noisy
# candidate against a quiet reference covered 93.7% at a nominal 95%, measured): with
# half the error at a first look on 5 runs, the calibrated spending takes one off them,
# which tests/orchestrator/test_adaptive_simulation.py measured to hold alpha on unequal
# arms (3.1% wrong verdicts at the margin, 95.3% joint coverage with censored runs, where
# none off gave 5.1% and 94.0%).
CALIBRATED_DF_SHIFT = 1.0


def spent(alpha: float, t: float, spending: str, first: float = 0.0) -> float:
    """The error spent by information fraction t (0 < t <= 1): Lan-DeMets' O'Brien-Fleming
    type (little early, nearly all at the end), Pocock type (evenly), or calibrated:
    FIRST_LOOK_SHARE of it by the first look's fraction `first`, the rest
    O'Brien-Fleming-type over the fractions after it."""
    t = min(max(t, 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if spending == "obrien_fleming":
        return float(2 * (1 - stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(t))))
    if spending == "pocock":
        return float(alpha * math.log(1 + (math.e - 1) * t))
    if spending == "calibrated":
        if t >= 1.0:
            return alpha
        if t <= first:
            return alpha * FIRST_LOOK_SHARE
        rest = spent(alpha, (t - first) / (1 - first), "obrien_fleming")
        return alpha * FIRST_LOOK_SHARE + (1 - FIRST_LOOK_SHARE) * rest
    raise ValueError(f"spending: {spending!r} is not one of {', '.join(SPENDING)}")


def boundaries(times: Sequence[float], alpha: float, spending: str = "obrien_fleming") -> tuple[float, ...]:
    """Two-sided z boundaries c_1..c_k for looks at increasing information fractions
    `times`: under no difference, the chance that |Z_j| >= c_j at some look j <= k is the
    error spent by times[k-1] (inf where a look spends nothing new). The calibrated
    spending takes times[0] as the first look's fraction."""
    rounded = tuple(round(float(t), 9) for t in times)
    if any(b <= a for a, b in zip(rounded, rounded[1:], strict=False)) or not rounded or rounded[0] <= 0:
        raise ValueError(f"information fractions must be positive and increasing, got {list(times)}")
    return _boundaries(rounded, float(alpha), spending)


@lru_cache(maxsize=65_536)
def _boundaries(times: tuple[float, ...], alpha: float, spending: str) -> tuple[float, ...]:
    # Armitage-McPherson-Rowe recursion on the score S_k = Z_k sqrt(t_k), a Brownian
    # motion at t_k: the sub-density of S on the paths that have not crossed yet is
    # carried from look to look on a grid, and each boundary solves for its increment of
    # spent error.
    if len(times) > 1:
        prefix = _boundaries(times[:-1], alpha, spending)
    else:
        prefix = ()
    t = times[-1]
    increment = (spent(alpha, t, spending, times[0])
                 - (spent(alpha, times[-2], spending, times[0]) if len(times) > 1 else 0.0))
    if len(times) == 1:
        return (_z_for(increment),)
    grid, density = _continuing(times[:-1], prefix)
    dt = t - times[-2]
    scale = math.sqrt(dt)
    step = grid[1] - grid[0]

    def exit_probability(c: float) -> float:
        edge = c * math.sqrt(t)
        beyond = special.ndtr((grid - edge) / scale) + special.ndtr((-edge - grid) / scale)
        return float((density * beyond).sum() * step)

    if increment <= 1e-15 or exit_probability(12.0) >= increment:
        return prefix + (math.inf,)
    return prefix + (float(optimize.brentq(lambda c: exit_probability(c) - increment, 0.0, 12.0, xtol=1e-7)),)


def _z_for(error: float) -> float:
    return math.inf if error <= 1e-15 else float(stats.norm.isf(error / 2))


@lru_cache(maxsize=65_536)
def _continuing(times: tuple[float, ...], bounds: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Grid and sub-density of S at the last of `times` on paths inside every boundary."""
    gaps = np.diff((0.0,) + times)
    step = min(0.01, math.sqrt(gaps.min()) / 8)
    reach = 9.0 * math.sqrt(times[-1])
    half = int(math.ceil(reach / step))
    grid = np.arange(-half, half + 1) * step
    density = _normal_pdf(grid / math.sqrt(times[0])) / math.sqrt(times[0])
    density = np.where(np.abs(grid) < bounds[0] * math.sqrt(times[0]), density, 0.0)
    for k in range(1, len(times)):
        scale = math.sqrt(times[k] - times[k - 1])
        # the increment's density on the grid's offsets: a convolution, the grid being even
        width = min(2 * half, int(math.ceil(9 * scale / step)))
        kernel = _normal_pdf(np.arange(-width, width + 1) * step / scale) / scale
        density = np.convolve(density, kernel)[width:width + len(grid)] * step
        density = np.where(np.abs(grid) < bounds[k] * math.sqrt(times[k]), density, 0.0)
    return grid, density


def _normal_pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


@dataclass(frozen=True)
class Arm:
    """One cell's runs as Yuen's test sees them, on log values."""

    runs: int
    kept: int  # runs left after trimming
    mean: float  # trimmed mean of the logs
    variance_term: float  # d = (n - 1) s_w^2 / (h (h - 1)): the trimmed mean's squared standard error
    censored: int

    @property
    def spread(self) -> float:
        """s_w^2, the winsorized variance of the logs: the runs' spread, whatever their number."""
        return self.variance_term * self.kept * (self.kept - 1) / (self.runs - 1)


def arm(values: Sequence[float], trim: int, censored_at: float) -> Arm | None:
    """Yuen's summary of one arm; inf values are runs that did not converge, counted at
    `censored_at`. None where trimming leaves fewer than two runs."""
    data = np.asarray(values, float)
    censored = int(np.isinf(data).sum())
    kept = len(data) - 2 * trim
    if kept < 2:
        return None
    logs = np.sort(np.log(np.where(np.isinf(data), censored_at, data)))
    mean = float(logs[trim:len(logs) - trim].mean())
    winsorized = np.clip(logs, logs[trim], logs[len(logs) - 1 - trim])
    var_w = float(winsorized.var(ddof=1))
    # Samples-to-target come in whole eval intervals, and a few runs often tie: a zero
    # spread is a rounding artefact, not certainty. Sheppard's correction of the
    # smallest step between distinct values (of all the arm's runs) floors it.
    distinct = np.unique(logs[np.isfinite(logs)])
    if len(distinct) > 1:
        var_w = max(var_w, float(np.diff(distinct).min()) ** 2 / 12)
    elif var_w < 1e-18:
        var_w = 0.0  # every run the same: no spread to go on (float noise is not one)
    return Arm(len(data), kept, mean, (len(data) - 1) * var_w / (kept * (kept - 1)), censored)


def _borrowed(this: Arm, other: Arm) -> Arm:
    """An arm whose runs are all alike, with the other arm's spread per run: the tie is
    the eval grid's doing, and both recipes run on the same grid."""
    if this.variance_term > 0 or other.variance_term == 0:
        return this
    term = (this.runs - 1) * other.spread / (this.kept * (this.kept - 1))
    return Arm(this.runs, this.kept, this.mean, term, this.censored)


def information(candidate_runs: int, reference_runs: int, trim: int) -> float:
    """The comparison's information, up to the runs' common spread: 1 / (1/h_c + 1/h_r)."""
    return 1.0 / (1.0 / (candidate_runs - 2 * trim) + 1.0 / (reference_runs - 2 * trim))


@dataclass(frozen=True)
class SequentialInterval:
    """A factor (candidate over reference) at one look: a None bound is unbounded."""

    factor: float | None
    low: float | None
    high: float | None
    level: float  # this look's nominal two-sided confidence
    runs_candidate: int
    runs_reference: int
    reason: str | None = None  # why a bound is unbounded, or no interval exists

    @property
    def half_width(self) -> float | None:
        """Half the interval's width relative to the factor (0.03 is +-3%)."""
        if self.factor is None or self.low is None or self.high is None:
            return None
        return (self.high - self.low) / (2 * self.factor)


def factor_interval(candidate: Sequence[float], reference: Sequence[float], z_bound: float, *,
                    trim: int = 1, df_shift: float = 0.0) -> SequentialInterval:
    """The repeated confidence interval of a look whose boundary is `z_bound` (inf: this
    look spends nothing, so the interval is everything). `df_shift` takes that many
    degrees of freedom off Welch's (CALIBRATED_DF_SHIFT for the calibrated spending)."""
    finite = [v for v in (*candidate, *reference) if math.isfinite(v)]
    n_c, n_r = len(candidate), len(reference)
    if not finite:
        return SequentialInterval(None, None, None, 0.0, n_c, n_r, "no run of either recipe converged")
    c, r = arm(candidate, trim, max(finite)), arm(reference, trim, max(finite))
    if c is None or r is None:
        return SequentialInterval(None, None, None, 0.0, n_c, n_r,
                                  f"olympic scoring needs more than {2 * trim + 1} runs of each recipe")
    tail = 0.5 * math.erfc(z_bound / math.sqrt(2))  # the look's one-sided nominal error
    level = 1 - 2 * tail
    if c.variance_term == 0 or r.variance_term == 0:  # one arm's runs all alike: borrow the other's step
        c, r = _borrowed(c, r), _borrowed(r, c)
    se2 = c.variance_term + r.variance_term
    diff = c.mean - r.mean
    cand_open, ref_open = c.censored > trim, r.censored > trim
    estimate = None if (cand_open or ref_open) else math.exp(diff)
    reasons = []
    if cand_open:
        reasons.append(f"upper bound unbounded: {c.censored} of {c.runs} candidate runs did not converge")
    if ref_open:
        reasons.append(f"lower bound unbounded: {r.censored} of {r.runs} reference runs did not converge")
    if math.isinf(z_bound) or se2 <= 0:
        reasons.append("this look spends no error" if math.isinf(z_bound) else "no spread in either recipe's runs")
        return SequentialInterval(estimate, None, None, level, n_c, n_r, "; ".join(reasons))
    df = se2 ** 2 / (c.variance_term ** 2 / (c.kept - 1) + r.variance_term ** 2 / (r.kept - 1))
    df = max(1.0, df - df_shift)
    half = float(-special.stdtrit(df, tail)) * math.sqrt(se2)
    if not half < 50:  # an early look's strict level on a few runs: a factor beyond e^+-50 says nothing
        reasons.append(f"this look's level ({level:.6f}) is out of reach of so few runs")
        return SequentialInterval(estimate, None, None, level, n_c, n_r, "; ".join(reasons))
    low = None if ref_open else math.exp(diff - half)
    high = None if cand_open else math.exp(diff + half)
    return SequentialInterval(estimate, low, high, level, n_c, n_r, "; ".join(reasons) or None)


def runs_for_half_width(goal: float, spread_candidate: float, spread_reference: float, *, min_seeds: int,
                        step: int, max_seeds: int | None, confidence: float, spending: str = "obrien_fleming",
                        trim: int = 1, limit: int = 10_000) -> int | None:
    """The fewest runs per recipe whose interval would be +-goal (relative half-width) if
    each recipe's runs spread as given (the winsorized variance of their logs). With
    `max_seeds`, the interval is the repeated one of an adaptive campaign looking at
    min_seeds, min_seeds + step, ... (None past max_seeds: no error is left to spend);
    without, the fixed-sample interval at n runs. A prediction for sizing: the spreads
    are estimates."""
    alpha = 1 - confidence
    full = information(max_seeds, max_seeds, trim) if max_seeds else None
    times: list[float] = []
    n = max(min_seeds, 2 * trim + 2)
    while n <= (max_seeds or limit):
        if full is not None:
            times.append(min(1.0, information(n, n, trim) / full))
            z = boundaries(times, alpha, spending)[-1]
        else:
            z = float(stats.norm.isf(alpha / 2))
        kept = n - 2 * trim
        terms = [(n - 1) * s / (kept * (kept - 1)) for s in (spread_candidate, spread_reference)]
        se2 = sum(terms)
        if se2 <= 0:
            return n
        df = se2 ** 2 / sum(d * d / (kept - 1) for d in terms)
        tail = 0.5 * math.erfc(z / math.sqrt(2))
        half = float(-special.stdtrit(df, tail)) * math.sqrt(se2)
        if half < 50 and math.sinh(half) <= goal:  # (e^h - e^-h) / 2: the relative half-width
            return n
        n += step if full is not None else 1
    return None
