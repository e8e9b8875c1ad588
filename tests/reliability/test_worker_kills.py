"""Seeded SIGKILLs of worker processes mid-campaign: the campaign still completes, every
run key has exactly one MLflow run and one outcome, no eval point is written twice, and
the results equal those of an undisturbed campaign."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from mlflow import MlflowClient

from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_RUN_KEY, TAG_STATUS
from tests.conftest import ROOT
from tests.helpers.campaigns import tiny_campaign, write_campaign


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            pass
    return kids


def _worker_pids(orchestrator: int) -> list[int]:
    # the pool's workers are the children of the orchestrator's fork server (the
    # resource tracker is a child too: spare it)
    out = []
    for pid in _children(orchestrator):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"multiprocessing.forkserver" in cmd:
            out += _children(pid)
    return out


def _tokens_by_key(campaign) -> dict[str, float]:
    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    exp = client.get_experiment_by_name(campaign.name)
    runs = client.search_runs([exp.experiment_id], max_results=10_000)
    return {r.data.tags[TAG_RUN_KEY]: r.data.metrics.get("tokens_to_target") for r in runs}


def test_seeded_worker_kills_lose_and_double_count_nothing(tmp_path, finished):
    rng = random.Random(20261129)
    data = tiny_campaign(recipes=["bf16"])
    data["backend"] = {"kind": "local", "workers": 2, "max_attempts": 6}
    path = write_campaign(tmp_path, data)
    campaign = load_campaign(path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rcpforge.orchestrator.cli", "run", str(path)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    kills = 0
    while kills < 3 and proc.poll() is None:
        time.sleep(rng.uniform(1.5, 4.0))
        workers = _worker_pids(proc.pid)
        if workers:
            os.kill(rng.choice(sorted(workers)), signal.SIGKILL)
            kills += 1
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert kills >= 1, "the campaign ended before any worker could be killed"
    # every kill of a busy worker fails its run once; a kill that lands on an idle worker
    # (between two runs) fails nothing
    assert 1 <= out.count("worker process died (killed by SIGKILL)") <= kills

    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    exp = client.get_experiment_by_name(campaign.name)
    runs = client.search_runs([exp.experiment_id], max_results=10_000)
    keys = Counter(r.data.tags[TAG_RUN_KEY] for r in runs)
    assert len(keys) == 6 and set(keys.values()) == {1}
    assert {r.data.tags[TAG_STATUS] for r in runs} == {"converged"}
    for run in runs:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "eval_excess_loss")]
        assert len(steps) == len(set(steps))
    # same run keys as the undisturbed tiny campaign's bf16 runs, and the same results
    _, undisturbed_campaign, _, _ = finished
    undisturbed = _tokens_by_key(undisturbed_campaign)
    assert _tokens_by_key(campaign) == {k: undisturbed[k] for k in keys}
