"""The adaptive planner's own error rates, by simulation: `replay_looks` run to every
cell's stop on outcomes drawn where the true factor is known, over many campaigns.

Each batch size is one comparison with arms of its own kind: the candidate noisier or
quieter than the reference, dearer or cheaper per run, so the allocator gives the arms
unequal runs, look after look, up to 26 each. The intervals come from
`rcpforge.analysis.sequential.boundaries` and nowhere else; tests/analysis/test_sequential.py
checks that function on equal arms, this file checks what the planner makes of it.

The hardest case is a factor exactly at the margin: no verdict is right there, and a
cell stops at the first look whose interval excludes the margin, that is the truth.
That is peeking at its worst, and repeated confidence intervals hold it to alpha (5%):
wrong verdicts and stopping intervals that miss the truth at most 5% of the time. Where
no verdict stops the looks, all of a comparison's intervals cover the truth together at
least 95% of the time. Boundaries that spend twice the error (90% intervals where 95%
are asked) give about 10% on both counts here, a plain 1.96 at every look about 20%;
each count is asserted below a limit that a planner holding alpha passes 999 times in
1000 and that the doubled error passes less than once in 10,000 (each test checks that
its size still gives that).

The CI form simulates 1,400 comparisons a question; RCPFORGE_SLOW_ADAPTIVE=1 runs
20,000 a question, which tightens the limit from 6.9% to 5.5%. The same limits hold the
calibrated spending (issue 37: half the error at the first look) at the margin and
over all looks with censored runs, and equivalence declared at the band's edge; each
prints its rates.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats

from rcpforge.orchestrator.adaptive import ANSWERED, FUTILE, AdaptiveState, LookEntry, Outcome, Outcomes, replay_looks
from rcpforge.sweeps.adaptive_spec import AdaptiveSpec

ALPHA = 0.05
MAX_SEEDS = 26
RECIPES = ["ref", "cand"]  # the first is the reference


@dataclass(frozen=True)
class Arms:
    """One comparison's two arms: the spread of log samples-to-target and the tokens per
    run (allocation weighs both)."""

    candidate_spread: float
    reference_spread: float
    candidate_tokens: float
    reference_tokens: float


# One comparison per batch size; the batch sizes only name them.
SHAPES = {
    16: Arms(0.10, 0.04, 2.0, 1.0),  # a noisy candidate, twice the reference's cost
    32: Arms(0.03, 0.08, 1.0, 1.0),  # a noisy reference
    64: Arms(0.06, 0.06, 4.0, 1.0),  # alike but for cost: the candidate four times dearer
    128: Arms(0.08, 0.05, 1.0, 3.0),  # the reference three times dearer
}

CI, FULL = 350, 5000  # campaigns, each of len(SHAPES) comparisons


def sizes(ci: int, full: int, duration: str) -> list:
    """The CI and the opt-in full number of simulated campaigns, as test parameters."""
    return [
        pytest.param(ci, id="ci"),
        pytest.param(full, id="full", marks=pytest.mark.skipif(
            os.environ.get("RCPFORGE_SLOW_ADAPTIVE") != "1",
            reason=f"20,000 simulated comparisons a question, {duration}; the same questions on 1,400 run in "
                   "the ci cases; set RCPFORGE_SLOW_ADAPTIVE=1 to run it")),
    ]


SIZES = sizes(CI, FULL, "about 5 minutes")


def _draw(rng: np.random.Generator, truth: float) -> Outcomes:
    """Every seed of every cell, drawn up front: `replay_looks` reads only the seeds it
    has asked for, so these are the outcomes of the campaign that ran them look by look
    (test_drawing_every_seed_up_front_decides_as_running_them_look_by_look)."""
    outcomes: Outcomes = {}
    for size, arms in SHAPES.items():
        for recipe, factor, spread, tokens in (("ref", 1.0, arms.reference_spread, arms.reference_tokens),
                                               ("cand", truth, arms.candidate_spread, arms.candidate_tokens)):
            values = np.exp(rng.normal(math.log(1000 * factor), spread, MAX_SEEDS))
            outcomes[(recipe, size)] = [Outcome(float(v), tokens=tokens) for v in values]
    return outcomes


@dataclass(frozen=True)
class Comparison:
    size: int
    looks: list[LookEntry]  # the candidate's, first to last
    stop_reason: str
    stop_detail: str


def _simulate(settings: AdaptiveSpec, truth: float, campaigns: int, seed: int) -> list[Comparison]:
    rng = np.random.default_rng(seed)
    out: list[Comparison] = []
    for _ in range(campaigns):
        state = replay_looks(settings, RECIPES, list(SHAPES), _draw(rng, truth), max_seeds=MAX_SEEDS)
        assert state.finished and state.waiting == 0
        out.extend(_comparisons(state))
    return out


def _comparisons(state: AdaptiveState) -> Iterator[Comparison]:
    for size in SHAPES:
        stop = state.stops[("cand", size)]
        yield Comparison(size, [e for e in state.looks if e.batch_size == size], stop.reason, stop.detail)


def _covers(entry: LookEntry, truth: float) -> bool:
    low, high = entry.interval.low, entry.interval.high  # None: unbounded
    return (low is None or low <= truth) and (high is None or truth <= high)


def _wrong(c: Comparison, truth: float, margin: float) -> bool:
    """A verdict the truth contradicts; at the margin itself, every verdict."""
    if c.stop_reason != ANSWERED:
        return False
    return (c.stop_detail.startswith("slower than") and truth <= margin
            or c.stop_detail.startswith("within") and truth >= margin)


def _limit(n: int) -> int:
    """The most failures out of n that a planner holding alpha stays within 999 times in
    1000; checked to be out of reach of one that spends twice the error."""
    limit = int(stats.binom.ppf(0.999, n, ALPHA))
    assert stats.binom.cdf(limit, n, 2 * ALPHA) < 1e-4, f"{n} comparisons cannot tell alpha from 2 alpha"
    return limit


def _assert_at_most(limit: int, comparisons: list[Comparison], failures: dict[str, Callable[[Comparison], bool]]):
    """Every count within the limit; the message gives each count and its rate by shape."""
    counts = {name: sum(map(failed, comparisons)) for name, failed in failures.items()}
    lines = [f"{counts[name]} {name} ({_by_shape(comparisons, failed)})" for name, failed in failures.items()]
    assert all(n <= limit for n in counts.values()), \
        f"of {len(comparisons)} comparisons, at most {limit} may fail: " + "; ".join(lines)


def _by_shape(comparisons: list[Comparison], failed: Callable[[Comparison], bool]) -> str:
    rates = {s: np.mean([failed(c) for c in comparisons if c.size == s]) for s in SHAPES}
    return ", ".join(f"batch size {s}: {r:.2%}" for s, r in rates.items())


def _assert_looked_at_unequal_arms(comparisons: list[Comparison]) -> None:
    """What makes the simulation a test of the planner: several looks per comparison, at
    unequal runs per arm, with intervals that have both bounds."""
    looks = [e for c in comparisons for e in c.looks]
    assert np.median([len(c.looks) for c in comparisons]) >= 8
    assert np.mean([e.interval.runs_candidate != e.interval.runs_reference for e in looks]) > 0.25
    assert np.mean([e.interval.low is not None and e.interval.high is not None for e in looks]) > 0.5


@pytest.mark.parametrize("campaigns", SIZES)
def test_a_factor_at_its_margin_gets_a_verdict_at_most_alpha_of_the_time(campaigns):
    """Truth at the margin: every verdict is wrong, and the cell's stopping interval,
    the one the campaign reports, misses the truth. Both at most alpha."""
    margin = 1.02
    comparisons = _simulate(AdaptiveSpec(margin=margin, min_seeds=5, step=3), margin, campaigns, seed=1)
    _assert_looked_at_unequal_arms(comparisons)
    limit = _limit(len(comparisons))

    def wrong(c: Comparison) -> bool:
        return _wrong(c, margin, margin)

    def missed(c: Comparison) -> bool:
        return not _covers(c.looks[-1], margin)

    _assert_at_most(limit, comparisons, {"wrong verdicts": wrong, "stopping intervals that miss the truth": missed})
    assert any(map(wrong, comparisons))  # verdicts are reachable: the count could have failed


@pytest.mark.parametrize("campaigns", SIZES)
def test_every_look_s_interval_covers_the_true_factor_together(campaigns):
    """A precision question on a candidate 5% slower: every interval a comparison showed,
    look by look, covers the truth in at least 1 - alpha of the comparisons, and so does
    the one it stopped on."""
    truth = 1.05
    comparisons = _simulate(AdaptiveSpec(half_width=0.03, min_seeds=5, step=3), truth, campaigns, seed=2)
    _assert_looked_at_unequal_arms(comparisons)
    limit = _limit(len(comparisons))

    def any_missed(c: Comparison) -> bool:
        return not all(_covers(e, truth) for e in c.looks)

    def missed(c: Comparison) -> bool:
        return not _covers(c.looks[-1], truth)

    _assert_at_most(limit, comparisons, {"comparisons with a look that misses the truth": any_missed,
                                         "stopping intervals that miss the truth": missed})


def test_drawing_every_seed_up_front_decides_as_running_them_look_by_look():
    """The shortcut the simulation takes, against the orchestrator's way: outcomes only
    for the seeds asked so far, one look at a time."""
    settings = AdaptiveSpec(margin=1.02, min_seeds=5, step=3)
    rng = np.random.default_rng(3)
    for truth in (1.02, 1.08):
        drawn = _draw(rng, truth)
        at_once = replay_looks(settings, RECIPES, list(SHAPES), drawn, max_seeds=MAX_SEEDS)
        ran: Outcomes = {cell: [] for cell in drawn}
        while not (state := replay_looks(settings, RECIPES, list(SHAPES), ran, max_seeds=MAX_SEEDS)).finished:
            assert state.waiting > 0  # it waits for the step's runs
            for cell, k in state.seeds.items():
                ran[cell] = drawn[cell][:k]  # the runs of this look's step come in
        assert state.looks == at_once.looks and state.stops == at_once.stops and state.seeds == at_once.seeds
        assert len(state.looks) > len(SHAPES)


# --- issue 37: calibrated spending, equivalence and futility stops ----------------------

CALIBRATED = dict(min_seeds=5, step=3, spending="calibrated")
CI_CALIBRATED, FULL_CALIBRATED = 350, 5000
CALIBRATED_SIZES = sizes(CI_CALIBRATED, FULL_CALIBRATED, "several minutes")


def _censor(outcomes: Outcomes, share: float, rng: np.random.Generator) -> Outcomes:
    """The candidate's runs, each failing to converge with probability `share` (FP4-like)."""
    return {cell: [Outcome(math.inf, tokens=o.tokens) if cell[0] == "cand" and rng.random() < share else o
                   for o in seen] for cell, seen in outcomes.items()}  # type: ignore[union-attr]


