"""The backend interface: where runs execute.

A backend executes picklable calls `fn(*args)` and reports each one's completion once.
It knows nothing of MLflow or campaigns: the orchestrator hands it `execute_run` jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol


class BackendError(RuntimeError):
    """A backend that cannot start (bad settings, cluster unreachable): raised before
    anything is submitted; the message names the setting and the fix."""


@dataclass(frozen=True)
class Job:
    task_id: str
    fn: Callable[..., Any]
    args: tuple


@dataclass(frozen=True)
class Done:
    task_id: str
    value: Any = None
    # Set when the job did not return: the worker raised, crashed or was killed.
    error: str | None = None


class Backend(Protocol):
    def submit(self, job: Job) -> None: ...

    def wait(self, timeout: float) -> list[Done]:
        """Completions since the last call; waits up to `timeout` s for the first."""
        ...

    def in_flight(self) -> int: ...

    def cancel(self) -> None:
        """Stop every job not yet completed; they will not be reported."""
        ...

    def close(self) -> None: ...
