"""Kill the orchestrator mid-campaign, start it again: every run key ends with exactly one
MLflow run and one outcome, and no eval point is written twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

from mlflow import MlflowClient

from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_BATCH_SIZE, TAG_RECIPE, TAG_RUN_KEY, TAG_SEED, TAG_STATUS
from tests.cluster.helpers import paced_campaign, runs_of
from tests.conftest import ROOT, run_cli
from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.store import run_statuses


def test_sigkill_of_the_orchestrator_then_resume(tmp_path):
    # 4 runs of the instant paced program (about 2 s each), 2 workers: 2 done, 2 mid-flight
    data = paced_campaign({"kind": "local", "workers": 2}, evals=6, sleep=0.3, seeds=2)
    path = write_campaign(tmp_path, data)
    campaign = load_campaign(path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rcpforge.orchestrator.cli", "run", str(path)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    # wait until some runs are done and others are mid-flight, then kill without warning
    deadline = time.monotonic() + 300
    db = tmp_path / "rcpforge-mlflow.db"
    while time.monotonic() < deadline:
        statuses = run_statuses(db)
        if statuses["converged"] >= 2 and statuses["running"] >= 1:
            break
        time.sleep(0.2)
    else:
        proc.kill()
        raise AssertionError(f"campaign never reached a mid-flight state: {statuses}")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    _, runs = runs_of(campaign)
    done_before = {r.data.tags[TAG_RUN_KEY]: r.info.run_id for r in runs if r.data.tags[TAG_STATUS] == "converged"}

    resumed = run_cli("run", str(path))
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(done_before)} have an outcome" in resumed.stdout

    client, runs = runs_of(campaign)
    keys = Counter(r.data.tags[TAG_RUN_KEY] for r in runs)
    assert len(keys) == 4 and set(keys.values()) == {1}
    assert all(r.data.tags[TAG_STATUS] == "converged" for r in runs)
    for run in runs:
        key = run.data.tags[TAG_RUN_KEY]
        if key in done_before:
            assert run.info.run_id == done_before[key]
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "eval_accuracy")]
        assert len(steps) == len(set(steps)), f"duplicated eval points in {run.info.run_name}"
        assert len(client.get_metric_history(run.info.run_id, "tokens_to_target")) == 1


class _GoneAfterCreate:
    """A store that answers create_run and then goes away: the orchestrator stops with
    the run made and its hyperparameters not yet logged."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        return getattr(self._client, name)

    def log_batch(self, *args, **kwargs):
        raise ConnectionError("connection refused")


def test_a_run_made_just_before_the_store_went_away_gets_its_hyperparameters_on_resume(tmp_path):
    from rcpforge.orchestrator.campaign import run_campaign
    from rcpforge.orchestrator.tracking import Tracking, TrackingUnavailable, _RetryingClient
    from rcpforge.sweeps.expand import expand

    campaign = load_campaign(write_campaign(tmp_path, tiny_campaign(recipes=["bf16"], seeds=1)))
    tracking = Tracking(campaign.tracking_uri)
    tracking.client = _RetryingClient(_GoneAfterCreate(MlflowClient(tracking_uri=campaign.tracking_uri)),
                                      campaign.tracking_uri, retry_s=0.05, first_delay_s=0.001)
    exp = tracking.open_experiment(campaign.name, campaign.artifact_dir)
    stranded = expand(campaign)[0]
    try:
        tracking.create_run(exp, stranded)
        raise AssertionError("the store was gone: create_run should have given up")
    except TrackingUnavailable:
        pass
    client, runs = runs_of(campaign)
    assert len(runs) == 1 and runs[0].data.params == {}  # the state the outage left
    made = runs[0].info.run_id

    summary = run_campaign(campaign)
    assert summary.statuses["converged"] == 2
    client, runs = runs_of(campaign)
    by_key = {r.data.tags[TAG_RUN_KEY]: r for r in runs}
    assert len(runs) == 2 and by_key[stranded.run_key].info.run_id == made  # taken up, not made again
    for spec in expand(campaign):
        expected = {k: str(v) for k, v in spec.hparams.items()}
        expected.update({f"recipe.{k}": str(v) for k, v in spec.recipe_options.items()})
        expected.update({TAG_RECIPE: spec.recipe, TAG_BATCH_SIZE: str(spec.batch_size), TAG_SEED: str(spec.seed)})
        assert expected and by_key[spec.run_key].data.params == expected
