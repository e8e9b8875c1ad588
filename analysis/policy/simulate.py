"""The rows: per batch size, true factor, rule, pick and pick mode, the honest rejection
rate, the catch rate, the advantage an uncaught cherry-picker keeps and the extra runs,
each rate with its Monte Carlo standard error sqrt(p (1 - p) / sims).

Seeding: one numpy SeedSequence per (seed, batch size), spawned into one stream per kind
of draw, so a row's figures do not depend on which other batch sizes, factors, rules or
picks were asked for, and a seed reproduces them bit for bit. Every true factor scales
the same draws (common random numbers), so rules and factors differ by their effect, not
by their noise.

The true mean a cherry-picker's advantage is measured against is the expected olympic
mean of an honest N-run submission from the same distribution (its Monte Carlo estimate
over the honest draws); the advantage kept is that minus the mean score of the
cherry-pickers no rule caught (positive: they look faster than they are), in percent of
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
from rcpforge.analysis.policy.rules import Rule, preset_rules
from rcpforge.analysis.policy.submitters import PICK_MODES, best_set, draw, fastest_runs, olympic, strategic_pick
from rcpforge.analysis.policy.thresholds import Threshold
from rcpforge.analysis.policy.windows import best_windows, luckiest_stretches, window_scores
from rcpforge.analysis.round.groups import FlagSettings

ROW_KEYS = ("benchmark", "batch_size", "policy", "factor", "pick", "pick_mode", "honest_rejected",
            "honest_rejected_se", "caught", "caught_se", "advantage_kept_pct", "advantage_kept_evals",
            "extra_runs", "sims", "advantage_kept_pct_se", "advantage_kept_evals_se", "ruleset", "coarse")

# the streams of one (seed, batch size): submissions, M > N groups, precision RCPs, factor
# runs, peers, the bootstrap, a poisoner's other precision RCPs and factor runs
_STREAMS = 8


@dataclass(frozen=True)
class PolicySettings:
    factors: tuple[float, ...] = (1.0, 1.08)
    picks: tuple[int, ...] = (1, 2, 5)
    pick_modes: tuple[str, ...] = PICK_MODES
    rules: tuple[Rule, ...] = field(default_factory=lambda: tuple(preset_rules().values()))
    sims: int = 20_000
    seed: int = 0
    bootstrap: bool = False  # redraw the reference RCP per simulation (two levels)
    flags: FlagSettings = field(default_factory=FlagSettings)  # the RCP p-value model's draws and seed


@dataclass(frozen=True)
class Case:
    """One batch size of one benchmark: the candidate's base distribution (scaled by each
    factor; at factor 1 it is the reference's in the RCP form), the reference's (for the
    factor's baseline runs), today's threshold (a function of the stream, for the
    bootstrap) and the reference RCP's coarseness mark."""

    benchmark: str
    batch_size: int
    n: int
    trim: int
    candidate: Distribution
    threshold: Callable[[np.random.Generator | None], Threshold]
    factor_pairs: list  # [(reference Distribution, candidate Distribution)] at the factor's batch sizes
    ruleset: str | None = None
    coarse: str | None = None


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


@dataclass
class Scoring:
    """The submissions under one scoring (N runs, or M > N) of one batch size and factor,
    shared by every rule: each of the kmax sets' score (column 0 the honest submitter's),
    and the `runs` and `window` cheaters' score per k."""

    candidates: np.ndarray
    runs: dict[int, np.ndarray]
    window: dict[int, np.ndarray]


def _scoring(drawn: np.ndarray, m: int | None, case: Case, s: PolicySettings) -> Scoring:
    n, trim, picks = case.n, case.trim, [k for k in s.picks if k > 1]
    if m is None:
        runs = {k: olympic(fastest_runs(drawn, k), trim) for k in picks} if "runs" in s.pick_modes else {}
        window = best_windows(drawn, picks, n, trim) if "window" in s.pick_modes and picks else {}
        return Scoring(olympic(drawn, trim), runs, window)
    groups = np.ascontiguousarray(drawn[:, :, :m])
    runs = {k: window_scores(fastest_runs(groups, k), n, trim) for k in picks} if "runs" in s.pick_modes else {}
    window = luckiest_stretches(groups, picks, n, trim) if "window" in s.pick_modes and picks else {}
    return Scoring(window_scores(groups, n, trim), runs, window)


def _measured(case: Case, s: PolicySettings, f: float, values: np.ndarray, streams: list,
              threshold: Threshold) -> pol.Measured:
    sets = max(s.picks) if "poisoned" in s.pick_modes else 1
    measured = pol.Measured(threshold, s.sims)
    if any(r.precision_rcp for r in s.rules):
        measured.precision = pol.precision_rcps(values, (streams[2], streams[6]), s.sims, sets, case.n, case.trim,
                                                case.benchmark, case.ruleset)
    if m0s := {r.m0 for r in s.rules if r.m0 is not None}:
        pairs = [(ref.values, cand.scaled(f)) for ref, cand in case.factor_pairs]
        measured.factor_logs = pol.factor_logs(pairs, (streams[3], streams[7]), s.sims, sets, m0s)
    if groups := [r.group for r in s.rules if r.group is not None]:
        measured.peers = pol.peer_olympics(values, streams[4], s.sims, max(groups) - 1, case.n, case.trim)
        measured.sample = pol.honest_sample(threshold, case.n, case.trim, s.flags.draws, s.flags.seed)
    return measured


def _submitted(mode: str, k: int, rule: Rule, judge: pol.Judge, scoring: Scoring, verdicts: np.ndarray,
               measured: pol.Measured) -> tuple[pol.Judge, np.ndarray, np.ndarray]:
    """(the judge, the score submitted, caught) of a k-fold cheater of `mode`; k = 1 is
    the honest submitter in every mode."""
    if k > 1 and mode in ("runs", "window"):
        score = (scoring.runs if mode == "runs" else scoring.window)[k]
        return judge, score, judge.rejected(score)
    shown = scoring.candidates
    chosen = strategic_pick(shown, verdicts, k) if mode == "strategic" else best_set(shown, k)
    rows = np.arange(len(shown))
    if mode == "poisoned" and k > 1 and rule.measures:
        poisoned = pol.judge(rule, measured, k, poisoned=True)
        return poisoned, shown[rows, chosen], poisoned.rejected(shown[rows, chosen])
    return judge, shown[rows, chosen], verdicts[rows, chosen]


def _factor_rows(case: Case, s: PolicySettings, f: float) -> list[dict]:
    kmax = max(s.picks)
    streams = [np.random.default_rng(c) for c in np.random.SeedSequence([s.seed, case.batch_size]).spawn(_STREAMS)]
    values = case.candidate.scaled(f)
    ms = {r.m_runs(case.n) for r in s.rules} - {None}
    sets = draw(values, streams[0], (s.sims, kmax, case.n))
    # M > N groups: drawn for the largest M; a smaller M uses the first runs of each group
    groups = draw(values, streams[1], (s.sims, kmax, max(m for m in ms if m))) if ms else sets
    threshold = case.threshold(streams[5] if s.bootstrap else None)
    measured = _measured(case, s, f, values, streams, threshold)
    scorings: dict[int | None, Scoring] = {None: _scoring(sets, None, case, s)}
    honest = scorings[None].candidates[:, 0]
    true_mean = float(honest[np.isfinite(honest)].mean())
    rows = []
    for rule in s.rules:
        m = rule.m_runs(case.n)
        if m not in scorings:
            scorings[m] = _scoring(groups, m, case, s)
        rows += _rule_rows(rule, case, s, f, scorings[m], measured, true_mean)
    return rows


def _rule_rows(rule: Rule, case: Case, s: PolicySettings, f: float, scoring: Scoring, measured: pol.Measured,
               true_mean: float) -> list[dict]:
    judge = pol.judge(rule, measured)
    verdicts = judge.rejected(scoring.candidates)
    honest_rate, honest_se = _rate(verdicts[:, 0])
    extra = rule.extra_runs(case.n, len(case.factor_pairs))
    rows = []
    for k in s.picks:
        for mode in s.pick_modes:
            used, score, caught = _submitted(mode, k, rule, judge, scoring, verdicts, measured)
            rate, se = _rate(caught)
            pct, evals, pct_se, evals_se = _advantage(true_mean, used.scored(score), caught, case.candidate.grid)
            rows.append(dict(zip(ROW_KEYS, (
                case.benchmark, case.batch_size, rule.label, f, k, mode, honest_rate, honest_se, rate, se, pct,
                evals, extra, s.sims, pct_se, evals_se, case.ruleset, case.coarse), strict=True)))
    return rows


def simulate_case(case: Case, s: PolicySettings) -> list[dict]:
    """Every row of one batch size: per factor, rule, pick and pick mode."""
    return [row for f in s.factors for row in _factor_rows(case, s, f)]