def _simulate_with(settings: AdaptiveSpec, truth: float, campaigns: int, seed: int,
                   censored: float = 0.0) -> list[Comparison]:
    rng = np.random.default_rng(seed)
    out: list[Comparison] = []
    for _ in range(campaigns):
        state = replay_looks(settings, RECIPES, list(SHAPES), _censor(_draw(rng, truth), censored, rng),
                             max_seeds=MAX_SEEDS)
        assert state.finished and state.waiting == 0
        out.extend(_comparisons(state))
    return out


@pytest.mark.parametrize("campaigns", CALIBRATED_SIZES)
def test_calibrated_boundaries_hold_alpha_at_the_margin(campaigns):
    """The calibrated spending (half the error at the first look) at the hardest case, the
    factor at the margin, on unequal arms: verdicts and missing stopping intervals at
    most alpha."""
    margin = 1.02
    comparisons = _simulate_with(AdaptiveSpec(margin=margin, **CALIBRATED), margin, campaigns, seed=11)
    limit = _limit(len(comparisons))
    wrong = [_wrong(c, margin, margin) for c in comparisons]
    print(f"calibrated, factor at the margin: {np.mean(wrong):.2%} wrong verdicts of {len(comparisons)} "
          f"(limit {limit}, alpha {ALPHA:.0%})")
    _assert_at_most(limit, comparisons, {"wrong verdicts": lambda c: _wrong(c, margin, margin),
                                         "stopping intervals that miss the truth":
                                             lambda c: not _covers(c.looks[-1], margin)})
    assert any(wrong)  # verdicts are reachable: the count could have failed


