"""The censored objective and the pruning rule, as pure functions (the oracle is the
rule written out: a trial that reached the target beats one that did not; a straight
line is extrapolated by hand)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sweeps.tune_objective import NAN_DISTANCE, distance, score
from sweeps.tune_optuna import HopelessPruner
from trainers.contract import RunResult, RunStatus, Target

MIN = Target(metric="eval_excess_loss", mode="min", value=0.3)
MAX = Target(metric="accuracy", mode="max", value=0.75)
BUDGET = 100_000
STEP = 4096  # tokens per eval; a converged run can overshoot the budget by less than one


def _conv(tokens: int) -> RunResult:
    return RunResult(status=RunStatus.converged, tokens_to_target=tokens, samples_to_target=tokens // 8,
                     tokens_trained=tokens, final_metric=0.29)


def _censored(final: float | None, status: RunStatus = RunStatus.not_converged) -> RunResult:
    return RunResult(status=status, tokens_trained=BUDGET + STEP - 1, final_metric=final)


def test_distance_in_both_modes():
    assert distance(MIN, 0.5) == pytest.approx(0.2) and distance(MIN, 0.25) == 0.0
    assert distance(MAX, 0.70) == pytest.approx(0.05) and distance(MAX, 0.80) == 0.0
    assert distance(MIN, math.nan) == NAN_DISTANCE and distance(MIN, None) == NAN_DISTANCE


def test_a_converged_trial_scores_its_mean_tokens_to_target():
    s = score([_conv(40_960), _conv(49_152)], MIN, BUDGET)
    assert s.converged and not s.censored and s.value == (40_960 + 49_152) / 2 == s.mean_tokens_to_target


tokens = st.integers(min_value=1, max_value=BUDGET + STEP - 1)
finals = st.floats(min_value=0.3 + 1e-9, max_value=50.0)


@given(st.lists(tokens, min_size=1, max_size=4), st.lists(finals, min_size=1, max_size=4), st.lists(tokens, max_size=3))
def test_every_censored_trial_ranks_behind_every_converged_one(converged, finals_, partly):
    best_censored = score([_conv(t) for t in partly] + [_censored(f) for f in finals_], MIN, BUDGET)
    worst_converged = score([_conv(t) for t in converged], MIN, BUDGET)
    assert best_censored.censored and not best_censored.converged
    assert best_censored.value > worst_converged.value


@given(finals, finals)
def test_among_censored_trials_the_closer_one_ranks_first(a, b):
    sa, sb = score([_censored(a)], MIN, BUDGET), score([_censored(b)], MIN, BUDGET)
    assert (sa.value < sb.value) == (a < b)
    assert sa.mean_distance == pytest.approx(a - 0.3)


def test_more_converged_seeds_rank_first_and_a_blown_up_run_last():
    one_of_two = score([_conv(50_000), _censored(0.8)], MIN, BUDGET)
    none_of_two = score([_censored(0.8), _censored(0.8)], MIN, BUDGET)
    blown_up = score([_censored(math.nan, RunStatus.diverged)], MIN, BUDGET)
    far = score([_censored(20.0, RunStatus.diverged)], MIN, BUDGET)
    assert one_of_two.value < none_of_two.value < far.value < blown_up.value
    assert all(math.isfinite(s.value) for s in (one_of_two, none_of_two, blown_up))


def test_a_trial_is_scored_from_outcomes_only():
    with pytest.raises(ValueError):
        score([RunResult(status=RunStatus.pruned)], MIN, BUDGET)
    with pytest.raises(ValueError):
        score([_conv(10), RunResult(status=RunStatus.failed, error="boom")], MIN, BUDGET)


class _Curve:
    def __init__(self, points: dict[int, float]):
        self.intermediate_values = points


def _line(start: float, per_eval: float, evals: int) -> _Curve:
    return _Curve({(i + 1) * STEP: start - per_eval * i for i in range(evals)})


def test_hopeless_rule_keeps_a_run_whose_trend_reaches_the_target_in_budget():
    rule = HopelessPruner(max_tokens=BUDGET, window=3, warmup_evals=3)
    # distance 0.5, falling 0.05 per eval: 0 after 10 more evals, at (5+10)*4096 = 61,440 < 100,000
    assert not rule.prune(None, _line(0.7, 0.05, 5))


def test_hopeless_rule_prunes_a_run_whose_trend_misses_the_budget():
    rule = HopelessPruner(max_tokens=BUDGET, window=3, warmup_evals=3)
    # distance 0.9, falling 0.01 per eval: needs 90 more evals, far past 100,000 tokens
    assert rule.prune(None, _line(0.94, 0.01, 5))
    # a plateau: no progress over the window
    assert rule.prune(None, _Curve({(i + 1) * STEP: 0.6 for i in range(5)}))


def test_hopeless_rule_judges_the_best_distance_so_far_and_waits_for_warmup():
    rule = HopelessPruner(max_tokens=BUDGET, window=3, warmup_evals=3)
    assert not rule.prune(None, _Curve({STEP: 0.6, 2 * STEP: 0.6, 3 * STEP: 0.6}))  # still warming up
    # a noisy jump up does not hide progress: the best-so-far still falls fast enough
    noisy = _Curve({STEP: 0.9, 2 * STEP: 0.7, 3 * STEP: 0.95, 4 * STEP: 0.5, 5 * STEP: 0.4})
    # best: 0.9, 0.7, 0.7, 0.5, 0.4 -> over 3 evals 0.9 -> 0.4: reaches 0 at 20,480 + 0.4 / (0.5 / 12,288)
    assert 5 * STEP + 0.4 / (0.5 / (3 * STEP)) < BUDGET
    assert not rule.prune(None, noisy)
    assert not rule.prune(None, _Curve({STEP: 0.9, 2 * STEP: 0.5, 3 * STEP: 0.2, 4 * STEP: 0.1, 5 * STEP: 0.0}))
