"""The Slurm backend, through submitit: one job-array task per run.

Every job is a submitit `Checkpointable`: on preemption (`scancel --signal=USR2`) or
shortly before its time limit the job is requeued, up to `max_requeues` times, and runs
the same call again; the trainer resumes from the checkpoint in the run's folder and the
run's log skips the eval points already written, so MLflow gets each point once.

Job states come from `squeue -t all` (finished jobs stay listed for Slurm's MinJobAge),
so they are known without an accounting database; a job that left the queue without a
result (killed, node failure, out of memory) is reported as this job's error.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import submitit

from cluster.backend import BackendError, Done, Job
from cluster.slurm_states import ENDED, job_states, preflight

_ROOT = Path(__file__).resolve().parents[1]
# How many polls a job may be ended (or unlisted) with no result file before it counts
# as lost: the worker writes the result just before it exits.
_GRACE_POLLS = 3


class _Resumable(submitit.helpers.Checkpointable):
    """Requeue = the same call again; the progress lives in the run's own checkpoint.
    The job's `on_requeue(*args)` says what a requeue means to it (e.g. the run's ledger
    entry reads `preempted` until the job runs again)."""

    def __call__(self, fn, on_requeue, *args):
        return fn(*args)

    def checkpoint(self, fn, on_requeue, *args):
        if on_requeue is not None:
            try:
                on_requeue(*args)
            except Exception:  # noqa: BLE001 - the requeue matters more than the note
                pass
        return super().checkpoint(fn, on_requeue, *args)


def submitit_parameters(settings: Any, job_name: str) -> dict[str, Any]:
    """The campaign's Slurm settings under submitit's parameter names."""
    params: dict[str, Any] = dict(
        timeout_min=settings.time_min, nodes=settings.nodes, tasks_per_node=1, cpus_per_task=settings.cpus_per_task,
        slurm_job_name=job_name, slurm_array_parallelism=settings.array_parallelism,
        slurm_signal_delay_s=settings.signal_delay_s, slurm_setup=[*_environment(), *settings.setup],
        slurm_additional_parameters=dict(settings.additional_parameters), stderr_to_stdout=True,
    )
    if settings.gpus_per_node:
        params["gpus_per_node"] = settings.gpus_per_node
    if settings.mem_gb is not None:
        params["mem_gb"] = settings.mem_gb
    for key, value in (("slurm_partition", settings.partition), ("slurm_account", settings.account),
                       ("slurm_qos", settings.qos)):
        if value is not None:
            params[key] = value
    return params


def _environment() -> list[str]:
    """The worker runs this interpreter (submitit's command is sys.executable) with this
    import path, whatever the job's login environment says."""
    paths = [str(_ROOT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    pythonpath = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    return [f"export PYTHONPATH={shlex.quote(pythonpath)}"]


class SlurmBackend:
    """`settings` is the campaign's `backend:` section of kind slurm (every parameter and
    its default is defined once, in `sweeps/backends.py`'s `SlurmBackendSpec`); this
    class only maps it onto submitit's names."""

    def __init__(self, settings: Any, folder: Path, job_name: str = "rcpforge", poll_s: float = 1.0):
        preflight(settings.partition)
        self.folder = Path(folder)
        self.poll_s = poll_s
        self._executor = submitit.AutoExecutor(folder=self.folder, cluster="slurm",
                                               slurm_max_num_timeout=settings.max_requeues)
        try:
            self._executor.update_parameters(**submitit_parameters(settings, job_name))
        except ValueError as err:
            raise BackendError(f"backend.additional_parameters: {str(err).splitlines()[0]}") from None
        self._queued: list[Job] = []
        self._jobs: dict[str, tuple[submitit.Job, int]] = {}  # task id -> (job, polls seen lost)
        self._last_poll = 0.0

    def submit(self, job: Job) -> None:
        self._queued.append(job)

    def _flush(self) -> None:
        """Everything submitted since the last wait goes out as one job array."""
        if not self._queued:
            return
        queued, self._queued = self._queued, []
        with self._executor.batch():
            handles = [self._executor.submit(_Resumable(), job.fn, job.on_requeue, *job.args) for job in queued]
        for job, handle in zip(queued, handles):
            self._jobs[job.task_id] = (handle, 0)

    def job_ids(self) -> dict[str, str]:
        """Task id -> Slurm job id of every job out, for the ledger."""
        self._flush()
        return {task_id: handle.job_id for task_id, (handle, _) in self._jobs.items()}

    def in_flight(self) -> int:
        return len(self._queued) + len(self._jobs)

    def wait(self, timeout: float) -> list[Done]:
        self._flush()
        deadline = time.monotonic() + timeout
        while self._jobs:
            done = self._poll()
            if done or time.monotonic() >= deadline:
                return done
            time.sleep(min(self.poll_s, max(0.0, deadline - time.monotonic())))
        return []

    def _poll(self) -> list[Done]:
        done: list[Done] = []
        states: dict[str, str] | None = None
        for task_id, (handle, lost) in list(self._jobs.items()):
            if handle.paths.result_pickle.exists():
                done.append(self._collect(task_id, handle))
                continue
            if states is None:
                states = job_states([h.job_id for h, _ in self._jobs.values()])
            state = states.get(handle.job_id, "UNLISTED").split()[0]
            if state in ENDED or state == "UNLISTED":
                lost += 1
                if lost >= _GRACE_POLLS:
                    del self._jobs[task_id]
                    done.append(Done(task_id, error=f"slurm job {handle.job_id} ended {state} without a result; "
                                                    f"log: {handle.paths.stdout}"))
                    continue
            self._jobs[task_id] = (handle, lost if state in ENDED or state == "UNLISTED" else 0)
        return done

    def _collect(self, task_id: str, handle: submitit.Job) -> Done:
        del self._jobs[task_id]
        try:
            outcome, value = handle._get_outcome_and_result()  # noqa: SLF001 - no sacct needed
        except Exception as err:  # noqa: BLE001 - unreadable result: this job's error
            return Done(task_id, error=f"slurm job {handle.job_id}: cannot read its result: {err}")
        if outcome == "success":
            return Done(task_id, value=value)
        return Done(task_id, error=f"slurm job {handle.job_id} raised:\n{value}")

    def cancel(self) -> None:
        self._queued.clear()
        ids = [handle.job_id for handle, _ in self._jobs.values()]
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=30)
        self._jobs.clear()

    def close(self) -> None:
        """Jobs still out keep running: Slurm owns them (see `rcpforge run --detach`)."""
        self._flush()

    def __enter__(self) -> SlurmBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
