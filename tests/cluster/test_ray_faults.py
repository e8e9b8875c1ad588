"""Faults only Ray has, on a real Ray instance: a worker SIGKILLed mid-run is re-run by
Ray (its task retry) and the run is recorded once. The faults every backend shares (the
orchestrator SIGKILLed, Ctrl-C) are in tests/conformance/test_backend_faults.py."""

from __future__ import annotations

import os
import signal

from rcpforge.sweeps.spec import load_campaign
from tests.cluster.helpers import (
    assert_clean_ledger, mid_run, run_folder, runs_of, slow_campaign, start_cli, uninterrupted_tokens, wait_for,
)
from tests.helpers.campaigns import write_campaign
from rcpforge.trainers.contract.schema import TAG_ATTEMPTS, TAG_RUN_KEY


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
