"""Instant job functions for the backend conformance suite: picklable by name, so every
backend's workers (a spawned process, a Ray worker, a Slurm job) import them."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def echo(value):
    return value


def raise_error(message: str):
    raise RuntimeError(message)


def die() -> None:
    """The worker's process is killed under the job (the OOM killer, a node gone)."""
    os.kill(os.getpid(), signal.SIGKILL)


def note_pid_and_sleep(folder: str, seconds: float) -> None:
    """Leaves its pid in `folder`, then sleeps: a job to cancel while it runs."""
    Path(folder, f"{os.getpid()}.pid").write_text(str(os.getpid()))
    time.sleep(seconds)


def requeue_note(folder: str, *_args) -> None:
    Path(folder, "requeued").touch()
