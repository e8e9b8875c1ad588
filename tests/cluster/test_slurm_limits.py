"""Campaigns on a Slurm that says no (the limits dev cluster, `cluster/dev/slurm.sh
start-limits`): MaxArraySize=6 and a QOS of 8 submitted jobs per user, enforced by the
real controller; a controller that times out (a fake `sbatch` before the real one on
PATH, the only thing faked: it answers as a busy slurmctld does); a QOS that does not
exist. The runs are an instant command program: these are tests of orchestration."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections import Counter

import yaml

from rcpforge.orchestrator.tracking import Tracking
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_ATTEMPTS, TAG_BACKEND_JOB, TAG_STATUS
from tests.cluster.helpers import assert_clean_ledger, paced_campaign, runs_of, start_cli, wait_for
from tests.conftest import run_cli
from tests.helpers.campaigns import write_campaign
from tests.helpers.queue_peak import QueuePeak
from tests.helpers.slurm_cluster import (
    LIMITS_MAX_SUBMIT,
    LIMITS_QOS,
    limits_max_array,
    restart_limits_controller,
    set_qos,
)

METRIC = "eval_accuracy"  # the paced program's


def limited_campaign(tmp_path, seeds: int, evals: int = 2, **backend):
    """2 batch sizes x `seeds` instant runs (`evals` evals 0.25 s apart, or 2 at once) on the limits cluster."""
    data = paced_campaign({"kind": "slurm", "time_min": 5, **backend}, evals=evals, sleep=0.25 if evals > 2 else 0.05,
                          seeds=seeds)
    data["name"] = f"limits-{uuid.uuid4().hex[:8]}"  # its jobs' name is its own: sacct finds only them
    path = write_campaign(tmp_path, data)
    return path, load_campaign(path)


def array_sizes(runs) -> Counter:
    """Tasks per job array, from the job ids the runs were filed under (`slurm:<array>_<task>`)."""
    return Counter(r.data.tags[TAG_BACKEND_JOB].removeprefix("slurm:").split("_")[0] for r in runs)


def test_a_campaign_larger_than_the_limits_runs_within_them_to_the_end(limits_slurm, tmp_path):
    path, campaign = limited_campaign(tmp_path, seeds=4)  # 8 runs, 7 queued at most (8 allowed, less the margin)
    with QueuePeak() as queue:
        proc = run_cli("run", str(path), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Slurm did not take" not in proc.stdout  # kept within the limits, never refused
    assert_clean_ledger(campaign, n_keys=8, metric=METRIC)
    _, runs = runs_of(campaign)
    assert all(r.data.tags[TAG_ATTEMPTS] == "1" for r in runs)  # none refused, none run twice
    assert 0 < queue.peak <= LIMITS_MAX_SUBMIT, queue.peak
    sizes = array_sizes(runs)
    assert max(sizes.values()) <= 5 and sum(sizes.values()) == 8, sizes  # MaxArraySize=6
    status = run_cli("status", str(path))
    assert "MaxArraySize = 6" in status.stdout and f"MaxSubmitJobsPerUser = {LIMITS_MAX_SUBMIT}" in status.stdout
    planned = json.loads(run_cli("run", str(path), "--dry-run", "--json").stdout)
    assert "at most 7 jobs queued and running (QOS rcpf-limited MaxSubmitJobsPerUser = 8, less the 10% " \
           "queue_margin" in " ".join(planned["slurm_limits"])


def test_arrays_refused_below_the_max_array_size_the_controller_reports_go_again_smaller(limits_slurm, tmp_path):
    # slurm.conf says 11 and `scontrol show config` reports it, but slurmctld, not restarted,
    # still refuses arrays past its 6: an array of 8 is refused, then sent as two of 4
    set_qos(MaxSubmitJobsPerUser=15)  # the queue holds all 8 runs at once
    with limits_max_array(11, restart=False):
        path, campaign = limited_campaign(tmp_path, seeds=4)
        proc = run_cli("run", str(path), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Slurm refused an array of 8 runs (sbatch: error: Batch job submission failed: Invalid job array " \
           "specification) though it reports MaxArraySize = 11" in proc.stdout, proc.stdout
    assert "sending arrays of at most 4 runs" in proc.stdout
    assert_clean_ledger(campaign, n_keys=8, metric=METRIC)
    _, runs = runs_of(campaign)
    assert all(r.data.tags[TAG_ATTEMPTS] == "1" for r in runs)
    assert sorted(array_sizes(runs).values()) == [4, 4]


def test_a_limit_lifted_mid_campaign_is_used(limits_slurm, tmp_path, monkeypatch):
    monkeypatch.setenv("RCPF_SLURM_LIMITS_REFRESH_S", "2")  # the campaign reads the limits every 2 s
    set_qos(MaxSubmitJobsPerUser=3)  # 2 jobs at once, the 10% margin off
    path, campaign = limited_campaign(tmp_path, seeds=4, evals=6)  # 8 runs of about 2 s: 6 left once 2 converged
    runs_of(campaign)  # the store exists before two processes open it
    with QueuePeak() as queue:
        proc = start_cli("run", str(path))

        def converged(n):
            _, runs = runs_of(campaign)
            return sum(r.data.tags.get(TAG_STATUS) == "converged" for r in runs) >= n

        wait_for(lambda: converged(2), "2 runs converged", proc)
        before = queue.peak
        set_qos(MaxSubmitJobsPerUser=LIMITS_MAX_SUBMIT)
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert before <= 3 and queue.peak > 3, (before, queue.peak)  # held by the limit, then used the room
    assert_clean_ledger(campaign, n_keys=8, metric=METRIC)


FAKE_SBATCH = """#!/bin/bash
# A busy controller: the calls named in $RCPF_FAKE_FAIL time out; those in $RCPF_FAKE_LOST
# reach slurmctld, which takes the job, but the answer is lost on the way back.
n=$(( $(cat "{count}" 2>/dev/null || echo 0) + 1 )); echo $n > "{count}"
for i in $RCPF_FAKE_FAIL; do
  if [ "$i" = "$n" ]; then
    echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2; exit 1
  fi
