"""The local backend: a pool of worker processes on this machine.

Each worker is a spawned process that runs one job at a time. A worker that dies (a
segfault, the OOM killer, SIGKILL) fails only its own job: the pool reports that job as
an error and starts a fresh worker for the next one.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from collections import deque
from multiprocessing.connection import Connection, wait

from cluster.backend import Done, Job
from trainers.command.process import describe_exit


def _die_with_parent() -> None:
    """A worker must not outlive the orchestrator: an orphan would go on writing to a
    run that the restarted orchestrator launches again."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the pipe's EOF still ends the worker after its current job


def _worker_loop(conn: Connection, parent_pid: int) -> None:
    _die_with_parent()
    if os.getppid() != parent_pid:
        return  # the parent died before the death signal was armed
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        try:
            conn.send(Done(job.task_id, value=job.fn(*job.args)))
        except BaseException:  # noqa: BLE001 - reported to the orchestrator as this job's error
            conn.send(Done(job.task_id, error=traceback.format_exc()))


class _Worker:
    def __init__(self, ctx: mp.context.SpawnContext):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_loop, args=(child, os.getpid()), daemon=True)
        self.proc.start()
        child.close()
        self.job: Job | None = None


class LocalBackend:
    def __init__(self, workers: int):
        if workers < 1:
            raise ValueError(f"backend.workers must be at least 1, got {workers}")
        self._ctx = mp.get_context("spawn")
        self._size = workers
        self._workers: list[_Worker] = []
        self._queue: deque[Job] = deque()

    def submit(self, job: Job) -> None:
        self._queue.append(job)
        self._dispatch()

    def job_ids(self) -> dict[str, str]:
        return {}  # worker processes die with the orchestrator: no job outlives this process

    def in_flight(self) -> int:
        return len(self._queue) + sum(w.job is not None for w in self._workers)

    def _dispatch(self) -> None:
        while self._queue:
            idle = next((w for w in self._workers if w.job is None), None)
            if idle is None:
                if len(self._workers) >= self._size:
                    return
                idle = _Worker(self._ctx)
                self._workers.append(idle)
            idle.job = self._queue.popleft()
            idle.conn.send(idle.job)

    def wait(self, timeout: float) -> list[Done]:
        busy = [w for w in self._workers if w.job is not None]
        if not busy:
            return []
        handles = {w.conn: w for w in busy} | {w.proc.sentinel: w for w in busy}
        done: list[Done] = []
        for ready in wait(list(handles), timeout):
            w = handles[ready]
            if w.job is None:
                continue  # both its pipe and its sentinel were ready
            try:
                if ready is w.conn or w.conn.poll():
                    done.append(w.conn.recv())
                    w.job = None
                    continue
            except (EOFError, OSError):
                pass
            w.proc.join(timeout=1)
            done.append(Done(w.job.task_id, error=f"worker process died ({describe_exit(w.proc.exitcode)})"))
            w.job = None
            self._workers.remove(w)
        self._dispatch()
        return done

    def cancel(self) -> None:
        self._queue.clear()
        for w in self._workers:
            if w.proc.is_alive():
                w.proc.kill()
            w.proc.join(timeout=5)
        self._workers = []

    def close(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(None)
            except OSError:
                pass
        for w in self._workers:
            w.proc.join(timeout=10)
            if w.proc.is_alive():
                w.proc.kill()
        self._workers = []

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
