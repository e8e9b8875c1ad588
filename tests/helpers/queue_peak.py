"""The most Slurm jobs listed at once while something runs: what the limits tests and
benchmarks/slurm_scale.py check a campaign's window against."""

from __future__ import annotations

import subprocess
import threading


class QueuePeak:
    """Polls squeue throughout: the most jobs (array tasks counted one by one) listed at once."""

    def __init__(self) -> None:
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            listed = subprocess.run(["squeue", "-h", "-r", "-o", "%i"], capture_output=True, text=True, timeout=30)
            if listed.returncode == 0:
                self.peak = max(self.peak, len(listed.stdout.split()))
            self._stop.wait(0.2)

    def __enter__(self) -> QueuePeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
