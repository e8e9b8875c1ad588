"""The censored objective and the pruning rule, as pure functions (the oracle is the
rule written out: a trial that reached the target beats one that did not; a straight
line is extrapolated by hand)."""

from __future__ import annotations

import math

import optuna
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rcpforge.sweeps.tune_objective import NAN_DISTANCE, distance, score
from rcpforge.sweeps.tune_optuna import HopelessPruner
from rcpforge.trainers.contract import RunResult, RunStatus, Target

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


RULE = HopelessPruner(max_tokens=BUDGET, window=3, min_fraction=0.5)
HALF = 13  # evals: 13 * 4096 = 53,248 tokens, past half the budget


def test_budget_rule_keeps_a_run_whose_fastest_progress_reaches_the_target_in_budget():
    # distance falls 0.01 per eval, 0.9 -> 0.78 after 13 evals: 78 more evals needed,
    # far past 100,000 tokens -> hopeless; at 0.05 per eval it is not
    assert RULE.prune(None, _line(0.9, 0.01, HALF))
    assert not RULE.prune(None, _line(0.9, 0.05, HALF))
    # the judgement uses the fastest window ever, not the latest one: a fast start
    # (0.1 per eval) followed by a slow stretch still gets the benefit of the doubt
    curve = {(i + 1) * STEP: 0.9 - 0.1 * i for i in range(5)} | {(i + 1) * STEP: 0.5 - 0.001 * (i - 4) for i in range(5, HALF)}
    # oracle: 0.1 per 4,096 tokens from distance 0.492 at 53,248 tokens -> reaches 0 by ~73,400 < 100,000
    assert HALF * STEP + 0.492 / (0.1 / STEP) < BUDGET
    assert not RULE.prune(None, _Curve(curve))


def test_budget_rule_never_judges_a_plateau_before_min_fraction_of_the_budget():
    flat = _Curve({(i + 1) * STEP: 1.6 for i in range(12)})  # 49,152 tokens < 50,000
    assert not RULE.prune(None, flat)
    flat.intermediate_values[HALF * STEP] = 1.6
    assert RULE.prune(None, flat)  # no progress at all, past half the budget


def _study_with_converged(tokens: float):
    study = optuna.create_study(direction="minimize")
    study.add_trial(optuna.trial.create_trial(
        params={}, distributions={}, value=tokens, user_attrs={"converged": True}))
    study.add_trial(optuna.trial.create_trial(  # a censored trial does not count as a winner
        params={}, distributions={}, value=2 * BUDGET * 1.1, user_attrs={"converged": False}))
    return study


def test_cannot_win_rule_prunes_once_past_the_best_converged_trial():
    study = _study_with_converged(28_672)
    behind = _Curve({(i + 1) * STEP: 0.5 for i in range(7)})  # 28,672 tokens, short of the target
    assert RULE.prune(study, behind)
    assert not RULE.prune(study, _Curve({(i + 1) * STEP: 0.5 for i in range(6)}))  # 24,576: may still win
    # with several seeds per trial, one seed past the best mean proves nothing
    assert not HopelessPruner(BUDGET, single_seed=False).prune(study, behind)
    assert not RULE.prune(optuna.create_study(), behind)  # no converged trial yet