done
for i in $RCPF_FAKE_LOST; do
  if [ "$i" = "$n" ]; then
    "{real}" "$@" >/dev/null
    echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2; exit 1
  fi
done
exec "{real}" "$@"
"""


def test_a_controller_that_times_out_or_loses_an_answer_never_gets_a_run_twice(limits_slurm, tmp_path,
                                                                                 monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sbatch"
    fake.write_text(FAKE_SBATCH.format(count=tmp_path / "sbatch_calls", real=shutil.which("sbatch")))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    # calls 1 and 3 time out; call 4 is taken by the controller and its answer lost
    monkeypatch.setenv("RCPF_FAKE_FAIL", "1 3")
    monkeypatch.setenv("RCPF_FAKE_LOST", "4")
    path, campaign = limited_campaign(tmp_path / "c", seeds=3, max_queued=2)  # 6 runs, arrays of <= 2: 5 calls at least
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    proc = run_cli("run", str(path), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Slurm did not take" in proc.stdout and "Socket timed out" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert_clean_ledger(campaign, n_keys=6, metric=METRIC)
    _, runs = runs_of(campaign)
    assert all(r.data.tags[TAG_ATTEMPTS] == "1" for r in runs)
    # every run's job is its own, and the controller got no array twice: its jobs are the runs'
    # (the accounting database hears of the last jobs a moment after they ended)
    wanted, deadline = set(array_sizes(runs)), time.monotonic() + 60
    while True:
        listed = subprocess.run(["sacct", "-n", "-X", "-P", "-S", since, "--name", f"rcpforge-{campaign.name}",
                                 "-o", "JobID"], capture_output=True, text=True, timeout=60, check=True)
        arrays = {line.split("_")[0] for line in listed.stdout.split()}
        if arrays >= wanted or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert arrays == wanted, (arrays, wanted)
    assert int((tmp_path / "sbatch_calls").read_text()) >= 5  # the refused tries were made


def test_a_qos_the_cluster_does_not_have_is_one_line_and_every_run_stays_pending(limits_slurm, tmp_path):
    path, campaign = limited_campaign(tmp_path, seeds=2, qos="nosuch")
    proc = run_cli("run", str(path), timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: backend.qos ('nosuch'): Slurm refused the jobs"), errors
    assert "Traceback" not in proc.stderr
    _, runs = runs_of(campaign)
    assert runs and all(r.data.tags[TAG_STATUS] == "pending" for r in runs)
    # nothing counted: fixed, the campaign launches every run as a first attempt
    data = yaml.safe_load(path.read_text())
    del data["backend"]["qos"]
    fixed = write_campaign(tmp_path, data)  # the same campaign, its QOS fixed
    again = run_cli("run", str(fixed), timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    fixed_campaign = load_campaign(fixed)
    ledger = Tracking(fixed_campaign.tracking_uri).campaign_ledger(fixed_campaign.name)
    assert len(ledger) == 4 and all(e.status.value == "converged" and e.charged == 1 for e in ledger.values())


def test_status_says_why_a_run_waits_when_a_qos_limit_holds_it(limits_slurm, tmp_path):
    # one running job per user; the user's other work (a sleeping job) holds it
    set_qos(MaxJobsPerUser=1)
    blocker = subprocess.run(["sbatch", "--parsable", f"--qos={LIMITS_QOS}", "--wrap", "sleep 300", "-o", "/dev/null"],
                             capture_output=True, text=True, timeout=60, check=True).stdout.strip().split(";")[0]
    path, campaign = limited_campaign(tmp_path, seeds=1)  # 2 runs: the window (1 job) sends one
    try:
        wait_for(lambda: _state(blocker) == "RUNNING", "the blocking job to run")
        proc = run_cli("run", str(path), "--detach", timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "1 more runs wait for room under the cluster's limits" in proc.stdout
        _, runs = runs_of(campaign)
        job = next(r.data.tags[TAG_BACKEND_JOB].removeprefix("slurm:") for r in runs if TAG_BACKEND_JOB in r.data.tags)
        wait_for(lambda: _reason(job) == "QOSMaxJobsPerUserLimit", "Slurm to give the QOS limit as the reason")
        status = run_cli("status", str(path))
        assert "Slurm keeps 1 runs pending, by its reason: 1 QOSMaxJobsPerUserLimit" in status.stdout, status.stdout
        shown = run_cli("status", str(path), "--json")
        cells = json.loads(shown.stdout)["cells"]
        assert sum(c["slurm_pending_reasons"].get("QOSMaxJobsPerUserLimit", 0) for c in cells) == 1
    finally:
        subprocess.run(["scancel", blocker], capture_output=True, timeout=60)
        subprocess.run(["scancel", "--name", f"rcpforge-{campaign.name}"], capture_output=True, timeout=60)


def _state(job: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True,
                          timeout=30).stdout.strip()


def _reason(job: str) -> str:
    return subprocess.run(["squeue", "-h", "-r", "-j", job, "-o", "%r"], capture_output=True, text=True,
                          timeout=30).stdout.strip()


def test_a_controller_restarted_during_a_submission_wave_does_not_stop_the_campaign(limits_slurm, tmp_path):
    path, campaign = limited_campaign(tmp_path, seeds=3, max_queued=2)  # 6 runs, in waves of 2
    runs_of(campaign)  # the store exists before two processes open it
    proc = start_cli("run", str(path))

    def some_converged():
        _, runs = runs_of(campaign)
        return sum(r.data.tags.get(TAG_STATUS) == "converged" for r in runs) >= 2

    wait_for(some_converged, "two runs converged", proc)
    restart_limits_controller(down_s=4)  # sbatch and squeue get no answer meanwhile
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    assert_clean_ledger(campaign, n_keys=6, metric=METRIC)
    _, runs = runs_of(campaign)
    assert all(r.data.tags[TAG_ATTEMPTS] == "1" for r in runs)
