"""What every backend does the same way for a gang: run one task with its rendezvous
environment, find a free port, and stop a task with everything it started."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rcpforge.trainers.contract.gang import RENDEZVOUS_VARS, Gang

# Once task 0 has returned, the gang's other tasks have this long to end by themselves.
GANG_GRACE_S = 10.0


def run_task(fn: Callable[..., Any], args: tuple, env: dict[str, str],
             secret_env: Mapping[str, str] | None = None) -> Any:
    """Call `fn(*args)` as one gang task: the rendezvous variables of an earlier job of
    a reused worker are cleared, this task's are set, and its job's `secret_env` for the
    call only (a reused Ray worker keeps no campaign's credentials for the next job)."""
    for name in RENDEZVOUS_VARS:
        os.environ.pop(name, None)
    os.environ.update(env)
    secret_env = secret_env or {}
    before = {name: os.environ.get(name) for name in secret_env}
    os.environ.update(secret_env)
    try:
        return fn(*args)
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


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


def free_port(host: str = "127.0.0.1", ports: Iterable[int] = (0, 0, 0)) -> int:
    """A TCP port on `host` that nobody listens on, held for the server that is to bind
    it (a run's MASTER_PORT, a test's tracking server): the first of `ports` (0: any the
    kernel picks; three tries by default) that can be bound.

    A port merely found free and released could be handed out again before its server
    binds it (the next gang a launcher starts meanwhile, another process's pick). So it
    is left in TIME_WAIT: a connection to it is made and closed from its side. For about
    a minute the kernel's bind to port 0 then hands it to nobody, and a plain bind of it
    fails, while a server binding it with SO_REUSEADDR, as torch.distributed's TCPStore
    (torchrun's too), gRPC, uvicorn and PostgreSQL do, gets it at once. A gang program
    that listens on MASTER_PORT itself must set SO_REUSEADDR."""
    for wanted in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:  # without SO_REUSEADDR: refused on a port in use or held by another's call
                probe.bind((host, wanted))
            except OSError:
                continue
            port = probe.getsockname()[1]
        try:
            _hold(host, port)
        except OSError:
            continue  # taken in between: the next one
        return port
    raise OSError(f"no free TCP port on {host or 'this host'} among {ports}")


def _hold(host: str, port: int) -> None:
    """Leave `port` in TIME_WAIT, as `free_port` says. The listener needs SO_REUSEADDR:
    the TIME_WAIT side inherits it, and only then may a later SO_REUSEADDR bind take it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((host, port))
        server.listen(1)
        with socket.create_connection((host if host not in ("", "0.0.0.0") else "127.0.0.1", port), timeout=10):
            accepted, _ = server.accept()
            accepted.close()  # the side that closes first keeps the TIME_WAIT: ours


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
