"""The logic of Slurm job states, without a cluster (squeue and sacct answers faked): a job
preempted for good has ended, one that Slurm requeues has not; and a task that Slurm
sends SIGTERM reports nothing before its kill. The real preemptions are in
test_slurm_preemption.py."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from types import SimpleNamespace

import pytest

from rcpforge.cluster import slurm_gang, slurm_states
from rcpforge.cluster.slurm_backend import _lost_error
from rcpforge.cluster.slurm_states import ENDED, MAYBE_REQUEUED, job_states


def _fake_slurm(monkeypatch, squeue: tuple[int, str, str], sacct: str | None) -> list[list[str]]:
    """squeue answers (returncode, stdout, stderr); sacct prints `sacct` (None: no
    accounting). Returns the commands run."""
    calls: list[list[str]] = []

    def run(cmd, **_):
        calls.append(cmd)
        if cmd[0] == "squeue":
            return subprocess.CompletedProcess(cmd, squeue[0], squeue[1], squeue[2])
        if sacct is None:
            return subprocess.CompletedProcess(cmd, 1, "", "accounting storage is disabled")
        return subprocess.CompletedProcess(cmd, 0, sacct, "")

    monkeypatch.setattr(slurm_states.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(slurm_states.subprocess, "run", run)
    return calls


def test_preempted_for_good_has_ended_and_a_requeued_job_has_not(monkeypatch):
    # CANCEL: squeue reads PREEMPTED; REQUEUE: COMPLETING while killed, then PENDING.
    _fake_slurm(monkeypatch, (0, "10|PREEMPTED\n11|PENDING\n12|COMPLETING\n", ""), sacct=None)
    states = job_states(["10", "11", "12"])
    assert states == {"10": "PREEMPTED", "11": "PENDING", "12": "COMPLETING"}
    assert [job for job, state in states.items() if state in ENDED] == ["10"]


def test_sacct_preempted_counts_once_the_controller_has_let_the_job_go(monkeypatch):
    # squeue exits 1 when it knows none of the jobs: they left the controller, no requeue
    # can follow, and sacct's PREEMPTED is final.
    calls = _fake_slurm(monkeypatch, (1, "", "slurm_load_jobs error: Invalid job id specified"),
                        sacct="20|PREEMPTED\n21|COMPLETED\n")
    assert job_states(["20", "21"]) == {"20": "PREEMPTED", "21": "COMPLETED"}
    assert [c[0] for c in calls] == ["squeue", "sacct"]


def test_sacct_preempted_is_not_an_end_while_squeue_does_not_answer(monkeypatch):
    # A job requeued after its preemption keeps its PREEMPTED record in sacct until it
    # starts again; with no word from the controller it may be pending.
    _fake_slurm(monkeypatch, (1, "", "squeue: error: Unable to contact slurm controller"),
                sacct="30|PREEMPTED\n31|FAILED\n")
    states = job_states(["30", "31"])
    assert states == {"30": MAYBE_REQUEUED, "31": "FAILED"}
    assert MAYBE_REQUEUED not in ENDED


def test_squeue_wins_over_sacct_for_the_jobs_it_lists(monkeypatch):
    calls = _fake_slurm(monkeypatch, (0, "40|PENDING\n", ""), sacct="40|PREEMPTED\n")
    assert job_states(["40"]) == {"40": "PENDING"}
    assert [c[0] for c in calls] == ["squeue"]  # nothing forgotten: sacct not asked


def test_the_error_of_a_job_preempted_for_good_says_so(tmp_path):
    log = tmp_path / "7_0_log.out"
    log.write_text("srun: error: localhost: task 0: Terminated\n")  # the preemption's kill, not a failure
    out = SimpleNamespace(reporter=SimpleNamespace(job_id="7", paths=SimpleNamespace(stdout=log)))
    error = _lost_error(out, "PREEMPTED")
    assert error.startswith("slurm job 7 was preempted and not requeued") and "task 0" not in error


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    waited: list[float] = []
    monkeypatch.setattr(slurm_gang.time, "sleep", waited.append)
    return waited


@pytest.fixture
def submitit_handler():
    """A SIGTERM handler standing for submitit's (which lets the signal pass)."""
    heard: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: heard.append(signum))
    try:
        yield heard
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_task_sent_sigterm_waits_for_its_kill_instead_of_raising(sleeps, submitit_handler):
    with pytest.raises(RuntimeError, match="program killed"):
        with slurm_gang.ended_by_slurm():
            os.kill(os.getpid(), signal.SIGTERM)
            raise RuntimeError("program killed by SIGTERM")
    assert sleeps == [slurm_gang.TERMINATED_WAIT_S]  # before the error could be reported
    assert submitit_handler == [signal.SIGTERM]  # the handler before still heard it
    with pytest.raises(RuntimeError):
        with slurm_gang.ended_by_slurm():
            raise RuntimeError("a plain failure")
    assert sleeps == [slurm_gang.TERMINATED_WAIT_S]  # no SIGTERM: reported at once


@pytest.mark.parametrize(("status", "waits"), [("converged", False), ("failed", True)])
def test_after_sigterm_only_an_outcome_is_reported(monkeypatch, sleeps, submitit_handler, status, waits):
    from rcpforge.cluster import slurm_backend
    from rcpforge.orchestrator.execute import has_outcome
    from rcpforge.trainers.contract.gang import Gang

    monkeypatch.setattr(slurm_backend, "rendezvous_env", lambda gang: {})

    def run():
        os.kill(os.getpid(), signal.SIGTERM)  # the preemption, as the run ends
        return {"status": status}

    assert slurm_backend._Resumable()(Gang(), None, run, None, has_outcome) == {"status": status}
    assert sleeps == ([slurm_gang.TERMINATED_WAIT_S] if waits else [])


def test_the_sigterm_guard_keeps_its_hands_off_other_threads(sleeps):
    entered = []

    def body():
        with slurm_gang.ended_by_slurm():
            entered.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert entered == [before] and sleeps == []
