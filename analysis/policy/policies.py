"""The five policies: how each judges a submitted score (the olympic mean of N runs, or
the M > N score) and what score it keeps. Each is built once per batch size and true
factor, with whatever it draws itself (a precision RCP, a factor's baseline runs, the
peers of a group), and then judges the honest and every cherry-picked submission
against the same draws.

- `today`: the checker: rejected when the olympic mean is below the minimum acceptable
  mean (a non-finite, invalid result is rejected too); a faster passing result is
  normalized to the RCP mean (the score is max(olympic mean, RCP mean)).
- `precision_rcp`: the same test against an RCP of the candidate's own precision: 2N
  honest runs of the candidate at this batch size, its checker statistics.
- `factor`: the reference RCP scaled by a convergence factor measured from M0 runs of
  each recipe at the smallest and largest batch size with runs: per batch size the ratio
  of the mean of the candidate's runs to the reference's, their geometric mean, and a
  normal interval on its log (delta method, sample stdevs); the bound (lower, point or
  upper; never below 1: a factor does not let a recipe beat the reference RCP) scales
  the minimum acceptable mean and the RCP mean.
- `group`: today's test, and `rcpforge round`'s flags among G similar submissions (the
  submission and G - 1 honest peers of the same recipe): robust z of olympic mean / RCP
  mean below -z (groups of 3 or more), or the RCP lognormal p-value below p (where the
  RCP has spread). Caught means rejected or flagged.
- `m_of_n`: M runs scored as the rules score them (`submitters.window_scores`), that
  score under today's test."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from rcpforge.analysis.policy.submitters import draw, olympic
from rcpforge.analysis.policy.thresholds import Threshold, _slack, min_acceptable_means
from rcpforge.analysis.round.groups import MIN_GROUP, FlagSettings, lognormal_olympics

POLICIES = ("today", "precision_rcp", "factor", "group", "m_of_n")
BOUNDS = ("lower", "point", "upper")


@dataclass(frozen=True)
class Judge:
    """Rejects below `minimum`, normalizes to `rcp_mean` (floats or one per simulation)."""

    minimum: np.ndarray | float
    rcp_mean: np.ndarray | float

    def rejected(self, score: np.ndarray) -> np.ndarray:
        return ~(score >= self.minimum) | ~np.isfinite(score)

    def scored(self, score: np.ndarray) -> np.ndarray:
        return np.maximum(score, self.rcp_mean)


def today_judge(threshold: Threshold) -> Judge:
    return Judge(threshold.minimum, threshold.rcp_mean)


def precision_judge(values: np.ndarray, rng: np.random.Generator, sims: int, n: int, trim: int,
                    benchmark: str, ruleset: str | None) -> Judge:
    """Against an RCP of 2N honest candidate runs, drawn anew per simulation."""
    runs = np.sort(draw(values, rng, (sims, 2 * n)), axis=1)
    with np.errstate(invalid="ignore"):
        mean = runs[:, trim : 2 * n - trim].mean(axis=1)
        stdev = runs.std(axis=1)
    minimum = min_acceptable_means(mean, stdev, 2 * n - 2 * trim, n) - _slack(ruleset, benchmark)
    return Judge(minimum, mean)


@dataclass(frozen=True)
class FactorSettings:
    m0: int = 5
    bound: str = "lower"
    confidence: float = 0.95


def factor_bounds(pairs: list[tuple[np.ndarray, np.ndarray]], rng: np.random.Generator, sims: int,
                  s: FactorSettings) -> np.ndarray:
    """Per simulation, the factor's bound from M0 runs of each recipe at each batch size
    in `pairs` ((reference values, candidate values) per batch size)."""
    logs, variances = [], []
    for ref, cand in pairs:
        r, c = draw(ref, rng, (sims, s.m0)), draw(cand, rng, (sims, s.m0))
        mr, mc = r.mean(axis=1), c.mean(axis=1)
        logs.append(np.log(mc / mr))
        variances.append(r.var(axis=1, ddof=1) / (s.m0 * mr ** 2) + c.var(axis=1, ddof=1) / (s.m0 * mc ** 2))
    log_f = np.mean(logs, axis=0)
    se = np.sqrt(np.sum(variances, axis=0)) / len(pairs)
    z = {"lower": -1.0, "point": 0.0, "upper": 1.0}[s.bound] * ndtri(0.5 + s.confidence / 2)
    with np.errstate(invalid="ignore"):
        return np.maximum(np.exp(log_f + z * se), 1.0)


def factor_judge(threshold: Threshold, bounds: np.ndarray) -> Judge:
    return Judge(threshold.minimum * bounds, threshold.rcp_mean * bounds)


def _robust_z_first(scores: np.ndarray) -> np.ndarray:
    """`rcpforge.analysis.stats.robust_z` of column 0 of each row (the same MAD-of-0 fallback)."""
    med = np.median(scores, axis=1)
    dev = np.abs(scores - med[:, None])
    mad, meanad = np.median(dev, axis=1), dev.mean(axis=1)
    x = scores[:, 0] - med
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(mad > 0, 0.6745 * x / mad, np.where(meanad > 0, x / (1.253314 * meanad), 0.0))
    return np.nan_to_num(z, nan=0.0)


@dataclass(frozen=True)
class GroupJudge:
    """Today's test plus `rcpforge round`'s flags among the submission and its peers."""

    base: Judge
    peers: np.ndarray  # (sims, G - 1) olympic means of honest peers
    rcp_mean: float
    honest_sample: np.ndarray | None  # sorted lognormal olympic means (the RCP p-value), None: no p
    flags: FlagSettings

    def rejected(self, score: np.ndarray) -> np.ndarray:
        out = self.base.rejected(score)
        if self.peers.shape[1] + 1 >= MIN_GROUP:
            scores = np.column_stack([score, self.peers]) / self.rcp_mean
            finite = np.isfinite(scores).all(axis=1)
            out |= finite & (_robust_z_first(np.where(np.isfinite(scores), scores, 0.0)) < -self.flags.z_threshold)
        if self.honest_sample is not None:
            hits = np.searchsorted(self.honest_sample, score * (1 + 1e-12), side="right")
            out |= (hits + 1) / (len(self.honest_sample) + 1) < self.flags.p_threshold
        return out

    def scored(self, score: np.ndarray) -> np.ndarray:
        return self.base.scored(score)


def group_judge(threshold: Threshold, values: np.ndarray, rng: np.random.Generator, sims: int, n: int, trim: int,
                group: int, flags: FlagSettings) -> GroupJudge:
    peers = olympic(draw(values, rng, (sims, group - 1, n)), trim)
    sample = None
    if threshold.used in ("found", "interpolated") and threshold.rcp_stdev > 0:
        sample = lognormal_olympics(n, trim, float(np.mean(threshold.rcp_mean)), threshold.rcp_stdev,
                                    threshold.rcp_runs, flags.draws, flags.seed)
        sample = None if sample is None else np.sort(sample)
    return GroupJudge(today_judge(threshold), peers, float(np.mean(threshold.rcp_mean)), sample, flags)
