"""Faults of a whole campaign, the same tests on every backend (local worker processes, a
real Ray instance, the real dev Slurm): the orchestrator SIGKILLed mid-campaign and
started again, and Ctrl-C, each end with one outcome per run key and no eval point
written twice. A backend added later gets them by adding one entry to FAULT_BACKENDS.
The runs are an instant command trainer (evals a fraction of a second apart, no
training): these are tests of orchestration, not of training.

Faults that only one backend has (Slurm's preemption and time limit, Ray's task retry)
stay in tests/cluster/test_<backend>_faults.py."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from rcpforge.orchestrator.backends import ledger_and_states, live_of
from rcpforge.orchestrator.tracking import Tracking
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_ATTEMPTS, TAG_STATUS
from tests.cluster.helpers import assert_clean_ledger, mid_run, paced_campaign, runs_of, start_cli, wait_for
from tests.conftest import run_cli
from tests.helpers.backend_services import with_service
from tests.helpers.campaigns import write_campaign

FAULT_BACKENDS = {
    "local": {"kind": "local", "workers": 2},
    "ray": {"kind": "ray"},
    "slurm": {"kind": "slurm", "time_min": 10, "array_parallelism": 2},
}
METRIC = "eval_accuracy"  # the paced program's


@pytest.fixture(params=sorted(FAULT_BACKENDS))
def fault_backend(request) -> dict:
    return with_service(request, FAULT_BACKENDS[request.param])


def test_orchestrator_sigkilled_mid_campaign_then_restarted(fault_backend, tmp_path):
    on_slurm = fault_backend["kind"] == "slurm"
    path = write_campaign(tmp_path, paced_campaign(fault_backend, seeds=2))
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
    assert_clean_ledger(campaign, n_keys=4, metric=METRIC)
    if on_slurm:
        # the jobs the killed orchestrator left on Slurm were followed, not submitted again
        _, runs = runs_of(campaign)
        assert all(r.data.tags[TAG_ATTEMPTS] == "1" for r in runs)


def test_ctrl_c_cancels_the_runs_in_flight_and_a_rerun_finishes_cleanly(fault_backend, tmp_path):
    # no run may finish before the Ctrl-C is handled, however slow the machine: the last
    # eval of each waits for `release`, made before the rerun
    release = tmp_path / "release"
    path = write_campaign(tmp_path, paced_campaign(fault_backend, hold=release))
    campaign = load_campaign(path)
    runs_of(campaign)
    proc = start_cli("run", str(path), interruptible=True)
    wait_for(lambda: mid_run(campaign, min_points=2, metric=METRIC), "a run with 2 eval points logged", proc)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "runs in flight were stopped" in out
    # none is left `running` with nothing behind it: each stopped run is pending again
    _, stopped = runs_of(campaign)
    assert stopped and all(r.data.tags[TAG_STATUS] != "running" and r.info.status != "RUNNING" for r in stopped)
    pending = [r for r in stopped if r.data.tags[TAG_STATUS] == "pending"]
    assert pending and all(r.info.status == "SCHEDULED" for r in pending)
    if fault_backend["kind"] == "slurm":
        # once their jobs are ended (CANCELLED), the stopped runs still count pending, not failed
        ledger = Tracking(campaign.tracking_uri).campaign_ledger
        wait_for(lambda: not live_of(ledger_and_states(lambda: ledger(campaign.name))[1]), "the cancelled jobs to end")
    assert "pending and none running" in run_cli("status", str(path)).stdout

    # a run left running would write the same points as the rerun: the ledger shows it
    release.write_text("go")
    again = run_cli("run", str(path))
    assert again.returncode == 0, again.stdout + again.stderr
    assert_clean_ledger(campaign, n_keys=2, metric=METRIC)
