"""The backend interface: where runs execute.

A backend executes picklable calls `fn(*args)` and reports each one's completion once.
A job is a gang (`Job.gang`): the backend starts `gang.tasks` processes at once, each
calling `fn(*args)` with its rendezvous environment set (`Gang.task_env`); task 0's
return is the job's value. When any task dies or raises before task 0 has returned, the
backend stops every other task of the gang (no orphan keeps a GPU or a port) and reports
the job's error naming the task; once task 0 has returned, the others get a short grace
to end, then are stopped.
It knows nothing of MLflow or campaigns: the orchestrator hands it `execute_run` jobs.
`Backend` is the whole contract, every method included: callers never probe a backend
for optional parts, and `tests/conformance/test_backends.py` runs every backend
through the same tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from trainers.contract.gang import Gang


class BackendError(RuntimeError):
    """A backend that cannot start (bad settings, cluster unreachable): raised before
    anything is submitted; the message names the setting and the fix."""


@dataclass(frozen=True)
class Job:
    task_id: str
    fn: Callable[..., Any]
    args: tuple
    # Called with `args` before a backend that requeues jobs (Slurm, on preemption or a
    # time limit) runs the job again; its errors are ignored (the requeue matters more).
    on_requeue: Callable[..., None] | None = None
    gang: Gang = Gang()


@dataclass(frozen=True)
class Done:
    task_id: str
    value: Any = None
    # Set when the job did not return: the worker raised, crashed or was killed.
    error: str | None = None


class Backend(Protocol):
    def submit(self, job: Job) -> None:
        """Queue a job; it may start now or at the next `wait` (Slurm sends each wave of
        submissions as one job array)."""
        ...

    def job_ids(self) -> dict[str, str]:
        """Task id -> the cluster's id of its job, for jobs the cluster owns beyond this
        process (Slurm): the orchestrator files them on the runs, so nobody launches a
        key again while its job is live. Backends whose jobs die with this process
        (local workers, Ray tasks) return {}."""
        ...

    def wait(self, timeout: float) -> list[Done]:
        """Completions since the last call; waits up to `timeout` s for the first."""
        ...

    def in_flight(self) -> int: ...

    def cancel(self) -> None:
        """Stop every job not yet completed; they will not be reported."""
        ...

    def close(self) -> None:
        """Release this process's hold on the backend; jobs a cluster owns go on."""
        ...
