"""Today's rule as numbers: per batch size, the olympic mean below which the checker
rejects a submission and the RCP mean it normalizes a faster one to, found as the
checker finds them (`rcpforge.analysis.check._decide`: the pruned pass, a record at the batch
size, else the interpolation of its pruned neighbours, else the smallest record; the
llama31_405b slack). With the two-level bootstrap, the records behind that threshold are
redrawn (their runs with replacement) once per simulated submission, so the rates include
the RCP's own sampling error; the pruning stays the shipped RCPs'.

The minimum acceptable mean has a closed form: the checker's bisection looks for the
submission mean at which a one-sided pooled t-test (equal stdevs) reaches p = 0.05, that
is mean - t(0.95, df) * stdev * sqrt(1/n_ref + 1/n_subm), found to 1e-4; arrays of
redrawn RCPs use the closed form (`min_acceptable_means`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from rcpforge.analysis.rcp import ALPHA, trimmed_count
from rcpforge.analysis.rcp_set import SLACK_405B, RcpSet, Record, version_at_least, with_405b_slack


@dataclass(frozen=True)
class Threshold:
    """`minimum`: the smallest olympic mean that passes; `rcp_mean`: the mean a faster
    passing submission is normalized to; `used`: found | interpolated | smallest. Floats,
    or arrays of one value per simulated submission (the bootstrap)."""

    minimum: np.ndarray | float
    rcp_mean: np.ndarray | float
    rcp_stdev: float
    rcp_runs: int
    used: str


def min_acceptable_means(mean, stdev, n_ref: int, submission_runs: int) -> np.ndarray:
    """The checker's minimum acceptable mean in closed form, for arrays: its bisection
    runs on [0, mean] (so never below 0), a stdev of 0 gives the mean, and with no
    degrees of freedom its p-value is NaN and its answer the mean."""
    mean, stdev = np.asarray(mean, float), np.asarray(stdev, float)
    n_subm = submission_runs - 2
    dof = n_ref + n_subm - 2
    if dof <= 0 or n_subm <= 0:
        return mean.copy()
    t = stats.t.ppf(1 - ALPHA, dof)
    return np.maximum(mean - t * stdev * np.sqrt(1 / n_ref + 1 / n_subm), 0.0)


def _slack(ruleset: str | None, benchmark: str) -> float:
    return SLACK_405B if ruleset and benchmark == "llama31_405b" and version_at_least(ruleset, "5.0.0") else 0.0


def tested_record(rcp_set: RcpSet, bs: int) -> tuple[list[Record], str]:
    """The pruned records the checker's verdict at `bs` rests on, and how."""
    if (found := rcp_set.find(bs, "pruned")) is not None:
        return [found], "found"
    low, high = rcp_set.below(bs, "pruned"), rcp_set.above(bs, "pruned")
    if low is not None and high is not None:
        return [low, high], "interpolated"
    if low is None and high is not None:
        return [rcp_set.smallest("pruned")], "smallest"  # type: ignore[list-item]
    raise ValueError(f"batch size {bs} is above every RCP: the checker asks for a new RCP")


def today(rcp_set: RcpSet, bs: int, ruleset: str | None) -> Threshold:
    """The checker's own numbers (its float64 order of operations: mean / max speedup)."""
    records, used = tested_record(rcp_set, bs)
    record = records[0] if len(records) == 1 else rcp_set.interpolate(bs, *records)
    tested = with_405b_slack(record, ruleset, rcp_set.benchmark) if ruleset else record
    with np.errstate(all="ignore"):
        minimum = float(np.float64(tested.mean) / tested.max_speedup)
    runs = 2 * rcp_set.submission_runs if used == "interpolated" else len(tested.epochs)
    return Threshold(minimum, float(tested.mean), float(tested.stdev), runs, used)


def _redrawn(record: Record, rng: np.random.Generator, sims: int, trim: int) -> tuple[np.ndarray, np.ndarray]:
    runs = np.asarray(record.epochs, float)
    drawn = np.sort(runs[rng.integers(0, len(runs), size=(sims, len(runs)))], axis=1)
    return drawn[:, trim : len(runs) - trim].mean(axis=1), drawn.std(axis=1)


def bootstrapped(rcp_set: RcpSet, bs: int, ruleset: str | None, rng: np.random.Generator, sims: int) -> Threshold:
    """Today's threshold with the records behind it redrawn, one per simulated submission."""
    records, used = tested_record(rcp_set, bs)
    trim, n = trimmed_count(rcp_set.benchmark), rcp_set.submission_runs
    drawn = [_redrawn(r, rng, sims, trim) for r in records]
    if used == "interpolated":
        (m1, s1), (m2, s2) = drawn
        w = (bs - records[0].bs) / (records[1].bs - records[0].bs)
        mean, stdev, n_ref = m1 + w * (m2 - m1), s1 + w * (s2 - s1), 2 * n
    else:
        (mean, stdev), n_ref = drawn[0], len(records[0].epochs) - 2 * trim
    minimum = min_acceptable_means(mean, stdev, n_ref, n) - _slack(ruleset, rcp_set.benchmark)
    fixed = today(rcp_set, bs, ruleset)
    return Threshold(minimum, mean, fixed.rcp_stdev, fixed.rcp_runs, used)
