"""Gangs across nodes on the real two-node dev Slurm (`make slurm-two-node-up`; nodes n1
and n2 on this machine): one rank per node with one rendezvous, a rank killed on one node
ends the whole gang, and a preempted gang is requeued whole and resumes. Instant job
functions (`tests/helpers/backend_jobs.py`): these test the backend, not training."""

from __future__ import annotations

import subprocess

import pytest
from submitit.core.utils import DelayedSubmission, JobPaths

import rcpforge.cluster.slurm_backend as slurm_backend
from rcpforge.cluster.backend import Done, Job
from rcpforge.orchestrator.backends import make_backend
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.contract.gang import Gang
from tests.cluster.helpers import wait_for
from tests.helpers import backend_jobs
from tests.helpers.campaigns import tiny_campaign
from tests.helpers.processes import alive

ACROSS = Gang(nodes=2, processes_per_node=1)
# submitit counts a USR2 as a preemption only in the first min(80 %, limit - 10 min) of
# the job's time limit, and as a timeout after it (a requeue less, "timed-out" in the
# log): with 10 minutes or less every USR2 would be a timeout. 15: a USR2 within 5 minutes
# of the start takes submitit's preemption branch.
TIME_MIN = 15
MAX_REQUEUES = 3


@pytest.fixture
def backend(two_node_slurm, tmp_path):
    settings = {"kind": "slurm", "time_min": TIME_MIN, "max_requeues": MAX_REQUEUES}
    campaign = parse_campaign(tiny_campaign(backend=settings, launch={"nodes": 2}), tmp_path)
    assert campaign.gang == ACROSS
    made = make_backend(campaign)
    try:
        yield made
    finally:
        made.cancel()
        made.close()


def _done(backend, limit_s: float = 180) -> Done:
    done = wait_for(lambda: backend.wait(timeout=1.0), "the job's completion", limit_s=limit_s)
    assert len(done) == 1
    return done[0]


def test_a_gang_across_two_nodes_runs_one_rank_on_each_with_one_rendezvous(backend, tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    backend.submit(Job("across", backend_jobs.gang_env, (str(folder),), gang=ACROSS))
    done = _done(backend)
    assert done.error is None, done.error
    envs = backend_jobs.task_files(folder, 2)
    assert sorted(envs) == [0, 1]
    assert done.value == envs[0]
    assert [(envs[t]["SLURMD_NODENAME"], envs[t]["NODE_RANK"], envs[t]["RANK"]) for t in (0, 1)] == [
        ("n1", "0", "0"), ("n2", "1", "1")]
    assert all(env["WORLD_SIZE"] == "2" and env["LOCAL_RANK"] == "0" for env in envs.values())
    # the first node's NodeAddr (its name does not resolve here), and task 0's port for both
    assert envs[0]["MASTER_ADDR"] == envs[1]["MASTER_ADDR"] == "127.0.0.1"
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"]


def test_a_rank_killed_on_one_node_tears_the_gang_down(backend, tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    backend.submit(Job("torn", backend_jobs.gang_with_a_dying_rank, (str(folder), 1, 600.0), gang=ACROSS))
    done = _done(backend)
    assert done.value is None and done.error is not None
    assert "rank 1 of 2 failed" in done.error, done.error
    pids = {int(p.stem): p.read_text() for p in folder.glob("*.pid")}
    assert sorted(pids.values()) == ["0", "1"]
    # srun's --kill-on-bad-exit ended rank 0 on the other node: no task outlives the job
    wait_for(lambda: not any(alive(pid) for pid in pids), "every task of the gang ended", limit_s=60)


def test_a_preempted_gang_is_requeued_whole_and_resumes(backend, tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    backend.submit(Job("preempted", backend_jobs.count_starts_and_hold_the_first, (str(folder), 600.0),
                       on_requeue=backend_jobs.requeue_note, gang=ACROSS))
    job_id = backend.job_ids()["preempted"]
    # Both first starts logged whole: a USR2 while task 0 is still writing its line would
    # requeue a start the second one could not count.
    wait_for(lambda: all(backend_jobs.logged_starts(folder, task) for task in (0, 1)), "both ranks' first starts")
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True)
    done = _done(backend, limit_s=240)
    assert done.error is None, done.error
    # task 0's second start, which returns only once rank 1 has logged its own
    assert done.value == {"task": "0", "start": 2}
    assert (folder / "requeued").read_text().splitlines() == ["requeued"]  # on_requeue ran once, in task 0
    # the requeue restarted the whole gang, each rank in a new process
    for task, pids in backend_jobs.start_pids(folder, tasks=2, starts=2).items():
        assert len(pids) == 2 and pids[0] != pids[1], (task, pids)
    # submitit took its preemption branch, not its timeout one: the requeue spent none of
    # the requeues the job has for reaching its time limit
    task_0 = JobPaths(backend.folder, job_id=job_id, task_id=0)
    log = task_0.stdout.read_text()
    assert "this job is preempted" in log and "this job is timed-out" not in log, log
    assert DelayedSubmission.load(task_0.submitted_pickle)._timeout_countdown == MAX_REQUEUES


def test_a_rank_that_raises_is_the_jobs_error_with_its_traceback(backend, tmp_path):
    backend.submit(Job("raised", backend_jobs.gang_with_a_raising_rank, (str(tmp_path), 1, 600.0), gang=ACROSS))
    done = _done(backend)
    assert done.value is None and done.error is not None
    assert "rank 1 of 2 failed" in done.error and "ValueError: rank 1 broke" in done.error, done.error


def test_ranks_still_running_once_task_0_returned_are_stopped_after_the_grace(backend, tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_backend, "GANG_GRACE_S", 1.0)  # the contract's grace, shortened for the test
    backend.submit(Job("lingering", backend_jobs.gang_where_only_task_0_returns, (str(tmp_path), 600.0),
                       gang=ACROSS))
    done = _done(backend)
    assert (done.value, done.error) == ("task 0 returned", None)  # reported as soon as task 0 returned
    lingering = [int(p.stem) for p in tmp_path.glob("*.pid") if p.read_text() == "1"]
    assert lingering and alive(lingering[0])
    # the backend cancels the job once the grace is over, at a later wait
    wait_for(lambda: backend.wait(timeout=1.0) == [] and not alive(lingering[0]), "the lingering rank stopped",
             limit_s=60)


@pytest.mark.parametrize("gang", [Gang(), Gang(nodes=1, processes_per_node=2)])
def test_a_one_node_gang_meets_at_the_loopback_address_without_asking_the_controller(gang, tmp_path, monkeypatch):
    from rcpforge.cluster import slurm_gang

    for name, value in {"SLURM_JOB_ID": "41", "SLURM_PROCID": "0", "SLURM_NTASKS": str(gang.tasks), "SLURM_NODEID": "0",
                        "SLURM_LOCALID": "0", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "n1",
                        "SUBMITIT_EXECUTOR": "slurm", "SUBMITIT_FOLDER": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)

    def no_scontrol(*args):
        raise AssertionError(f"scontrol {' '.join(args)} asked for a one-node job")

    monkeypatch.setattr(slurm_gang, "_scontrol", no_scontrol)
    env = slurm_gang.rendezvous_env(gang)
    assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0
    # the other tasks of the node read task 0's address from the file; a job of one task has none to tell
    assert len(list(tmp_path.glob("*_rendezvous.txt"))) == (gang.tasks > 1)
