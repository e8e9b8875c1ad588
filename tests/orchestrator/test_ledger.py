"""Ledger semantics across backends (logic only, no cluster): a key has at most one
outcome; failed and preempted are retried and never counted; a key whose cluster job is
still live is followed, never launched twice."""

from __future__ import annotations

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.orchestrator.ledger import LedgerEntry, make_plan
from rcpforge.orchestrator.status import _column
from tests.helpers.campaigns import tiny_campaign
from rcpforge.trainers.contract import RunStatus


def _specs():
    return expand(parse_campaign(tiny_campaign(recipes=["bf16"], seeds=3)))


def test_plan_over_every_status():
    specs = _specs()  # 6 keys
    status = [RunStatus.converged, RunStatus.diverged, RunStatus.failed, RunStatus.preempted, RunStatus.running]
    ledger = {
        s.run_key: LedgerEntry(f"run{i}", s.run_key, st, attempts=2, backend_job=f"slurm:{i}")
        for i, (s, st) in enumerate(zip(specs, status))
    }
    live = {specs[4].run_key}  # the running one's job is still on Slurm
    plan = make_plan(specs, ledger, max_attempts=2, retry_failed=False, live=live)
    assert plan.done == 2
    assert [s.run_key for s in plan.gave_up] == [specs[2].run_key]  # failed, no attempts left
    assert [s.run_key for s in plan.elsewhere] == [specs[4].run_key]
    # preempted (not live) and never-seen keys are launched; outcomes never are
    assert [s.run_key for s in plan.launch] == [specs[3].run_key, specs[5].run_key]
    retried = make_plan(specs, ledger, max_attempts=2, retry_failed=True, live=live)
    assert [s.run_key for s in retried.launch] == [specs[2].run_key, specs[3].run_key, specs[5].run_key]


def test_status_columns_use_the_slurm_state():
    assert _column(RunStatus.converged, None) == "converged"
    assert _column(RunStatus.running, "RUNNING") == "running"
    assert _column(RunStatus.pending, "PENDING") == "pending"
    assert _column(RunStatus.preempted, "PENDING") == "pending"  # requeued, waits to start again
    # the job ended without an outcome: counted failed (it will be retried), not running
    assert _column(RunStatus.running, "NODE_FAIL") == "failed"
    assert _column(RunStatus.running, "UNLISTED") == "failed"
    # pending in the store (its orchestrator's Ctrl-C cancelled the job and put it back):
    # launched again by the next `run`, not a failure
    assert _column(RunStatus.pending, "CANCELLED") == "pending"
    assert _column(RunStatus.pending, "UNLISTED") == "pending"
    assert _column(RunStatus.pending, "FAILED") == "failed"  # its job failed before it started


def test_free_attempts_do_not_count_against_max_attempts():
    # attempts a configuration error failed or its stop cancelled (rcpforge.free_attempts)
    specs = _specs()[:3]
    ledger = {s.run_key: LedgerEntry(f"run{i}", s.run_key, RunStatus.failed, attempts=a, free_attempts=f)
              for i, (s, (a, f)) in enumerate(zip(specs, [(3, 1), (4, 1), (1, 1)]))}
    plan = make_plan(specs, ledger, max_attempts=3, retry_failed=False)
    # 2 of its own left one; 3 of its own, none; a run stopped at its first attempt, all of them
    assert [s.run_key for s in plan.launch] == [specs[0].run_key, specs[2].run_key]
    assert [s.run_key for s in plan.gave_up] == [specs[1].run_key]


def test_a_job_that_ends_while_the_ledger_is_read_is_not_taken_for_lost(monkeypatch):
    """The race seen on a loaded machine: the ledger read (the run running), then its job
    ends having recorded its outcome, then Slurm is asked (COMPLETED). Read in that order
    the run looked lost and a detached look submitted it again; the ledger is read again
    once Slurm has answered, and holds the outcome."""
    from rcpforge.orchestrator import backends

    spec = _specs()[0]
    reads = iter([RunStatus.running, RunStatus.converged])  # before and after the job ends
    monkeypatch.setattr(backends, "slurm_states", lambda ledger: {k: "COMPLETED" for k in ledger})

    def read():
        return {spec.run_key: LedgerEntry("run0", spec.run_key, next(reads), attempts=1, backend_job="slurm:7_0")}

    ledger, states = backends.ledger_and_states(read)
    assert ledger[spec.run_key].status is RunStatus.converged and states == {spec.run_key: "COMPLETED"}
    plan = make_plan([spec], ledger, max_attempts=2, retry_failed=False, live=backends.live_of(states))
    assert plan.done == 1 and not plan.launch

    # a job still queued or running: one read is enough, and the run is followed
    reads = iter([RunStatus.running])
    monkeypatch.setattr(backends, "slurm_states", lambda ledger: {k: "RUNNING" for k in ledger})
    ledger, states = backends.ledger_and_states(read)
    assert backends.live_of(states) == {spec.run_key}
