"""Faults on a real Ray instance: a worker SIGKILLed mid-run is re-run by Ray and the run
is recorded once; the orchestrator SIGKILLed mid-campaign and started again finishes the
campaign with one outcome per run key and no eval point written twice."""

from __future__ import annotations

import os
import signal
from collections import Counter

from sweeps.spec import load_campaign
from tests.cluster.helpers import (
    assert_clean_ledger, mid_run, run_folder, runs_of, slow_campaign, start_cli, uninterrupted_tokens, wait_for,
)
from tests.conftest import run_cli
from tests.helpers.campaigns import write_campaign
from trainers.contract.schema import TAG_ATTEMPTS, TAG_RUN_KEY, TAG_STATUS


def test_a_worker_sigkilled_mid_run_is_retried_and_recorded_once(ray_address, tmp_path):
    backend = {"kind": "ray", "address": ray_address, "max_retries": 2, "max_attempts": 1}
    path = write_campaign(tmp_path, slow_campaign(backend, sleep=0.4, checkpoint_every=None))
    campaign = load_campaign(path)
    runs_of(campaign)  # the schema exists before two processes open the store
    proc = start_cli("run", str(path))
    victim = wait_for(lambda: mid_run(campaign, min_points=3), "a run with 3 eval points logged", proc)
    pid_file = run_folder(campaign, victim) / "pid"
    killed = int(pid_file.read_text())
    os.kill(killed, signal.SIGKILL)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out

    tokens = assert_clean_ledger(campaign, n_keys=2)
    _, runs = runs_of(campaign)
    run = next(r for r in runs if r.info.run_id == victim.info.run_id)
    assert int(pid_file.read_text()) != killed  # a fresh worker trained it again
    # Ray's retry is the same attempt (max_attempts 1 would have left it failed otherwise)
    assert run.data.tags[TAG_ATTEMPTS] == "1"
    key = run.data.tags[TAG_RUN_KEY]
    assert tokens[key] == uninterrupted_tokens(campaign, run, tmp_path / "oracle")


def test_orchestrator_sigkilled_mid_campaign_then_restarted(ray_address, tmp_path):
    backend = {"kind": "ray", "address": ray_address}
    path = write_campaign(tmp_path, slow_campaign(backend, sleep=0.3, seeds=2, checkpoint_every=None))
    campaign = load_campaign(path)
    runs_of(campaign)  # the schema exists before two processes open the store
    proc = start_cli("run", str(path))

    def mid_campaign():
        _, runs = runs_of(campaign)
        statuses = Counter(r.data.tags.get(TAG_STATUS) for r in runs)
        return statuses["converged"] >= 1 and statuses["running"] >= 1

    wait_for(mid_campaign, "one run done and one running", proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)

    again = run_cli("run", str(path))
    assert again.returncode == 0, again.stdout + again.stderr
    assert_clean_ledger(campaign, n_keys=4)


def test_ctrl_c_cancels_the_tasks_and_a_rerun_finishes_cleanly(ray_address, tmp_path):
    backend = {"kind": "ray", "address": ray_address}
    path = write_campaign(tmp_path, slow_campaign(backend, sleep=0.4, checkpoint_every=None))
    campaign = load_campaign(path)
    runs_of(campaign)
    proc = start_cli("run", str(path), interruptible=True)
    wait_for(lambda: mid_run(campaign, min_points=2), "a run with 2 eval points logged", proc)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "runs in flight were stopped" in out

    # a task left running would write the same points as the rerun: the ledger shows it
    again = run_cli("run", str(path))
    assert again.returncode == 0, again.stdout + again.stderr
    assert_clean_ledger(campaign, n_keys=2)