@pytest.mark.parametrize("campaigns", CALIBRATED_SIZES)
def test_calibrated_intervals_cover_at_the_nominal_level_with_censored_runs(campaigns):
    """A precision question on an FP4-like candidate (30% slower, 5% of its runs not
    converging) on unequal arms: every look's interval covers the truth together in at
    least 1 - alpha of the comparisons, and not far more (the calibration spends the
    error: at least alpha / 4 of them miss somewhere)."""
    truth = 1.3
    comparisons = _simulate_with(AdaptiveSpec(half_width=0.03, **CALIBRATED), truth, campaigns, seed=12,
                                 censored=0.05)
    _assert_looked_at_unequal_arms(comparisons)
    assert any(e.interval.high is None for c in comparisons for e in c.looks)  # censoring reached a bound
    limit = _limit(len(comparisons))

    def any_missed(c: Comparison) -> bool:
        return not all(_covers(e, truth) for e in c.looks)

    missed = sum(map(any_missed, comparisons))
    print(f"calibrated, censored candidate: every look covers together in {1 - missed / len(comparisons):.2%} "
          f"of {len(comparisons)} comparisons (nominal {1 - ALPHA:.0%}); stopping intervals "
          f"{np.mean([_covers(c.looks[-1], truth) for c in comparisons]):.2%}")
    _assert_at_most(limit, comparisons, {"comparisons with a look that misses the truth": any_missed})
    assert missed >= stats.binom.ppf(0.001, len(comparisons), ALPHA / 4)


