"""Study set-up without training: the median rule's warm-up, the start point, grid
points queued once, and a study that refuses trials scored against another budget."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from rcpforge.sweeps.spec import parse_campaign
from rcpforge.orchestrator.tune.launcher import select_cells, tune_lock
from rcpforge.sweeps.tune_optuna import distributions, make_pruner
from rcpforge.sweeps.tune_spec import PrunerSpec
from rcpforge.sweeps.tune_study import TuneError, open_study, storage_url
from tests.helpers.campaigns import tiny_campaign

LR = FloatDistribution(1e-4, 0.1, log=True)


def _campaign(tmp_path, **tune):
    data = tiny_campaign(recipes=["bf16"], tune={"space": {"lr": {"low": 1e-4, "high": 0.1, "log": True}}, **tune})
    return parse_campaign(data, base_dir=tmp_path)


def test_median_rule_waits_for_its_warmup_then_prunes_a_worse_trial():
    study = optuna.create_study(direction="minimize", pruner=make_pruner(PrunerSpec(kind="median", warmup_evals=2,
                                                                                    startup_trials=1), 100_000))
    for value in (0.5, 0.4):
        study.add_trial(create_trial(params={"lr": 0.01}, distributions={"lr": LR}, value=1000.0,
                                     intermediate_values={4096: value, 8192: value / 2, 12288: value / 4}))
    trial = study.ask({"lr": LR})
    trial.report(0.9, 4096)
    trial.report(0.9, 8192)
    assert not trial.should_prune()  # two evals: still in its warm-up
    trial.report(0.9, 12288)
    assert trial.should_prune()  # 0.9 is above the median (0.1125) of the others at 12,288 tokens


def test_the_start_point_is_trial_zero_and_grid_points_are_queued_once(tmp_path):
    campaign = _campaign(tmp_path)
    [cell] = select_cells(campaign, ["bf16"], [16])
    study, stale = open_study(campaign, cell, storage_url(campaign), 0)
    assert stale == []
    first = study.ask(distributions(campaign.tune))
    assert first.number == 0 and first.params == {"lr": 0.01}  # the campaign's lr at bs 16

    grid = parse_campaign(tiny_campaign(recipes=["bf16"], name="grid", tune={
        "space": {"lr": {"choices": [0.01, 0.02]}, "warmup_tokens": {"low": 0, "high": 8192, "step": 8192}},
        "sampler": {"kind": "grid"}}), base_dir=tmp_path)
    study, _ = open_study(grid, cell, storage_url(grid), 0)
    study, _ = open_study(grid, cell, storage_url(grid), 0)  # again: nothing is queued twice
    waiting = study.get_trials(states=(TrialState.WAITING,))
    points = sorted((t.system_attrs["fixed_params"]["lr"], t.system_attrs["fixed_params"]["warmup_tokens"])
                    for t in waiting)
    assert points == [(0.01, 0), (0.01, 8192), (0.02, 0), (0.02, 8192)]


def test_a_study_refuses_another_budget_and_a_running_trial_left_behind_fails(tmp_path):
    campaign = _campaign(tmp_path)
    [cell] = select_cells(campaign, None, [16])
    study, _ = open_study(campaign, cell, storage_url(campaign), 0)
    left = study.ask(distributions(campaign.tune))  # as if the tune process died mid-trial
    study, stale = open_study(campaign, cell, storage_url(campaign), 0)
    assert [t.number for t in stale] == [left.number]
    assert study.trials[left.number].state is TrialState.FAIL

    changed = parse_campaign(tiny_campaign(recipes=["bf16"], budget={"max_tokens": 50_000, "eval_every_tokens": 4096},
                                           tune=campaign.tune.model_dump()), base_dir=tmp_path)
    with pytest.raises(TuneError) as info:
        open_study(changed, cell, storage_url(changed), 0)
    assert "budget" in str(info.value) and "\n" not in str(info.value)
    # warmup_tokens is not searched: another value of it makes other trials
    hparams = {16: {"lr": 0.01, "warmup_tokens": 0}, 64: {"lr": 0.02, "warmup_tokens": 8192}}
    changed = parse_campaign(tiny_campaign(recipes=["bf16"], hparams=hparams, tune=campaign.tune.model_dump()),
                             base_dir=tmp_path)
    with pytest.raises(TuneError) as info:
        open_study(changed, cell, storage_url(changed), 0)
    assert "unsearched hyperparameter" in str(info.value)
    # another start value of the searched lr is fine: the study continues
    hparams = {16: {"lr": 0.02, "warmup_tokens": 8192}, 64: {"lr": 0.02, "warmup_tokens": 8192}}
    same = parse_campaign(tiny_campaign(recipes=["bf16"], hparams=hparams, tune=campaign.tune.model_dump()),
                          base_dir=tmp_path)
    assert open_study(same, cell, storage_url(same), 0)[0].study_name == study.study_name


def test_optuna_storage_must_not_be_the_mlflow_store(tmp_path):
    campaign = parse_campaign(tiny_campaign(tracking={"uri": "sqlite:///x.db"},
                                            tune={"space": {"lr": {"low": 0.001, "high": 0.1}},
                                                  "storage": "sqlite:///x.db"}), base_dir=tmp_path)
    with pytest.raises(TuneError) as info:
        storage_url(campaign)
    assert "cannot share" in str(info.value)


def test_a_second_tune_of_the_same_campaign_is_refused(tmp_path, cli):
    from tests.helpers.campaigns import write_campaign

    data = tiny_campaign(recipes=["bf16"], tune={"space": {"lr": {"low": 0.001, "high": 0.1}}})
    path = write_campaign(tmp_path, data)
    campaign = parse_campaign(data, base_dir=tmp_path)
    with tune_lock(campaign):
        result = cli("tune", str(path))
    assert result.returncode == 2 and "already being tuned" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
