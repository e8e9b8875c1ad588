"""The adaptive allocator's logic, on simulated outcomes (the campaigns that run it for
real are in tests/orchestrator/test_adaptive_campaign.py): barriers, consecutive seeds,
decisions that replay the same from any prefix of the outcomes, and every stop reason."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rcpforge.analysis.sequential import SequentialInterval
from rcpforge.orchestrator.adaptive import (
    ANSWERED,
    COST_CAP,
    FAILED_SEED,
    FUTILE,
    MAX_SEEDS,
    GaveUp,
    Outcome,
    _converging_share,
    answer,
    replay_looks,
)
from rcpforge.sweeps.adaptive_spec import AdaptiveSpec

RECIPES = ["bf16", "fp8", "fp4"]
SIZES = [16, 64]
FACTORS = {"bf16": 1.0, "fp8": 1.01, "fp4": 1.6}


def _simulate(settings: AdaptiveSpec, max_seeds: int, seed: int = 0, spread: float = 0.05, **kw):
    """Runs every look to the end; returns the state after each look and the outcomes."""
    rng = np.random.default_rng(seed)
    outcomes: dict = {(r, b): [] for r in RECIPES for b in SIZES}
    states = []
    while True:
        state = replay_looks(settings, RECIPES, SIZES, outcomes, max_seeds=max_seeds, **kw)
        states.append(state)
        if state.finished:
            return states, outcomes
        for (r, b), k in state.seeds.items():
            while len(outcomes[(r, b)]) < k:
                outcomes[(r, b)].append(Outcome(1000 * FACTORS[r] * float(rng.lognormal(0, spread)), tokens=4000.0))


def test_every_cell_stops_with_a_reason_and_its_seeds_are_consecutive():
    settings = AdaptiveSpec(margin=1.02, half_width=0.03, min_seeds=5, step=3)
    states, outcomes = _simulate(settings, max_seeds=26)
    final = states[-1]
    assert final.finished and set(final.stops) == set(final.seeds)
    assert final.stops[("fp4", 16)].reason == ANSWERED and "slower than 1.02" in final.stops[("fp4", 16)].detail
    for cell, k in final.seeds.items():
        assert len(outcomes[cell]) == k  # seeds 0..k-1, none skipped, none beyond
        assert final.stops[cell].reason in (ANSWERED, MAX_SEEDS)
    # the clearly slower recipe stops long before the others
    assert final.seeds[("fp4", 16)] < final.seeds[("fp8", 16)]


def test_decisions_replay_the_same_from_any_prefix_of_the_outcomes():
    settings = AdaptiveSpec(margin=1.02, half_width=0.03, min_seeds=5, step=3)
    states, outcomes = _simulate(settings, max_seeds=26, seed=4)
    final = states[-1]
    for state in states:  # each look's state is a prefix of the final one
        assert state.looks == final.looks[:len(state.looks)]
        assert all(state.seeds[c] <= final.seeds[c] for c in state.seeds)
    again = replay_looks(settings, RECIPES, SIZES, outcomes, max_seeds=26)
    assert again.seeds == final.seeds and again.stops == final.stops


def test_a_look_waits_for_every_run_of_the_step():
    settings = AdaptiveSpec(margin=1.02, min_seeds=5, step=3)
    rng = np.random.default_rng(1)
    outcomes = {(r, b): [Outcome(1000 * FACTORS[r] * float(rng.lognormal(0, 0.05))) for _ in range(5)]
                for r in RECIPES for b in SIZES}
    outcomes[("fp8", 64)][3] = None  # one run of the first step has no outcome yet
    state = replay_looks(settings, RECIPES, SIZES, outcomes, max_seeds=20)
    assert state.looks == [] and state.waiting == 1 and set(state.seeds.values()) == {5}


def test_a_seed_that_failed_for_good_stops_its_cells_with_that_reason():
    settings = AdaptiveSpec(margin=1.02, min_seeds=5, step=3)
    outcomes = {(r, b): [Outcome(1000.0 + i) for i in range(5)] for r in RECIPES for b in SIZES}
    outcomes[("bf16", 16)][2] = GaveUp("exit code 3")
    state = replay_looks(settings, RECIPES, SIZES, outcomes, max_seeds=20)
    for cell in [("fp8", 16), ("fp4", 16), ("bf16", 16)]:
        assert state.stops[cell].reason == FAILED_SEED, state.stops
    assert "reference bf16 seed 2 failed with no attempts left: exit code 3" in state.stops[("fp8", 16)].detail
    assert "--retry-failed" in state.stops[("fp8", 16)].detail
    assert ("fp8", 64) not in state.stops  # the other batch size goes on


def test_max_seeds_and_cost_cap_stop_what_is_still_open():
    never = AdaptiveSpec(half_width=0.001, min_seeds=5, step=3)  # a precision out of reach
    states, _ = _simulate(never, max_seeds=11)
    assert {s.reason for s in states[-1].stops.values()} == {MAX_SEEDS}
    assert set(states[-1].seeds.values()) == {11}
    capped = AdaptiveSpec(half_width=0.001, min_seeds=5, step=3, cost_cap={"tokens": 6 * 5 * 4000 + 10 * 4000})
    states, outcomes = _simulate(capped, max_seeds=30)
    stops = states[-1].stops
    assert COST_CAP in {s.reason for s in stops.values()}
    assert "adaptive.cost_cap (160000 tokens)" in next(s.detail for s in stops.values() if s.reason == COST_CAP)
    spent = sum(o.tokens for seen in outcomes.values() for o in seen)
    assert spent <= 6 * 5 * 4000 + 10 * 4000


def test_the_shared_reference_gets_more_seeds_than_each_candidate():
    """Neyman-type: the reference serves every comparison of its batch size."""
    many = ["bf16", "a", "b", "c"]
    rng = np.random.default_rng(2)
    outcomes: dict = {(r, 16): [] for r in many}
    settings = AdaptiveSpec(half_width=0.04, min_seeds=5, step=2)
    while True:
        state = replay_looks(settings, many, [16], outcomes, max_seeds=40)
        if state.finished:
            break
        for cell, k in state.seeds.items():
            while len(outcomes[cell]) < k:
                outcomes[cell].append(Outcome(1000 * float(rng.lognormal(0, 0.05))))
    assert state.seeds[("bf16", 16)] > max(state.seeds[(r, 16)] for r in many[1:])


@pytest.mark.parametrize("field,value,says", [
    ("max_seeds", 3, "max_seeds 3 is below min_seeds 5"),
    ("require", "all", "require: all needs both goals"),
    ("equivalence", 1.5, "less than 1"),
])
def test_settings_that_cannot_work_are_refused(field, value, says):
    with pytest.raises(ValueError, match=says):
        AdaptiveSpec(**{"margin": 1.02, field: value})


def test_no_question_is_refused():
    with pytest.raises(ValueError, match="the question is missing"):
        AdaptiveSpec()


def test_non_converged_runs_are_censored_not_dropped():
    settings = AdaptiveSpec(margin=1.02, min_seeds=5, step=3)
    outcomes = {(r, b): [Outcome(1000.0 + 7 * i) for i in range(5)] for r in RECIPES for b in SIZES}
    outcomes[("fp4", 16)] = [Outcome(math.inf)] * 3 + [Outcome(3000.0), Outcome(3100.0)]
    state = replay_looks(settings, RECIPES, SIZES, outcomes, max_seeds=20)
    entry = state.latest()[("fp4", 16)]
    assert entry.interval.high is None and entry.interval.factor is None  # unbounded above
    assert entry.interval.runs_candidate == 5  # all five counted


def test_an_arm_that_looked_tight_at_first_is_not_starved():
    """The reference's first runs spread far less than the candidate's: Neyman alone would
    give every next seed to the candidate, on five runs' evidence; neither arm gets more
    than half again the other's runs."""
    rng = np.random.default_rng(7)
    spreads = {"bf16": 0.005, "fp8": 0.08, "fp4": 0.08}
    outcomes: dict = {(r, b): [] for r in RECIPES for b in SIZES}
    settings = AdaptiveSpec(half_width=0.02, min_seeds=5, step=3)
    while True:
        state = replay_looks(settings, RECIPES, SIZES, outcomes, max_seeds=26)
        for r in ("fp8", "fp4"):
            for b in SIZES:
                c, ref = state.seeds[(r, b)], state.seeds[("bf16", b)]
                assert max(c, ref) <= 1.5 * min(c, ref) + settings.step, state.seeds
        if state.finished:
            break
        for (r, b), k in state.seeds.items():
            while len(outcomes[(r, b)]) < k:
                outcomes[(r, b)].append(Outcome(1000 * FACTORS[r] * float(rng.lognormal(0, spreads[r]))))