@pytest.mark.parametrize("campaigns", CALIBRATED_SIZES)
def test_equivalence_is_declared_outside_the_band_at_most_alpha_of_the_time(campaigns):
    """The true factor at the band's edge (1.05 for equivalence 0.05): an interval inside
    the band misses it, so equivalence is declared at most alpha of the time; futility
    stops the comparisons that cannot be answered, which claims nothing."""
    truth = 1.05
    settings = AdaptiveSpec(equivalence=0.05, futility=True, **CALIBRATED)
    comparisons = _simulate_with(settings, truth, campaigns, seed=13)
    limit = _limit(len(comparisons))

    def declared(c: Comparison) -> bool:
        return c.stop_reason == ANSWERED and c.stop_detail.startswith("equivalent")

    futile = np.mean([c.stop_reason == FUTILE for c in comparisons])
    print(f"equivalence at the band's edge: declared in {np.mean([declared(c) for c in comparisons]):.2%} of "
          f"{len(comparisons)} comparisons (limit {limit}); futile {futile:.2%}")
    _assert_at_most(limit, comparisons, {"equivalence declared outside the band": declared})
    inside = _simulate_with(settings, 1.0, campaigns // 4, seed=14)  # the same rule answers inside the band
    assert any(map(declared, inside))


def test_equivalence_and_futility_decide_the_same_restarted_at_any_look():
    """The new stops are a pure function of the outcomes recorded: an orchestrator killed
    after any look and restarted (a replay from the outcomes so far) decides as one that
    ran through, seeds, stops and looks."""
    settings = AdaptiveSpec(margin=1.02, equivalence=0.03, futility=True, **CALIBRATED)
    rng = np.random.default_rng(15)
    reasons = set()
    for truth in (1.0, 1.03, 1.3):
        drawn = _censor(_draw(rng, truth), 0.05, rng)
        at_once = replay_looks(settings, RECIPES, list(SHAPES), drawn, max_seeds=MAX_SEEDS)
        ran: Outcomes = {cell: [] for cell in drawn}
        while not (state := replay_looks(settings, RECIPES, list(SHAPES), ran, max_seeds=MAX_SEEDS)).finished:
            restarted = replay_looks(settings, RECIPES, list(SHAPES), {c: list(v) for c, v in ran.items()},
                                     max_seeds=MAX_SEEDS)
            assert (restarted.looks, restarted.stops, restarted.seeds) == (state.looks, state.stops, state.seeds)
            for cell, k in state.seeds.items():
                ran[cell] = drawn[cell][:k]
        assert (state.looks, state.stops, state.seeds) == (at_once.looks, at_once.stops, at_once.seeds)
        reasons |= {s.reason for s in state.stops.values()}
    assert {ANSWERED, FUTILE} <= reasons  # both new kinds of stop were replayed
