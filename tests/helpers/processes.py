"""Asking about a process by its pid, for the tests that check nothing was left running."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for whoever inherited it to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")
