"""Asking about a process by its pid, for the tests that check nothing was left running."""

from __future__ import annotations

import os
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """Some thread of the process still runs (not a zombie waiting to be reaped).

    Every thread, not the leader's state alone: a killed multi-threaded process (a Ray
    worker) shows its leader as a zombie while its other threads are still exiting, and
    its files (a rendezvous listener) are closed only when the last thread is gone."""
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return False
    for thread in threads:
        try:
            state = (thread / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state not in ("Z", "X"):
            return True
    return False


def listening(port: int) -> bool:
    """Some socket on this machine listens on TCP `port` (from /proc/net/tcp and tcp6).

    Not "can this port be bound": the free ports a run's rendezvous is given come from the
    ephemeral range, where any other process's outgoing connection (Ray's, MLflow's, the
    database's) may take the same number as its local port for a while, which makes a bind
    fail though nobody holds the port as a rendezvous."""
    return bool(_listening_sockets(port))


def _listening_sockets(port: int) -> set[str]:
    """The listening sockets on TCP `port`, as a process's fd links name them (socket:[inode])."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            fields = row.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(f"socket:[{fields[9]}]")
    return found


def listeners(port: int) -> dict[int, str]:
    """The processes holding a socket that listens on TCP `port`: pid -> command line."""
    sockets = _listening_sockets(port)
    found = {}
    for entry in Path("/proc").iterdir() if sockets else ():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in sockets for fd in (entry / "fd").iterdir()):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:300]
        except OSError:
            continue
    return found


def port_freed(port: int, within_s: float = 30.0) -> dict[int, str]:
    """Wait until nobody listens on `port`; who still does after `within_s` (empty: freed).

    A wait, not one look: the port of a dead gang is a free ephemeral port again, and a
    test running beside this one in another worker may bind the same number for a moment
    (its own gang, a server); a listener the gang left behind holds it for good."""
    deadline = time.monotonic() + within_s
    while listening(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    return listeners(port) if listening(port) else {}
