"""The backend interface: where runs execute.

A backend executes picklable calls `fn(*args)` and reports each one's completion once.
A job is a gang (`Job.gang`): the backend starts `gang.tasks` processes at once, each
calling `fn(*args)` with its rendezvous environment set (`Gang.task_env`); task 0's
return is the job's value. When any task dies or raises before task 0 has returned, the
backend stops every other task of the gang (no orphan keeps a GPU or a port) and reports
the job's error naming the task; once task 0 has returned, the others get a short grace
to end, then are stopped.
It knows nothing of MLflow or campaigns: the orchestrator hands it `execute_run` jobs.
`Backend` is the whole contract, every method and property included, with the default of
each that a backend may leave out: callers never probe a backend for optional parts nor
ask its kind, and `tests/conformance/test_backends.py` runs every backend
through the same tests.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from rcpforge.trainers.contract.gang import Gang


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
    # Whether a value the call returned stands even when the cluster was ending the job
    # as it came (Slurm's SIGTERM: preempted, cancelled, at its limit); any other value
    # (None: every value) may be what the signal did to the call, and is not reported:
    # the cluster's state decides (requeued: the job runs again; ended: the job's error).
    final: Callable[[Any], bool] | None = None
    # Variables set in each task's environment for the call (credentials: sweeps/secrets.py),
    # carried apart from `args` so that no backend writes them into its own files: local
    # workers get them through their pipe, Ray tasks as an argument (in memory); Slurm,
    # which must store a job until it runs, in a file only the user may read, removed
    # once the job has ended (cluster/task_secrets.py).
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Done:
    task_id: str
    value: Any = None
    # Set when the job did not return: the worker raised, crashed or was killed.
    error: str | None = None


class Backend(ABC):
    """Every backend derives from it; what it does not override is the default below."""

    # Whether the cluster owns submitted jobs beyond this process (Slurm), so that they
    # go on when the orchestrator ends (`--detach`); default: they end with it.
    jobs_outlive_process: ClassVar[bool] = False
    # Whether a job submitted while `free_slots` says there is room starts at once,
    # not waiting in a queue (local workers): a run's record may say it started then.
    starts_at_submit: ClassVar[bool] = False
    # Whether the backend may run a job again under the same arguments (a Ray retry of a
    # dead worker, a Slurm requeue), so that a job's call must read back what an earlier
    # run of it left; default: it may.
    reruns_jobs: ClassVar[bool] = True

    @abstractmethod
    def submit(self, job: Job) -> None:
        """Queue a job; it may start now or at the next `wait` (Slurm sends each wave of
        submissions as one job array)."""

    @abstractmethod
    def job_ids(self) -> dict[str, str]:
        """Task id -> the cluster's id of its job, for jobs the cluster owns beyond this
        process (Slurm): the orchestrator files them on the runs, so nobody launches a
        key again while its job is live. Backends whose jobs die with this process
        (local workers, Ray tasks) return {}."""

    @abstractmethod
    def wait(self, timeout: float) -> list[Done]:
        """Completions since the last call; waits up to `timeout` s for the first."""

    @abstractmethod
    def in_flight(self) -> int: ...

    def free_slots(self, gang: Gang) -> int | None:
        """How many more jobs of `gang` to submit now (local: those that would start
        now; Ray: the cluster's slots and as many again); None, the default: no limit,
        every job is submitted at once and waits in the cluster's queue (Slurm)."""
        return None

    def take_notices(self) -> list[str]:
        """Lines for the campaign's log since the last call (Slurm: a controller that
        said "not now", and when it took the runs after all); default: none."""
        return []

    @abstractmethod
    def cancel(self) -> None:
        """Stop every job not yet completed; they will not be reported."""

    @abstractmethod
    def close(self) -> None:
        """Release this process's hold on the backend; jobs a cluster owns go on."""
