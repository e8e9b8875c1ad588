"""Asking about a process by its pid, for the tests that check nothing was left running."""

from __future__ import annotations

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
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            if int(local.rsplit(":", 1)[1], 16) == port and state == "0A":  # 0A: LISTEN
                return True
    return False
