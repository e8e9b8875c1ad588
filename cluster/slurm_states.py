"""Slurm job states without an accounting database: `squeue -t all` lists finished jobs
too, for Slurm's MinJobAge (300 s by default). Plain subprocess calls, no submitit, so
the orchestrator and `rcpforge status` can ask cheaply."""

from __future__ import annotations

import shutil
import subprocess

# States after which no result will come (a requeued job goes back to PENDING instead).
ENDED = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
    "BOOT_FAIL", "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED",
})


def job_states(job_ids: list[str]) -> dict[str, str]:
    """Job id (`123` or `123_4`) -> Slurm state, for the jobs Slurm still lists."""
    if not job_ids or shutil.which("squeue") is None:
        return {}
    bases = sorted({j.split("_")[0] for j in job_ids})
    proc = subprocess.run(
        ["squeue", "-h", "-r", "-t", "all", "-j", ",".join(bases), "-o", "%i|%T"],
        capture_output=True, text=True, timeout=30,
    )
    states = {}
    for line in proc.stdout.splitlines():
        job_id, _, state = line.partition("|")
        states[job_id.strip()] = state.strip()
    return states