def test_equivalence_alone_is_a_question_but_not_with_require_all():
    assert AdaptiveSpec(equivalence=0.03).equivalence == 0.03
    with pytest.raises(ValueError, match="remove require or equivalence"):
        AdaptiveSpec(margin=1.02, half_width=0.03, equivalence=0.03, require="all")


def test_an_interval_inside_the_band_is_equivalence_and_one_astride_its_edge_is_not():
    settings = AdaptiveSpec(equivalence=0.03)
    inside = SequentialInterval(1.0, 0.975, 1.025, 0.99, 10, 10)
    astride = SequentialInterval(1.01, 0.985, 1.035, 0.99, 10, 10)
    assert answer(inside, settings) == "equivalent within 3.00% (interval 0.9750 .. 1.0250)"
    assert answer(astride, settings) is None
    assert answer(SequentialInterval(None, 0.98, None, 0.99, 10, 10), settings) is None  # unbounded: never


def test_futility_stops_a_comparison_no_goal_is_within_reach_of_and_its_reference_with_it():
    """An FP8-like candidate 1% slower, runs spreading 8%: neither a verdict against 1.02
    nor equivalence within 1% is within reach of 20 runs, so it stops within a few looks,
    and the reference stops with it once the FP4-like comparison is answered; without
    futility the same comparison runs to max_seeds."""
    settings = AdaptiveSpec(margin=1.02, equivalence=0.01, futility=True, spending="calibrated")
    states, _ = _simulate(settings, max_seeds=20, spread=0.08)
    final = states[-1]
    for b in SIZES:
        assert final.stops[("fp8", b)].reason == FUTILE and final.seeds[("fp8", b)] <= 11, (final.stops, final.seeds)
        detail = final.stops[("fp8", b)].detail
        assert "neither a verdict against 1.02 nor equivalence within reach of 20 runs" in detail
        assert final.stops[("fp4", b)].reason == ANSWERED
        assert final.seeds[("bf16", b)] < 20
    without, _ = _simulate(settings.model_copy(update={"futility": False}), max_seeds=20, spread=0.08)
    assert {without[-1].stops[("fp8", b)].reason for b in SIZES} == {MAX_SEEDS}


def test_allocation_counts_only_the_runs_that_converge():
    """A run that does not converge tells nothing of the factor: the allocator counts an
    arm's runs at its converging share, its record shrunk by one pseudo-run toward all."""
    assert _converging_share([Outcome(1.0)] * 4) == 1.0
    assert _converging_share([Outcome(1.0), Outcome(math.inf), Outcome(1.0)]) == pytest.approx(3 / 4)
    assert _converging_share([Outcome(math.inf), None, GaveUp()]) == pytest.approx(1 / 2)  # only outcomes count
