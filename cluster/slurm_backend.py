"""The Slurm backend, through submitit: one job-array task per run.

A run is a gang (`Job.gang`): its job asks for `gang.nodes` nodes and
`gang.tasks_per_node` tasks on each, and srun starts them all at once. Each task finds
its rendezvous environment (`cluster/slurm_gang.py`) and calls the job's function; task
0's return is the job's value. srun runs with `--kill-on-bad-exit`: a task that dies or
raises ends the whole step, and the job's error names the task from srun's line in the
log. Jobs of one gang shape go out as one job array (an array's jobs share one shape).

Every job is a submitit `Checkpointable`: on preemption (`scancel --signal=USR2`) or
shortly before its time limit the job is requeued (at the time limit up to
`max_requeues` times; submitit counts a USR2 in the last max(20 %, 10 min) of the limit
as the time limit) and runs the same call again; the trainer resumes from the checkpoint in the run's folder and the
run's log skips the eval points already written, so MLflow gets each point once. Only
task 0 checkpoints (submitit leaves the signal to the other ranks unanswered), and the
requeue restarts the whole gang.

Job states come from `squeue -t all` (finished jobs stay listed for Slurm's MinJobAge),
so they are known without an accounting database; a job that left the queue without a
result (killed, node failure, out of memory, preempted and not requeued under
PreemptMode=CANCEL) is reported as this job's error, which the engine retries within
`max_attempts`. A job that Slurm requeues itself (PreemptMode=REQUEUE) stays this job.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

import submitit

from rcpforge.cluster.backend import Backend, BackendError, Done, Job
from rcpforge.cluster.gang import GANG_GRACE_S, describe_task, run_task
from rcpforge.cluster.slurm_gang import await_kill, ended_by_slurm, failed_task, rendezvous_env
from rcpforge.cluster.slurm_limits import SlurmLimits, limits_of
from rcpforge.cluster.slurm_states import ENDED, asked_job_states, preflight
from rcpforge.cluster.slurm_submit import (
    ArrayRefused,
    Pending,
    Transient,
    backoff,
    find_by_token,
    prepare,
    send,
    submitit_parameters,
)
from rcpforge.cluster.task_secrets import drop_sealed, seal, unseal
from rcpforge.trainers.contract.gang import Gang

# How many polls, `poll_s` apart at least, a job may be ended (or unlisted) with no result
# file before it counts as lost: the worker writes the result just before it exits. Counted
# in time too: one wait's last poll and the next wait's first come a moment apart.
_GRACE_POLLS = 3
# How often squeue is asked about the jobs out while none is suspected lost: each ask is
# an RPC the controller answers under its job lock, as every other user's are, and a
# result file says a job's end sooner (RCPF_SLURM_STATES_EVERY_S sets another).
STATES_EVERY_S = float(os.environ.get("RCPF_SLURM_STATES_EVERY_S", "3"))
# How often the cluster's limits are read again while a campaign runs: an operator who
# lifts a limit (`sacctmgr modify qos ...`) sees the campaign use the room within this
# (RCPF_SLURM_LIMITS_REFRESH_S sets another, as the tests do).
LIMITS_REFRESH_S = float(os.environ.get("RCPF_SLURM_LIMITS_REFRESH_S", "30"))


class _Resumable(submitit.helpers.Checkpointable):
    """Requeue = the same call again; the progress lives in the run's own checkpoint.
    The job's `on_requeue(*args)` says what a requeue means to it (e.g. the run's ledger
    entry reads `preempted` until the job runs again)."""

    def __call__(self, gang, sealed, fn, on_requeue, final, *args):
        with ended_by_slurm() as terminated:
            value = run_task(fn, args, rendezvous_env(gang), unseal(sealed))
            if terminated.is_set() and not (final is not None and final(value)):
                await_kill()  # Slurm is ending the job: its state says what became of it
            return value

    def checkpoint(self, gang, sealed, fn, on_requeue, final, *args):
        # submitit calls this in task 0 only: the note is written once per requeue.
        if on_requeue is not None:
            try:
                on_requeue(*args)
            except Exception:  # noqa: BLE001 - the requeue matters more than the note
                pass
        return super().checkpoint(gang, sealed, fn, on_requeue, final, *args)


@dataclass
class _Out:
    """A job Slurm has: its submitit handle (of every task: `handle.task(n)` is task
    n's result and log), its gang, and how many polls in a row it was seen ended (or
    unlisted) with no result file, since when."""

    handle: submitit.Job
    gang: Gang
    lost_polls: int = 0
    lost_since: float = 0.0

    @property
    def reporter(self) -> submitit.Job:
        """Task 0's handle: its result is the job's."""
        return self.handle.task(0)


class SlurmBackend(Backend):
    """`settings` is the campaign's `backend:` section of kind slurm (every parameter and
    its default is defined once, in `sweeps/backends.py`'s `SlurmBackendSpec`); this
    class only maps it onto submitit's names. `gang` and `gpu_type` are the campaign's
    `launch:`; a job of another gang gets its own parameters (`Job.gang`). Every job is
    submitted at once, within the cluster's limits (`cluster/slurm_limits.py`): arrays of
    at most MaxArraySize - 1 tasks, and no more of the campaign's jobs queued and running,
    nor GPUs asked for, than the smallest limit allows (`free_slots`); more go out as
    others end. Submissions are sent and retried by `cluster/slurm_submit.py`."""

    jobs_outlive_process = True  # the cluster owns them; requeued on preemption (`reruns_jobs`)

    def __init__(self, settings: Any, folder: Path, job_name: str = "rcpforge", poll_s: float = 1.0,
                 gang: Gang | None = None, gpu_type: str | None = None):
        preflight(settings.partition)
        self.folder = Path(folder)
        self.poll_s = poll_s
        self._settings, self._job_name, self._gpu_type = settings, job_name, gpu_type
        self._executors: dict[Gang, submitit.AutoExecutor] = {}
        self._executor_for(gang or Gang())  # a bad setting fails here, before anything is submitted
        self._queued: list[Job] = []
        # arrays Slurm has not taken yet (refused for now: tried again at their time)
        self._sending: list[tuple[Pending, list[Job], Gang]] = []
        self._array_cap: int | None = None  # set when Slurm refuses arrays its MaxArraySize allows
        self.notices: list[str] = []  # lines for the campaign's log, taken by the orchestrator
        self._limits_at = time.monotonic()
        self.limits: SlurmLimits = limits_of(self._settings)
        self._jobs: dict[str, _Out] = {}  # task id -> its job
        # Jobs whose result is in but that Slurm still lists (their step and epilog end a
        # moment later): the queue limits count them until they leave.
        self._leaving: set[str] = set()
        self._states_due = 0.0  # when squeue is next asked about the jobs (`_poll`)
        self._topping_up = False  # the queue is being filled to its limit (`free_slots`)
        # Slurm job id -> when its gang's other tasks must have ended, once task 0 returned.
        self._finishing: dict[str, float] = {}

    def _executor_for(self, gang: Gang) -> submitit.AutoExecutor:
        if gang not in self._executors:
            executor = submitit.AutoExecutor(folder=self.folder, cluster="slurm",
                                             slurm_max_num_timeout=self._settings.max_requeues)
            try:
                executor.update_parameters(**submitit_parameters(self._settings, self._job_name, gang, self._gpu_type))
            except ValueError as err:
                raise BackendError(f"backend.additional_parameters: {str(err).splitlines()[0]}") from None
            self._executors[gang] = executor
        return self._executors[gang]

    def free_slots(self, gang: Gang) -> int | None:
        """How many more runs of `gang` the limits leave room for now (None: no limit read)."""
        if time.monotonic() - self._limits_at >= LIMITS_REFRESH_S:
            fresh, self._limits_at = limits_of(self._settings), time.monotonic()
            if fresh.controller_answered or not self.limits.controller_answered:
                self.limits = fresh  # a controller that does not answer now keeps the limits it had
        rooms = []
        queue = self.limits.queue_window
        if queue is not None:
            rooms.append(queue[0] - self.in_flight() - len(self._leaving))
        gpus, per_job = self.limits.gpu_window, self._gpus_per_job(gang)
        if gpus is not None and per_job:
            rooms.append((gpus[0] - self._gpus_held()) // per_job)
        if not rooms:
            return None
        room = max(0, min(rooms))
        # A queue full but for a few places is topped up once a tenth of it is free, while
        # jobs are out, and then to the top: one array of many runs, not an sbatch (an
        # RPC the controller answers) for each run that ended.
        if queue is not None and self.in_flight() and not self._topping_up and room < queue[0] // 10:
            return 0
        self._topping_up = room > 0
        return room

    def _gpus_per_job(self, gang: Gang) -> int:
        if gang.gpus_per_process:
            return gang.gpus_per_task * gang.tasks
        return self._settings.gpus_per_node * gang.nodes

    def _gpus_held(self) -> int:
        """GPUs this campaign's jobs ask for: queued here, on their way, and out."""
        gangs = [job.gang or Gang() for job in self._queued] + [out.gang for out in self._jobs.values()]
        gangs += [gang for _, jobs, gang in self._sending for _ in jobs]
        return sum(self._gpus_per_job(gang) for gang in gangs)

    def submit(self, job: Job) -> None:
        self._queued.append(job)

    def take_notices(self) -> list[str]:
        lines, self.notices = self.notices, []
        return lines

    def _flush(self) -> None:
        """Everything submitted since the last wait goes out as job arrays, one per gang
        shape and at most MaxArraySize - 1 tasks each; arrays refused for now are tried
        again when their time comes."""
        queued, self._queued = self._queued, []
        by_gang = sorted(queued, key=lambda job: repr(job.gang))
        size = min(self.limits.array_tasks or len(queued), self._array_cap or len(queued)) or 1
        for gang, group in groupby(by_gang, key=lambda job: job.gang):
            jobs = list(group)
            executor = self._executor_for(gang)
            for start in range(0, len(jobs), size):
                chunk = jobs[start : start + size]
                calls = [(_Resumable(), gang, seal(self.folder, job.task_id, job.secret_env), job.fn, job.on_requeue,
                          job.final, *job.args) for job in chunk]
                self._sending.append((prepare(executor, calls), chunk, gang))
        self._send_due()

    def _send_due(self, block: bool = False) -> None:
        """Send the arrays whose time has come (`block`: wait for each until Slurm takes it)."""
        for item in list(self._sending):
            pending, jobs, gang = item
            while True:
                if pending.next_try > time.monotonic():
                    if not block:
                        break
                    time.sleep(pending.next_try - time.monotonic())
                try:
                    handles = send(pending, self._settings)
                except BackendError:
                    self._sending.remove(item)  # refused for good: not sent again
                    raise
                except ArrayRefused as err:
                    self._sending.remove(item)
                    self._resend_smaller(pending, jobs, str(err))
                    break
                except Transient as err:
                    if not pending.said:
                        self.notices.append(f"Slurm did not take {len(jobs)} runs now ({err}); trying again, "
                                            "2 s to 60 s apart, for as long as it takes")
                    pending.said = str(err)
                    backoff(pending)
                    continue
                self._sending.remove(item)
                if pending.said:
                    self.notices.append(f"Slurm took the {len(jobs)} runs after {pending.tries} tries")
                for job, handle in zip(jobs, handles):
                    self._jobs[job.task_id] = _Out(handle, gang)
                break

    def _resend_smaller(self, pending: Pending, jobs: list[Job], answer: str) -> None:
        """An array refused as invalid within the MaxArraySize read: its runs go back to the
        queue, every array from now on at most half its size (sent at the next flush)."""
        for pickle in pending.pickles:
            pickle.unlink(missing_ok=True)
        self._array_cap = max(1, len(jobs) // 2)
        array = self.limits.max_array_size
        reported = f"MaxArraySize = {array.value}" if array else "no MaxArraySize"
        self.notices.append(f"Slurm refused an array of {len(jobs)} runs ({answer}) though it reports {reported} "
                            "(a controller not restarted since MaxArraySize changed keeps the old limit); "
                            f"sending arrays of at most {self._array_cap} runs")
        self._queued.extend(jobs)

    def job_ids(self) -> dict[str, str]:
        """Task id -> Slurm job id of every job out, for the ledger."""
        self._flush()
        return {task_id: out.handle.job_id for task_id, out in self._jobs.items()}

    def in_flight(self) -> int:
        return len(self._queued) + sum(len(jobs) for _, jobs, _ in self._sending) + len(self._jobs)

    def wait(self, timeout: float) -> list[Done]:
        self._flush()
        self._stop_stragglers()
        deadline = time.monotonic() + timeout
        while self._jobs or self._sending:
            self._send_due()
            done = self._poll() if self._jobs else []
            if done or time.monotonic() >= deadline:
                return done
            time.sleep(min(self.poll_s, max(0.0, deadline - time.monotonic())))
        return []

    def _poll(self) -> list[Done]:
        """The jobs whose result is in, and those Slurm ended without one (lost). Slurm is
        asked (one squeue for every job out and every job leaving) every STATES_EVERY_S,
        or at every poll while a job is suspected lost; the states are read before the
        result files, so a job that ended with its result is never taken for lost."""
        done: list[Done] = []
        states: dict[str, str] | None = None
        suspect = any(out.lost_polls for out in self._jobs.values())
        if (self._jobs or self._leaving) and (suspect or time.monotonic() >= self._states_due):
            self._states_due = time.monotonic() + STATES_EVERY_S
            asked = [o.handle.job_id for o in self._jobs.values()] + sorted(self._leaving)
            states = asked_job_states(asked)
            if states is not None:
                gone = (*ENDED, "UNLISTED")
                self._leaving = {j for j in self._leaving if states.get(j, "UNLISTED").split()[0] not in gone}
        for task_id, out in list(self._jobs.items()):
            if out.reporter.paths.result_pickle.exists():
                done.append(self._collect(task_id, out))
                continue
            if states is None:
                continue  # not asked this poll, or squeue gave no answer: no news of this job
            state = states.get(out.handle.job_id, "UNLISTED").split()[0]
            if state not in ENDED and state != "UNLISTED":
                out.lost_polls = 0
                continue
            now = time.monotonic()
            if out.lost_polls == 0:
                out.lost_since = now
            out.lost_polls += 1
            if out.lost_polls >= _GRACE_POLLS and now - out.lost_since >= (_GRACE_POLLS - 1) * self.poll_s:
                del self._jobs[task_id]
                drop_sealed(self.folder, [task_id])
                done.append(Done(task_id, error=_lost_error(out, state)))
        self._stop_stragglers()
        return done

    def _collect(self, task_id: str, out: _Out) -> Done:
        del self._jobs[task_id]
        drop_sealed(self.folder, [task_id])
        self._leaving.add(out.handle.job_id)
        handle = out.reporter
        if out.gang.tasks > 1:
            self._finishing[handle.job_id] = time.monotonic() + GANG_GRACE_S
        try:
            outcome, value = handle._get_outcome_and_result()  # noqa: SLF001 - no sacct needed
        except Exception as err:  # noqa: BLE001 - unreadable result: this job's error
            return Done(task_id, error=f"slurm job {handle.job_id}: cannot read its result: {err}")
        if outcome == "success":
            return Done(task_id, value=value)
        return Done(task_id, error=f"slurm job {handle.job_id} raised:\n{value}")

    def _stop_stragglers(self, now: bool = False) -> None:
        """Gangs whose task 0 has returned: once their grace is over (`now`: at once),
        the tasks still running are cancelled with their job."""
        due = [job_id for job_id, until in self._finishing.items() if now or time.monotonic() >= until]
        if not due:
            return
        for job_id in due:
            del self._finishing[job_id]
        states = asked_job_states(due)
        # no answer from squeue: cancel them all (scancel of a job that has ended does nothing)
        running = due if states is None else [
            job_id for job_id in due if states.get(job_id, "UNLISTED").split()[0] not in (*ENDED, "UNLISTED")]
        if running:
            subprocess.run(["scancel", *running], capture_output=True, timeout=30)

    def cancel(self) -> None:
        self._queued.clear()
        ids = [out.handle.job_id for out in self._jobs.values()] + list(self._finishing)
        for pending, _, _ in self._sending:  # an array whose answer was lost may be queued all the same
            try:
                lost = find_by_token(pending.token) if pending.tries else None
            except Transient:
                lost = None
            if lost is not None:
                ids.append(lost)
        drop_sealed(self.folder, [*self._jobs, *(job.task_id for _, jobs, _ in self._sending for job in jobs)])
        self._sending.clear()
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=30)
        self._jobs.clear()
        self._finishing.clear()

    def close(self) -> None:
        """Jobs still out keep running: Slurm owns them (see `rcpforge run --detach`).
        A gang already reported has no use for the tasks it has left: they are stopped.
        What is still to send goes out first, however long the controller makes it wait."""
        self._flush()
        self._send_due(block=True)
        self._stop_stragglers(now=True)

    def __enter__(self) -> SlurmBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _lost_error(out: _Out, state: str) -> str:
    """The error of a job that ended without task 0's result: the task srun saw fail
    first, with its traceback where it raised (its own result file), else the log."""
    handle = out.reporter
    log = handle.paths.stdout  # where the sbatch script and srun write too
    if state == "PREEMPTED":  # its tasks were killed by the preemption, none failed
        return f"slurm job {handle.job_id} was preempted and not requeued (PreemptMode=CANCEL); log: {log}"
    failed = failed_task(log)
    if failed is None:
        return f"slurm job {handle.job_id} ended {state} without a result; log: {log}"
    task, how = failed
    detail = how
    result = out.handle.task(task).paths.result_pickle
    if result.exists():
        try:
            outcome, value = submitit.core.utils.pickle_load(result)
            if outcome == "error":
                detail = f"{how}\n{value}"
        except Exception:  # noqa: BLE001 - srun's line still names the task
            pass
    return f"slurm job {handle.job_id}: {describe_task(out.gang, task)} failed: {detail}; log: {log}"
