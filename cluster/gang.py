"""What every backend does the same way for a gang: run one task with its rendezvous
environment, find a free port, and stop a task with everything it started."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainers.contract.gang import RENDEZVOUS_VARS, Gang

# Once task 0 has returned, the gang's other tasks have this long to end by themselves.
GANG_GRACE_S = 10.0


def run_task(fn: Callable[..., Any], args: tuple, env: dict[str, str]) -> Any:
    """Call `fn(*args)` as one gang task: the rendezvous variables of an earlier job of
    a reused worker are cleared, this task's are set."""
    for name in RENDEZVOUS_VARS:
        os.environ.pop(name, None)
    os.environ.update(env)
    return fn(*args)


def describe_task(gang: Gang, task: int) -> str:
    """A gang task in words, for the error of a run one of whose tasks failed."""
    if gang.per_node:
        return f"node {task} of {gang.nodes} (the program started there)"
    return f"rank {task} of {gang.world_size}"


def gang_error(gang: Gang, task: int, error: str) -> str:
    """The job's error when one of its gang's tasks failed: that task's error, then one
    line naming the task and its last line (the line a progress display shows)."""
    lines = error.strip().splitlines() or ["no error text"]
    return "\n".join([*lines[:-1], f"{describe_task(gang, task)} failed: {lines[-1]}"])


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now, for a run's MASTER_PORT."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """Every living process below `pid` (children first found, then theirs), from /proc:
    a command trainer's program runs in its own session, so a process group kill of
    the worker would miss it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int | None) -> None:
    """SIGKILL `pid` and everything it started (collected first: once the parent is gone,
    its orphans move to init and cannot be found by ancestry). None: never started."""
    if pid is None:
        return
    for target in [pid, *descendants(pid)]:
        try:
            os.kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
