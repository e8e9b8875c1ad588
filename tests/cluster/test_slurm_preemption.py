"""Real preemption on the one-node dev Slurm (`cluster/dev/slurm.sh start` writes its
preemptible partitions): a campaign's job runs on a partition of PriorityTier 1, and a
job the test submits to `urgent` (PriorityTier 2, every CPU of the node) takes the node.

- `preemptible-cancel` (PreemptMode=CANCEL): Slurm cancels the job, which reads
  PREEMPTED for good (squeue, then sacct); the attempt has ended and the run is submitted
  again within `max_attempts`.
- `preemptible-requeue` (PreemptMode=REQUEUE): Slurm requeues the job itself and runs it
  again; rcpforge keeps following it and never submits the run twice.

Both campaigns run at once, preempted by the same urgent job. Each campaign's run of
batch size 16 (its command trainer, tests/helpers/paced_program.py) holds its last eval
until the test has seen what it waits for, so it is surely running when preempted and
ends soon after; the run of batch size 64 (a campaign has two) is let through at once.

It takes 1.5-2 minutes on the 2-CPU dev machine (a worker's start, Slurm's preemption
and its requeue delay are each many seconds): it is opt-in (RCPFORGE_SLOW_SLURM=1, `make
test-slow`). Its logic runs in every CI run, without a cluster, in test_slurm_states.py."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from rcpforge.cluster.slurm_gang import START_MARK
from rcpforge.cluster.slurm_states import ENDED, job_states
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_ATTEMPTS, TAG_BACKEND_JOB, TAG_BATCH_SIZE, TAG_STATUS
from tests.cluster.helpers import mid_run, paced_campaign, runs_of, start_cli, wait_for
from tests.conftest import missing_service
from tests.helpers.campaigns import write_campaign

pytestmark = pytest.mark.skipif(
    os.environ.get("RCPFORGE_SLOW_SLURM") != "1",
    reason="1.5-2 minutes (real preemptions and requeues); set RCPFORGE_SLOW_SLURM=1 to run it",
)

PARTITIONS = {"cancel": "preemptible-cancel", "requeue": "preemptible-requeue"}
HELD = "16"  # the batch size whose run is preempted


@dataclass
class _Case:
    folder: Path
    campaign: object
    proc: subprocess.Popen
    hold: Path
    first_job: str = ""
    out: str = ""


def _start(folder: Path, partition: str) -> _Case:
    backend = {"kind": "slurm", "partition": partition, "time_min": 10, "max_attempts": 2}
    data = paced_campaign(backend, evals=2, sleep=0.1)
    data["trainer"]["argv"].append(str(folder / "release-{batch_size}"))
    for bs in data["batch_sizes"]:
        if str(bs) != HELD:
            (folder / f"release-{bs}").touch()
    path = write_campaign(folder, data)
    campaign = load_campaign(path)
    runs_of(campaign)  # the schema exists before the CLI opens the store
    return _Case(folder, campaign, start_cli("run", str(path)), folder / f"release-{HELD}")


def _held(case: _Case):
    """The MLflow run of batch size HELD, or None before it is made."""
    _, runs = runs_of(case.campaign)
    return next((r for r in runs if r.data.tags.get(TAG_BATCH_SIZE) == HELD), None)


def _job(case: _Case) -> str:
    run = _held(case)
    return run.data.tags.get(TAG_BACKEND_JOB, "").removeprefix("slurm:") if run else ""


def _attempts(case: _Case) -> str:
    run = _held(case)
    return run.data.tags.get(TAG_ATTEMPTS, "") if run else ""


def _running(case: _Case) -> bool:
    run = mid_run(case.campaign, min_points=1, metric="eval_accuracy")
    return run is not None and run.data.tags.get(TAG_BATCH_SIZE) == HELD


def _others_done(case: _Case) -> bool:
    """The runs let through have converged and their jobs have ended (the preemption is
    for the held run alone; a job still exiting would be preempted first, alone)."""
    _, runs = runs_of(case.campaign)
    others = [r for r in runs if r.data.tags.get(TAG_BATCH_SIZE) != HELD]
    if not others or any(r.data.tags.get(TAG_STATUS) != "converged" for r in others):
        return False
    jobs = [r.data.tags[TAG_BACKEND_JOB].removeprefix("slurm:") for r in others]
    return all(job_states(jobs).get(job) in ENDED for job in jobs)


def _starts(case: _Case, job: str) -> list[str]:
    """SLURM_RESTART_COUNT at each start of Slurm job `job`, from its log."""
    marks = []
    for log in case.folder.rglob(f"{job}_0_log.out"):
        marks += [line.split()[-1] for line in log.read_text(errors="replace").splitlines() if START_MARK in line]
    return marks


def _node_cpus() -> int:
    out = subprocess.run(["sinfo", "-h", "-p", "urgent", "-o", "%c"], capture_output=True, text=True, timeout=30)
    return int(out.stdout.split()[0])


@pytest.fixture(scope="module")
def preempted(slurm, tmp_path_factory):
    names = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30).stdout.split()
    if not {"urgent", *PARTITIONS.values()} <= {n.rstrip("*") for n in names}:
        missing_service("the dev Slurm has no preemptible partitions: rerun `make slurm-up` (cluster/dev/slurm.sh "
                        "start reconfigures a running controller)")
    cases = {mode: _start(tmp_path_factory.mktemp(mode), partition) for mode, partition in PARTITIONS.items()}
    urgent = ""
    try:
        for case in cases.values():
            wait_for(lambda c=case: _running(c), "the held run is running", case.proc)
            wait_for(lambda c=case: _others_done(c), "the other run converged", case.proc)
            case.first_job = _job(case)
        # Every CPU of the node: both jobs (one CPU each) must give way.
        urgent = subprocess.run(
            ["sbatch", "--parsable", "-p", "urgent", "-c", str(_node_cpus()), "-t", "2",
             "-o", str(cases["cancel"].folder / "urgent.out"), "--wrap", "true"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip().split(";")[0]
        wait_for(lambda: _attempts(cases["cancel"]) == "2", "the cancelled run's second attempt",
                 cases["cancel"].proc)
        requeued = cases["requeue"]
        wait_for(lambda: "1" in _starts(requeued, requeued.first_job), "the requeued job's second start",
                 cases["requeue"].proc)
        for case in cases.values():
            case.hold.touch()
        for case in cases.values():
            case.out, _ = case.proc.communicate(timeout=180)
        yield cases, urgent
    finally:
        for case in cases.values():
            if case.proc.poll() is None:
                case.proc.kill()
                case.proc.communicate()
        jobs = [j for c in cases.values() for j in (c.first_job, _job(c)) if j] + ([urgent] if urgent else [])
        subprocess.run(["scancel", *jobs], capture_output=True, timeout=30)


def test_a_job_preempted_for_good_is_resubmitted_within_max_attempts(preempted):
    cases, urgent = preempted
    case = cases["cancel"]
    assert case.proc.returncode == 0, case.out
    _, runs = runs_of(case.campaign)
    assert {r.data.tags[TAG_STATUS] for r in runs} == {"converged"} and len(runs) == 2
    assert _attempts(case) == "2"
    second = _job(case)
    assert second and second != case.first_job
    # The first job was preempted, not requeued: PREEMPTED for good, and it started once.
    assert job_states([case.first_job])[case.first_job] == "PREEMPTED"
    assert _starts(case, case.first_job) == ["0"] and _starts(case, second) == ["0"]
    assert job_states([urgent])[urgent] == "COMPLETED"


def test_a_job_slurm_requeues_is_never_submitted_twice(preempted):
    cases, _ = preempted
    case = cases["requeue"]
    assert case.proc.returncode == 0, case.out
    _, runs = runs_of(case.campaign)
    assert {r.data.tags[TAG_STATUS] for r in runs} == {"converged"} and len(runs) == 2
    assert _attempts(case) == "1"
    # One job, started twice: Slurm's own requeue, no second submission.
    assert _job(case) == case.first_job
    assert _starts(case, case.first_job) == ["0", "1"]
    assert job_states([case.first_job])[case.first_job] == "COMPLETED"
