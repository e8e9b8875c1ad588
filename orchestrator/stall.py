"""The stall guard: a run that reports no eval point for `timeout_s` is stopped and
recorded `failed` with the reason, instead of holding its worker forever.

A real-time timer (SIGALRM) is re-armed at every eval point; when it fires, its handler
raises `Stalled` in the worker's main thread, which also interrupts a blocking sleep or
read. Signal handlers exist only in a process's main thread: elsewhere the guard is off
and says so once."""

from __future__ import annotations

import logging
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

_log = logging.getLogger("rcpforge.stall")


class Stalled(BaseException):
    """A BaseException, like KeyboardInterrupt, so that no trainer's `except Exception`
    swallows it."""


class StallGuard:
    def __init__(self, timeout_s: float | None):
        self.timeout_s = timeout_s
        self.active = bool(timeout_s) and threading.current_thread() is threading.main_thread()
        if timeout_s and not self.active:
            _log.warning("stall timeout %.0f s is not enforced: the run is not in its process's main thread", timeout_s)
        self._previous = None

    def __enter__(self) -> StallGuard:
        if self.active:
            self._previous = signal.signal(signal.SIGALRM, self._fire)
            self.beat()
        return self

    def beat(self) -> None:
        """Progress was made: the run has `timeout_s` again before it counts as stalled."""
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, self.timeout_s)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent waiting on something other than the trainer (an unavailable
        tracking store, retried for up to tracking.retry_s) is not a stall."""
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            yield
        finally:
            self.beat()

    def _fire(self, signum, frame) -> None:
        raise Stalled(f"stalled: no eval point for {self.timeout_s:g} s (backend.stall_timeout_s)")

    def __exit__(self, *exc) -> None:
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous or signal.SIG_DFL)
