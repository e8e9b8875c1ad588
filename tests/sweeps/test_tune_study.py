"""Tuning through the real machinery: local worker processes, a real MLflow SQLite store
and a real Optuna SQLite storage. Censored trials, pruning, and resume after a kill."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import optuna
import pytest
import yaml
from mlflow import MlflowClient
from optuna.trial import TrialState

from rcpforge.orchestrator.cli.app import EXIT_NO_OUTCOME
from rcpforge.sweeps.spec import load_campaign
from rcpforge.orchestrator.tune.launcher import select_cells, tune_campaign
from rcpforge.sweeps.tune_study import storage_url
from tests.conftest import ROOT, run_cli
from tests.helpers.campaigns import tiny_campaign, write_campaign
from rcpforge.trainers.contract import RunSpec
from rcpforge.trainers.registry import get_trainer
from rcpforge.trainers.contract.schema import TAG_ROLE, TAG_STATUS, TAG_TUNE_TRIAL


@pytest.fixture(scope="module")
def _mlflow_template(tmp_path_factory):
    path = tmp_path_factory.mktemp("mlflow") / "rcpforge-mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture(autouse=True)
def _fresh_store(tmp_path, _mlflow_template):
    """Each test starts from a copy of an empty MLflow store (the default one beside the
    campaign file): creating the schema costs about 3 s of CPU."""
    shutil.copy(_mlflow_template, tmp_path / "rcpforge-mlflow.db")


def _campaign(tmp_path, budget: int, space: dict, **tune):
    data = tiny_campaign(recipes=["bf16"], budget={"max_tokens": budget, "eval_every_tokens": 4096},
                         tune={"space": space, **tune})
    return load_campaign(write_campaign(tmp_path, data))


def _study(campaign):
    return optuna.load_study(study_name=f"{campaign.name}.bf16.bs16", storage=storage_url(campaign))


def _runs_by_trial(campaign) -> dict[int, list]:
    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    exp = client.get_experiment_by_name(campaign.name)
    out: dict[int, list] = {}
    for run in client.search_runs([exp.experiment_id], max_results=1000):
        out.setdefault(int(run.data.tags[TAG_TUNE_TRIAL]), []).append(run)
    return out


def _trial_states(db) -> list[tuple[str, bool]]:
    """(state, has an intermediate value) per trial, read with plain SQL: polling through
    Optuna would open a storage (and could create its schema) on every look."""
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            return con.execute(
                "SELECT t.state, EXISTS (SELECT 1 FROM trial_intermediate_values v WHERE v.trial_id = t.trial_id) "
                "FROM trials t"
            ).fetchall()
    except sqlite3.OperationalError:  # the tables are not there yet
        return []


def test_censored_trials_rank_behind_converged_ones_and_are_not_failures(tmp_path):
    # budget 40,960 tokens: lr 0.01 converges in it, 0.001 and 0.0001 do not (0.0001 ends farther)
    campaign = _campaign(tmp_path, 40_960, {"lr": {"choices": [0.01, 0.001, 0.0001]}},
                         sampler={"kind": "grid"}, pruner={"kind": "none"}, trials=3)
    [summary] = tune_campaign(campaign, select_cells(campaign, None, [16]), workers=2)
    assert (summary.trials, summary.converged, summary.censored, summary.failed) == (3, 1, 2, 0)

    trials = {t.params["lr"]: t for t in _study(campaign).trials}
    assert all(t.state is TrialState.COMPLETE for t in trials.values())
    good, mid, bad = trials[0.01], trials[0.001], trials[0.0001]
    assert good.value <= 40_960 < mid.value < bad.value
    assert summary.best_params == {"lr": 0.01} and summary.best_converged
    # the table records the sampler as it was set, with the Optuna that ran it
    table = yaml.safe_load((campaign.base_dir / "hparams.bf16.yaml").read_text())
    sampler = table["evidence"][16]["sampler"]
    assert (sampler["kind"], sampler["optuna_sampler"], sampler["optuna"]) == ("grid", "RandomSampler",
                                                                               optuna.__version__)

    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    runs = _runs_by_trial(campaign)
    for trial in (mid, bad):
        [run] = runs[trial.number]
        # stored as an outcome, not as a failure, and with no made-up tokens-to-target
        assert run.data.tags[TAG_STATUS] == "not_converged" and run.info.status == "FINISHED"
        assert "tokens_to_target" not in run.data.metrics
        # the objective is censored at the budget by the final distance to the target
        # (oracle: the last eval point as MLflow recorded it)
        last = max(client.get_metric_history(run.info.run_id, "eval_excess_loss"), key=lambda m: m.step)
        assert last.step >= 40_960
        assert trial.value == 2 * 40_960 * (1 + (last.value - 0.3))
    [good_run] = runs[good.number]
    assert client.get_metric_history(good_run.info.run_id, "tokens_to_target")[0].value == good.value


def test_pruning_stops_a_hopeless_trial_before_its_budget(tmp_path):
    campaign = _campaign(tmp_path, 61_440, {"lr": {"choices": [1e-5]}}, sampler={"kind": "grid"}, trials=1, seeds=2)
    [summary] = tune_campaign(campaign, select_cells(campaign, None, [16]), workers=1)
    assert (summary.pruned, summary.failed, summary.best_trial) == (1, 0, None)
    [trial] = _study(campaign).trials
    assert trial.state is TrialState.PRUNED
    assert max(trial.intermediate_values) < 61_440 and len(trial.intermediate_values) < 61_440 // 4096

    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    [runs] = _runs_by_trial(campaign).values()
    first, second = sorted(runs, key=lambda r: int(r.data.tags["rcpforge.seed"]))
    for run in (first, second):  # pruned is not a failure
        assert run.data.tags[TAG_STATUS] == "pruned" and run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(first.info.run_id, "eval_excess_loss")]
    assert max(steps) == max(trial.intermediate_values) < 61_440
    # the trial's second seed is not trained once the first is pruned
    assert client.get_metric_history(second.info.run_id, "eval_excess_loss") == []

    # it was truly hopeless: trained to the full budget, the same run does not converge
    spec = RunSpec.model_validate_json(first.data.tags["rcpforge.spec"])

    class Quiet:
        output_dir = tmp_path / "oracle"

        def eval_point(self, point) -> None:
            pass

    assert get_trainer("tinylm").train(spec, Quiet()).status.value == "not_converged"


def test_a_killed_tune_loses_only_the_trial_in_flight_and_resumes(tmp_path):
    campaign = _campaign(tmp_path, 120_000, {"lr": {"low": 0.003, "high": 0.03, "log": True}}, trials=3)
    path = tmp_path / "campaign.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rcpforge.orchestrator.cli", "tune", str(path), "--batch-size", "16", "--workers", "1"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    states: list = []
    while time.monotonic() < deadline:
        states = _trial_states(tmp_path / "rcpforge-optuna.db")
        if "COMPLETE" in {s for s, _ in states} and ("RUNNING", True) in states:
            break
        time.sleep(0.2)
    else:
        proc.kill()
        raise AssertionError(f"tuning never reached a mid-trial state: {states}")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = {t.number: t.value for t in _study(campaign).trials if t.state is TrialState.COMPLETE}
    killed = [t.number for t in _study(campaign).trials if t.state is TrialState.RUNNING]
    assert len(killed) == 1

    resumed = run_cli("tune", str(path), "--batch-size", "16", "--workers", "1")
    assert resumed.returncode == 0, resumed.stderr
    study = _study(campaign)
    by_state = {s: [t for t in study.trials if t.state is s] for s in TrialState}
    assert len(by_state[TrialState.COMPLETE]) + len(by_state[TrialState.PRUNED]) == 3
    assert [t.number for t in by_state[TrialState.FAIL]] == killed and not by_state[TrialState.RUNNING]
    assert {t.number: t.value for t in by_state[TrialState.COMPLETE] if t.number in before} == before
    runs = _runs_by_trial(campaign)
    assert [r.data.tags[TAG_STATUS] for r in runs[killed[0]]] == ["failed"]
    assert all(r.data.tags[TAG_ROLE] == "tune" for rs in runs.values() for r in rs)
    assert len(runs) == 4  # three finished trials and the one that was killed, each once


def test_a_trainer_that_always_fails_stops_the_cell_and_says_why(tmp_path):
    # A corpus that is not there fails every run at train time (a target metric the tiny
    # LM never reports, this test's first way, is now refused when the campaign loads).
    data = tiny_campaign(recipes=["bf16"], target={"metric": "eval_loss", "mode": "min", "value": 0.1},
                         tune={"space": {"lr": {"low": 0.001, "high": 0.1, "log": True}}, "trials": 10})
    data["trainer"] = dict(data["trainer"], data={"source": "text", "path": "no-such-corpus.txt"})
    path = write_campaign(tmp_path, data)
    result = run_cli("tune", str(path), "--batch-size", "16", "--workers", "1")
    assert result.returncode == EXIT_NO_OUTCOME  # no trial has an outcome
    assert "3 trials failed" in result.stderr and "no-such-corpus.txt" in result.stderr
    campaign = load_campaign(path)
    study = _study(campaign)
    assert [t.state for t in study.trials] == [TrialState.FAIL] * 3  # stopped after 3 in a row, not 10
    runs = _runs_by_trial(campaign)
    assert all(r.data.tags[TAG_STATUS] == "failed" for rs in runs.values() for r in rs)
