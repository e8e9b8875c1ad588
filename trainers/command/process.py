"""Run a program from an argv list (never a shell) and follow its output line by line.

The program runs in its own process group, so stopping it also stops whatever it
started. Output is read as bytes and decoded as latin-1 (as the checker reads result
files): binary garbage never raises, and every line round-trips to its bytes."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# A line longer than this is cut into pieces: garbage without newlines must not fill memory.
MAX_LINE = 1 << 20
TAIL_LINES = 20
_EMPTY = object()  # no line within the wait


@dataclass
class ProcessEnd:
    exit_code: int | None
    # Why rcpforge stopped the process (a budget), or None when it exited on its own.
    stopped_because: str | None = None
    tail: list[str] = field(default_factory=list)
    out_of_time: bool = False  # stopped at max_wall_s

    def describe_exit(self) -> str:
        return describe_exit(self.exit_code)


def describe_exit(code: int | None) -> str:
    """A process's exit status in words (a negative code is the signal that killed it)."""
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class StopProcess(Exception):
    """Raised by a line handler to stop the process (with the reason)."""


def _reader(stream, lines: queue.Queue) -> None:
    try:
        while chunk := stream.readline(MAX_LINE):
            lines.put(chunk)
    finally:
        lines.put(None)


_FROM_FILE = b"F"  # a queue item from the followed file, not the program's output


def _tail_file(path: Path, lines: queue.Queue, finished: threading.Event, poll_s: float = 0.1) -> None:
    """Put the lines of a file another process writes as they appear, until `finished`
    is set and the file is read to its end; a line is put only once its newline is
    written (a half-written line waits), except the last one at the end."""
    handle = None
    partial = b""
    try:
        while True:
            ending = finished.is_set()  # read before the last pass: nothing written after it is lost
            if handle is None and path.exists():
                handle = open(path, "rb")
            if handle is not None:
                while chunk := handle.readline(MAX_LINE):
                    partial += chunk
                    if partial.endswith(b"\n") or len(partial) >= MAX_LINE:
                        lines.put((_FROM_FILE, partial))
                        partial = b""
            if ending:
                if partial:
                    lines.put((_FROM_FILE, partial))
                return
            time.sleep(poll_s)
    finally:
        if handle is not None:
            handle.close()
        lines.put((_FROM_FILE, None))


def _printable(line: str) -> str:
    # The tail goes into an MLflow tag: no NUL or control characters there.
    return "".join(ch if ch.isprintable() else "\ufffd" for ch in line)


def run_and_follow(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    on_line: Callable[[str], None],
    max_wall_s: float,
    grace_s: float,
    raw_log: Path,
    done: Callable[[], bool] = lambda: False,
    on_idle: Callable[[], None] = lambda: None,
    mllog_file: Path | None = None,
) -> ProcessEnd:
    """Run `argv`, call `on_line` with every output line (stdout and stderr together) as
    it arrives, or with every line of `mllog_file` as the program writes it (its output
    then only goes to `raw_log` and the tail). `on_line` may raise StopProcess to end the
    process; past `max_wall_s` the process is stopped; once `done()` is true (run_stop
    seen) the process has `grace_s` to exit by itself. `on_idle` runs whenever the reader
    has caught up."""
    run = _Followed(argv, cwd, env, grace_s, mllog_file)
    try:
        with open(raw_log, "wb") as raw:
            stopped_because = run.follow(raw, on_line, time.monotonic() + max_wall_s, done, on_idle)
    finally:
        run.close()
    out_of_time = stopped_because == _WALL
    if out_of_time:
        stopped_because = f"wall-clock budget of {max_wall_s:g} s spent (trainer.max_wall_s)"
    return ProcessEnd(run.proc.returncode, stopped_because, [_printable(t[:500]) for t in run.tail], out_of_time)


_WALL = "wall"


def _parent_death_signal():
    """A function for the child between fork and exec that asks Linux to SIGKILL it when
    the process that started it dies: a worker killed outright (a gang torn down, an
    orchestrator SIGKILLed, a Ray actor killed) then takes its program with it instead of
    leaving it holding a GPU or a rendezvous port. Resolved here, in the parent: the
    child only makes one system call (no imports, no locks after fork). None off Linux."""
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_DIE_WITH_PARENT = _parent_death_signal()


class _Followed:
    """A started program, its output queue (filled by a reader thread) and its tail."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], grace_s: float,
                 mllog_file: Path | None = None):
        self.grace_s = grace_s
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_DIE_WITH_PARENT,
        )
        self.lines: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=_reader, args=(self.proc.stdout, self.lines), daemon=True)
        self.thread.start()
        # The followed file, read by its own thread: its lines are the MLLOG stream.
        self.file_done = threading.Event()
        self.file_thread = None
        if mllog_file is not None:
            self.file_thread = threading.Thread(target=_tail_file, args=(mllog_file, self.lines, self.file_done),
                                                daemon=True)
            self.file_thread.start()
        self.streams_open = 2 if self.file_thread else 1

    def follow(self, raw, on_line, deadline: float, done, on_idle) -> str | None:
        """Until EOF, a stop or a deadline; returns why rcpforge stopped it, if it did."""
        grace_until = None
        while True:
            now = time.monotonic()
            if grace_until is None and done():
                grace_until = now + self.grace_s
            if now >= deadline:
                return _WALL
            if grace_until is not None and now >= grace_until:
                return None  # run_stop was logged (or it exited): only the end is late
            chunk = self._next(raw, on_idle, min(deadline, grace_until or deadline) - now)
            if chunk is _EMPTY:
                if self.proc.poll() is not None:
                    self.file_done.set()  # the program is gone: its file is read to its end
                    if grace_until is None:
                        # Exited, but something it started still holds the pipe open.
                        grace_until = time.monotonic() + self.grace_s
                continue
            from_file = isinstance(chunk, tuple)
            if from_file:
                chunk = chunk[1]
            if chunk is None:  # one stream ended
                self.streams_open -= 1
                if self.streams_open == 0:
                    return None
                self.file_done.set()  # the output closed, so the program ended: finish the file
                continue
            text = chunk.decode("latin-1").rstrip("\r\n")
            if not from_file:
                raw.write(chunk)
                self.tail.append(text)
                if self.file_thread is not None:
                    continue  # the MLLOG stream is the file
            try:
                on_line(text)
            except StopProcess as stop:
                return str(stop)

    def _next(self, raw, on_idle, wait_s: float):
        try:
            return self.lines.get_nowait()
        except queue.Empty:
            # Flush when caught up, not per line: a chatty program stays cheap to
            # follow, and a stalled one leaves its files complete.
            raw.flush()
            on_idle()
        try:
            return self.lines.get(timeout=min(wait_s, 0.5))
        except queue.Empty:
            return _EMPTY

    def close(self) -> None:
        proc = self.proc
        if proc.poll() is None:
            _stop_group(proc, self.grace_s)
        proc.wait()
        self.file_done.set()
        if self.file_thread is not None:
            self.file_thread.join(timeout=self.grace_s)
        if self.thread.is_alive():
            # Its children still hold the pipe; the group id stays reserved while they live.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.thread.join(timeout=self.grace_s)
        if proc.stdout:
            proc.stdout.close()


def _stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the whole group, SIGKILL after the grace period."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
