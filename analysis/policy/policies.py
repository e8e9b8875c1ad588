"""How a rule judges a submitted score (the olympic mean of N runs, or the M > N score)
and what score it keeps. What a rule measures beside the submission (a precision RCP, a
factor's baseline runs, the peers of a group) is drawn once per batch size and true
factor (`Measured`), and every rule, honest and cherry-picked submission is judged
against the same draws.

- today's test: rejected when the score is below the minimum acceptable mean (a
  non-finite, invalid result is rejected too); a faster passing result is normalized to
  the RCP mean (the score kept is max(score, RCP mean));
- `precision_rcp`: the same test against an RCP of 2N honest runs of the candidate at
  this batch size, with the checker's statistics;
- `allowance` and the factor (`m0`): the minimum and the RCP mean times (1 + allowance)
  and times the factor's bound (`bound` for the minimum, `norm` for the RCP mean). The
  factor: per batch size measured, the ratio of the mean of M0 candidate runs to the mean
  of M0 reference runs, their geometric mean, and a normal interval on its log (delta
  method, sample stdevs); a bound is never below 1 (a factor does not let a recipe beat
  the reference RCP);
- `group`: `rcpforge round`'s flags among the submission and G - 1 honest peers of the
  same recipe: robust z of the olympic means below -z (groups of 3 or more), or the RCP
  lognormal p-value of score / the rule's test multiplier below p (where the RCP has
  spread). Caught means rejected or flagged.

A poisoned reference (pick mode `poisoned`): the party that measures the rule's own
reference does it k times and keeps the measurement with the lowest threshold (the
precision RCP with the lowest minimum acceptable mean, the factor with the smallest test
bound); the first measurement is the honest one, so k = 1 is honest."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import ndtri

from rcpforge.analysis.policy.rules import Rule
from rcpforge.analysis.policy.submitters import draw, olympic
from rcpforge.analysis.policy.thresholds import Threshold, _slack, min_acceptable_means
from rcpforge.analysis.round.groups import MIN_GROUP, lognormal_olympics

_Z_OF_BOUND = {"lower": -1.0, "point": 0.0, "upper": 1.0}


def _per_row(value, score: np.ndarray):
    """A per-simulation value against scores of shape (sims,) or (sims, candidates)."""
    return value[:, None] if np.ndim(value) == 1 and score.ndim == 2 else value


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
class GroupFlags:
    """`rcpforge round`'s flags of a submission among `peers` (sims, G - 1)."""

    peers: np.ndarray
    scale: np.ndarray | float  # the rule's test multiplier: the p-value is of score / scale
    honest_sample: np.ndarray | None  # sorted lognormal olympic means (the RCP p-value); None: no p
    z: float
    p: float

    def flagged(self, score: np.ndarray) -> np.ndarray:
        if score.ndim == 2:
            return np.column_stack([self.flagged(score[:, j]) for j in range(score.shape[1])])
        out = np.zeros(score.shape, bool)
        if self.peers.shape[1] + 1 >= MIN_GROUP:  # the z is scale-free: scores as they are
            scores = np.column_stack([score, self.peers])
            finite = np.isfinite(scores).all(axis=1)
            out |= finite & (_robust_z_first(np.where(np.isfinite(scores), scores, 0.0)) < -self.z)
        if self.honest_sample is not None:
            hits = np.searchsorted(self.honest_sample, score / self.scale * (1 + 1e-12), side="right")
            out |= (hits + 1) / (len(self.honest_sample) + 1) < self.p
        return out


@dataclass(frozen=True)
class Judge:
    """Rejects below `minimum`, normalizes to `floor` (floats or one per simulation),
    and flags where a group says so. Scores: (sims,) or (sims, candidates)."""

    minimum: np.ndarray | float
    floor: np.ndarray | float
    flags: GroupFlags | None = None

    def rejected(self, score: np.ndarray) -> np.ndarray:
        out = ~(score >= _per_row(self.minimum, score)) | ~np.isfinite(score)
        return out | self.flags.flagged(score) if self.flags is not None else out

    def scored(self, score: np.ndarray) -> np.ndarray:
        return np.maximum(score, _per_row(self.floor, score))


@dataclass
class Measured:
    """One batch size and true factor: today's threshold and what the rules measure,
    drawn once, column 0 the honest measurement and columns 1.. a poisoner's others."""

    threshold: Threshold
    sims: int
    precision: tuple[np.ndarray, np.ndarray] | None = None  # (minimum, mean), each (sims, kmax)
    factor_logs: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # m0: (log f, se)
    peers: np.ndarray | None = None  # (sims, Gmax - 1) olympic means of honest peers
    sample: np.ndarray | None = None  # the RCP p-value's honest olympic means, sorted


