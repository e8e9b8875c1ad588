"""The SQLite tracking store locked past MLflow's 20 s busy timeout mid-campaign: writes
are retried with backoff, and the campaign completes with nothing lost or duplicated."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter

from mlflow import MlflowClient

from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_RUN_KEY, TAG_STATUS
from tests.cluster.helpers import paced_campaign
from tests.conftest import ROOT
from tests.helpers.campaigns import write_campaign
from tests.helpers.store import run_statuses


def test_campaign_survives_a_locked_store(tmp_path):
    # the instant paced program, 2 s a run: the lock strikes runs in flight
    data = paced_campaign({"kind": "local", "workers": 2}, evals=10, sleep=0.2, seeds=2)
    path = write_campaign(tmp_path, data)
    campaign = load_campaign(path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rcpforge.orchestrator.cli", "run", str(path)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    db = tmp_path / "rcpforge-mlflow.db"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run_statuses(db)["running"] == 0:
        time.sleep(0.2)
    lock = sqlite3.connect(db, timeout=60)
    lock.execute("BEGIN EXCLUSIVE")
    time.sleep(32)  # well past the store's 20 s busy timeout: writers get "database is locked"
    lock.rollback()
    lock.close()
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "tracking store unavailable" in err and "retrying" in err  # the outage was felt and survived
    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name(campaign.name).experiment_id])
    keys = Counter(r.data.tags[TAG_RUN_KEY] for r in runs)
    assert len(keys) == 4 and set(keys.values()) == {1}
    assert {r.data.tags[TAG_STATUS] for r in runs} == {"converged"}
    for run in runs:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "eval_accuracy")]
        assert len(steps) == len(set(steps)) and steps
