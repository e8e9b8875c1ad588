"""The rows: per batch size, true factor, policy, pick and pick mode, the honest
rejection rate, the catch rate, the advantage an uncaught cherry-picker keeps and the
extra runs, each rate with its Monte Carlo standard error sqrt(p (1 - p) / sims).

Seeding: one numpy SeedSequence per (seed, batch size, factor index), spawned into one
stream per kind of draw, so a row's figures do not depend on which other batch sizes,
policies or picks were asked for, and a seed reproduces them bit for bit.

The true mean a cherry-picker's advantage is measured against is the expected olympic
mean of an honest N-run submission from the same distribution (its Monte Carlo estimate
over the honest draws); the advantage kept is that minus the mean score of the
cherry-pickers no policy caught (positive: they look faster than they are), in percent of
the true mean and in eval intervals (None where the grid is unknown or all were caught),
each with its Monte Carlo standard error: the standard error of the mean over the uncaught
cherry-pickers' scores, stdev / sqrt(count), in the same units (None where fewer than two
were not caught; the true mean's own error, shared by every row of a factor, is left out)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rcpforge.analysis.policy import policies as pol
from rcpforge.analysis.policy.distributions import Distribution
from rcpforge.analysis.policy.submitters import PICK_MODES, draw, kept_olympic, kept_window, olympic
from rcpforge.analysis.policy.thresholds import Threshold
from rcpforge.analysis.round.groups import FlagSettings

ROW_KEYS = ("benchmark", "batch_size", "policy", "factor", "pick", "pick_mode", "honest_rejected",
            "honest_rejected_se", "caught", "caught_se", "advantage_kept_pct", "advantage_kept_evals",
            "extra_runs", "sims", "advantage_kept_pct_se", "advantage_kept_evals_se")


@dataclass(frozen=True)
class PolicySettings:
    factors: tuple[float, ...] = (1.0, 1.08)
    picks: tuple[int, ...] = (1, 2, 5)
    pick_modes: tuple[str, ...] = PICK_MODES
    policies: tuple[str, ...] = pol.POLICIES
    m0: int = 5
    group: int = 8
    m: int | None = None  # M > N runs; None: 2N
    sims: int = 20_000
    seed: int = 0
    bootstrap: bool = False  # redraw the reference RCP per simulation (two levels)
    factor: pol.FactorSettings = field(default_factory=pol.FactorSettings)
    flags: FlagSettings = field(default_factory=FlagSettings)


@dataclass(frozen=True)
class Case:
    """One batch size of one benchmark: the candidate's base distribution (scaled by each
    factor; at factor 1 it is the reference's in the RCP form), the reference's (for the
    factor policy's baseline runs) and today's threshold (a function of the stream, for
    the bootstrap)."""

    benchmark: str
    batch_size: int
    n: int
    trim: int
    candidate: Distribution
    threshold: Callable[[np.random.Generator | None], Threshold]
    factor_pairs: list  # [(reference Distribution, candidate Distribution)] at the factor's batch sizes
    ruleset: str | None = None


def _rate(flags: np.ndarray) -> tuple[float, float]:
    p = float(flags.mean())
    return p, math.sqrt(p * (1 - p) / len(flags))


def _advantage(true_mean: float, scored: np.ndarray, caught: np.ndarray, grid: float | None) -> tuple:
    """(% of the true mean, eval intervals, and the standard error of each)."""
    kept = scored[~caught & np.isfinite(scored)]
    if not len(kept):
        return None, None, None, None
    gain = true_mean - float(kept.mean())
    # each uncaught picker's advantage is true_mean - its score: their mean's standard error
    # (all equal, e.g. every one normalized to the RCP mean: exactly 0, not the float noise of std)
    se = None
    if len(kept) > 1:
        se = 0.0 if kept.min() == kept.max() else float(kept.std(ddof=1)) / math.sqrt(len(kept))
    pct_se = None if se is None else se / true_mean * 100
    evals_se = None if se is None or not grid else se / grid
    return gain / true_mean * 100, (gain / grid if grid else None), pct_se, evals_se


def _judges(case: Case, f: float, values: np.ndarray, streams, s: PolicySettings, threshold: Threshold) -> dict:
    sims, n, trim = s.sims, case.n, case.trim
    judges: dict = {}
    if "today" in s.policies or "m_of_n" in s.policies:
        judges["today"] = judges["m_of_n"] = pol.today_judge(threshold)
    if "precision_rcp" in s.policies:
        judges["precision_rcp"] = pol.precision_judge(values, streams[2], sims, n, trim, case.benchmark, case.ruleset)
    if "factor" in s.policies:
        pairs = [(ref.values, cand.scaled(f)) for ref, cand in case.factor_pairs]
        judges["factor"] = pol.factor_judge(threshold, pol.factor_bounds(pairs, streams[3], sims, s.factor))
    if "group" in s.policies:
        judges["group"] = pol.group_judge(threshold, values, streams[4], sims, n, trim, s.group, s.flags)
    return judges


def _extra_runs(policy: str, case: Case, s: PolicySettings, m: int) -> int:
    endpoints = len(case.factor_pairs)
    return {"today": 0, "precision_rcp": 2 * case.n, "factor": 2 * s.m0 * endpoints, "group": 0,
            "m_of_n": m - case.n}[policy]


@dataclass
class _Scores:
    """The submitted scores of one batch size and factor, shared by every policy (the
    same draws), computed once per (scoring, k, mode); k = 1 is the honest submitter."""

    sets: np.ndarray  # (sims, kmax, N)
    windows: np.ndarray | None  # (sims, kmax, M), for M > N scoring
    n: int
    trim: int
    cache: dict = field(default_factory=dict)

    def of(self, policy: str, k: int, mode: str) -> np.ndarray:
        key = (policy == "m_of_n", k, mode if k > 1 else "sets")
        if key not in self.cache:
            if key[0]:
                assert self.windows is not None
                self.cache[key] = kept_window(self.windows, k, mode, self.n, self.trim)
            else:
                self.cache[key] = kept_olympic(self.sets, k, mode, self.trim)
        return self.cache[key]


def _factor_rows(case: Case, s: PolicySettings, fi: int, f: float) -> list[dict]:
    kmax, m = max(s.picks), s.m or 2 * case.n
    streams = [np.random.default_rng(c) for c in np.random.SeedSequence([s.seed, case.batch_size, fi]).spawn(6)]
    values = case.candidate.scaled(f)
    scores = _Scores(draw(values, streams[0], (s.sims, kmax, case.n)),
                     draw(values, streams[1], (s.sims, kmax, m)) if "m_of_n" in s.policies else None,
                     case.n, case.trim)
    threshold = case.threshold(streams[5] if s.bootstrap else None)
    honest = olympic(scores.sets[:, 0, :], case.trim)
    true_mean = float(honest[np.isfinite(honest)].mean())
    judges = _judges(case, f, values, streams, s, threshold)
    rows = []
    for policy in s.policies:
        judge = judges[policy]
        honest_rate, honest_se = _rate(judge.rejected(scores.of(policy, 1, "sets")))
        for k in s.picks:
            for mode in s.pick_modes:
                submitted = scores.of(policy, k, mode)
                caught = judge.rejected(submitted)
                rate, se = _rate(caught)
                pct, evals, pct_se, evals_se = _advantage(true_mean, judge.scored(submitted), caught,
                                                          case.candidate.grid)
                rows.append(dict(zip(ROW_KEYS, (
                    case.benchmark, case.batch_size, policy, f, k, mode, honest_rate, honest_se, rate, se, pct,
                    evals, _extra_runs(policy, case, s, m), s.sims, pct_se, evals_se), strict=True)))
    return rows


def simulate_case(case: Case, s: PolicySettings) -> list[dict]:
    """Every row of one batch size: per factor, policy, pick and pick mode."""
    return [row for fi, f in enumerate(s.factors) for row in _factor_rows(case, s, fi, f)]