def precision_rcps(values: np.ndarray, rngs: tuple, sims: int, sets: int, n: int, trim: int, benchmark: str,
                   ruleset: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(minimum, mean), each (sims, sets): RCPs of 2N honest candidate runs, the first
    from rngs[0] (the honest one), the others from rngs[1]."""
    runs = draw(values, rngs[0], (sims, 1, 2 * n))
    if sets > 1:
        runs = np.concatenate([runs, draw(values, rngs[1], (sims, sets - 1, 2 * n))], axis=1)
    mean = olympic(runs, trim)  # as the submissions' means: equal runs pass the test their own mean sets
    with np.errstate(invalid="ignore"):
        stdev = runs.std(axis=2)
    return min_acceptable_means(mean, stdev, 2 * n - 2 * trim, n) - _slack(ruleset, benchmark), mean


def factor_logs(pairs: list[tuple[np.ndarray, np.ndarray]], rngs: tuple, sims: int, sets: int,
                m0s) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per M0 in `m0s`: the log factor and its standard error, each (sims, sets), from M0
    runs of each recipe at each batch size in `pairs` ((reference values, candidate
    values)). The runs are drawn once for the largest M0 (a smaller one uses the first)."""
    top = max(m0s)
    drawn = [(draw(ref, rngs[0], (sims, 1, top)), draw(cand, rngs[0], (sims, 1, top))) for ref, cand in pairs]
    if sets > 1:
        drawn = [(np.concatenate([r, draw(ref, rngs[1], (sims, sets - 1, top))], axis=1),
                  np.concatenate([c, draw(cand, rngs[1], (sims, sets - 1, top))], axis=1))
                 for (r, c), (ref, cand) in zip(drawn, pairs, strict=True)]
    out = {}
    for m0 in m0s:
        logs, variances = [], []
        for r, c in drawn:
            r, c = r[:, :, :m0], c[:, :, :m0]
            mr, mc = r.mean(axis=2), c.mean(axis=2)
            logs.append(np.log(mc / mr))
            variances.append(r.var(axis=2, ddof=1) / (m0 * mr**2) + c.var(axis=2, ddof=1) / (m0 * mc**2))
        out[m0] = (np.mean(logs, axis=0), np.sqrt(np.sum(variances, axis=0)) / len(pairs))
    return out


def peer_olympics(values: np.ndarray, rng: np.random.Generator, sims: int, peers: int, n: int,
                  trim: int) -> np.ndarray:
    return olympic(draw(values, rng, (sims, peers, n)), trim)


def honest_sample(threshold: Threshold, n: int, trim: int, draws: int, seed: int) -> np.ndarray | None:
    """The RCP p-value's honest olympic means (sorted); None where the RCP has no spread or
    stands in for a smaller batch size."""
    if threshold.used not in ("found", "interpolated") or threshold.rcp_stdev <= 0:
        return None
    sample = lognormal_olympics(n, trim, float(np.mean(threshold.rcp_mean)), threshold.rcp_stdev,
                                threshold.rcp_runs, draws, seed)
    return None if sample is None else np.sort(sample)


def _bound(logs: tuple[np.ndarray, np.ndarray], which: str, confidence: float) -> np.ndarray:
    log_f, se = logs
    with np.errstate(invalid="ignore"):
        return np.maximum(np.exp(log_f + _Z_OF_BOUND[which] * ndtri(0.5 + confidence / 2) * se), 1.0)


def _pick(table: np.ndarray, column: np.ndarray) -> np.ndarray:
    return table[np.arange(len(table)), column]


def judge(rule: Rule, measured: Measured, k: int = 1, poisoned: bool = False) -> Judge:
    """The rule's judge; with `poisoned`, its reference measured k times and the one with
    the lowest threshold kept."""
    column = np.zeros(measured.sims, np.int64)
    threshold = measured.threshold
    minimum, floor = threshold.minimum, threshold.rcp_mean
    if rule.precision_rcp:
        assert measured.precision is not None
        minimums, means = measured.precision
        if poisoned:
            column = np.argmin(minimums[:, :k], axis=1)
        minimum, floor = _pick(minimums, column), _pick(means, column)
    test: np.ndarray | float = 1.0 + rule.allowance
    norm: np.ndarray | float = test
    if rule.m0 is not None:
        logs = measured.factor_logs[rule.m0]
        tests = _bound(logs, rule.bound, rule.confidence)
        if poisoned:
            column = np.argmin(tests[:, :k], axis=1)
        test = test * _pick(tests, column)
        norm = norm * _pick(_bound(logs, rule.norm or rule.bound, rule.confidence), column)
    flags = None
    if rule.group is not None:
        assert measured.peers is not None
        flags = GroupFlags(measured.peers[:, : rule.group - 1], test, measured.sample, rule.z, rule.p)
    return Judge(minimum * test, floor * norm, flags)
