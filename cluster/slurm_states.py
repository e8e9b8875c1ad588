"""Asking Slurm, cheaply (plain subprocess calls, no submitit): is it there, which
partitions does it have, and job states: `squeue -t all` (live jobs, and finished ones
for Slurm's MinJobAge, 300 s by default), then, for the jobs squeue no longer lists,
`sacct` where the cluster has an accounting database (slurmdbd). A job preempted for
good (PREEMPTED) has ended; one that Slurm requeues has not (see `ENDED`)."""

from __future__ import annotations

import shutil
import subprocess

from rcpforge.cluster.backend import BackendError

# States after which no result will come (a requeued job goes back to PENDING instead).
# PREEMPTED is the controller's state of a job preempted for good (PreemptMode=CANCEL, or
# REQUEUE for a job that cannot be requeued): a job Slurm requeues reads COMPLETING, then
# PENDING, in squeue, never PREEMPTED (seen on Slurm 22.05, see `job_states` for sacct).
ENDED = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
    "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED", "PREEMPTED",
})
# A job that sacct says was PREEMPTED while the controller did not answer: it may be
# pending again, requeued; not ended until squeue says so.
MAYBE_REQUEUED = "MAYBE_REQUEUED"


def job_states(job_ids: list[str]) -> dict[str, str]:
    """Job id (`123` or `123_4`) -> Slurm state, for the jobs Slurm still lists or its
    accounting database remembers (all that sacct says where squeue gave no answer)."""
    answered = asked_job_states(job_ids)
    if answered is not None:
        return answered
    return _settled(sacct_states(sorted({j.split("_")[0] for j in job_ids})), answered=False)


def asked_job_states(job_ids: list[str]) -> dict[str, str] | None:
    """As `job_states`, but None when squeue gave no answer (slurmctld busy or out of
    reach): a job squeue could not be asked about is not a job Slurm has forgotten."""
    if not job_ids or shutil.which("squeue") is None:
        return {}
    bases = sorted({j.split("_")[0] for j in job_ids})
    try:
        proc = subprocess.run(
            ["squeue", "-h", "-r", "-t", "all", "-j", ",".join(bases), "-o", "%i|%T"],
            capture_output=True, text=True, timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    # squeue -j fails with this line when it lists none of the ids: an answer, not a failure
    if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
        return None
    states = _parse(proc.stdout)
    forgotten = sorted({j.split("_")[0] for j in job_ids if j not in states})
    if not forgotten:
        return states
    # squeue is the live view; sacct only answers for what it has dropped.
    return {**_settled(sacct_states(forgotten), answered=True), **states}


def _settled(remembered: dict[str, str], answered: bool) -> dict[str, str]:
    """sacct's states of jobs squeue did not list. A job preempted and requeued keeps
    its PREEMPTED record in sacct until it starts again (the pending record comes only
    then, BeginTime later), while squeue lists it PENDING: sacct's PREEMPTED is final
    only where the controller answered and no longer has the job."""
    if answered:
        return remembered
    return {job: MAYBE_REQUEUED if state == "PREEMPTED" else state for job, state in remembered.items()}


def sacct_states(bases: list[str]) -> dict[str, str]:
    """Job id -> state from the accounting database; empty without one (`sacct` then
    exits non-zero: accounting storage disabled)."""
    if not bases or shutil.which("sacct") is None:
        return {}
    try:
        # -j without -S searches from the epoch; -X: the job, not its steps.
        proc = subprocess.run(["sacct", "-n", "-P", "-X", "-j", ",".join(bases), "-o", "JobID,State"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return _parse(proc.stdout) if proc.returncode == 0 else {}


def pending_reasons(job_ids: list[str]) -> dict[str, str]:
    """Job id -> why Slurm keeps it pending (squeue's reason: Resources, Priority,
    QOSMaxJobsPerUserLimit, AssocGrpGRES, ReqNodeNotAvail, ...), for those of `job_ids`
    that are pending; {} where squeue does not answer."""
    if not job_ids or shutil.which("squeue") is None:
        return {}
    bases = sorted({j.split("_")[0] for j in job_ids})
    try:
        proc = subprocess.run(["squeue", "-h", "-r", "-t", "PENDING", "-j", ",".join(bases), "-o", "%i|%r"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if proc.returncode != 0:
        return {}
    wanted = set(job_ids)
    reasons = {}
    for line in proc.stdout.splitlines():
        job_id, _, reason = line.partition("|")
        if job_id.strip() in wanted and reason.strip():
            reasons[job_id.strip()] = reason.strip()
    return reasons


def _parse(text: str) -> dict[str, str]:
    """`ID|STATE` lines; a state may carry words after it (`CANCELLED by 0`)."""
    states = {}
    for line in text.splitlines():
        job_id, _, state = line.partition("|")
        if state.strip():
            states[job_id.strip()] = state.split()[0]
    return states


def _run(cmd: list[str], what: str) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BackendError(f"backend: {what} failed: {err}") from None
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise BackendError(f"backend: {what} failed: {msg[-1] if msg else f'exit code {proc.returncode}'}")
    return proc.stdout


def preflight(partition: str | None) -> None:
    """What only the cluster can tell: is Slurm there, is the partition known."""
    for tool in ("sbatch", "squeue", "sinfo"):
        if shutil.which(tool) is None:
            raise BackendError(
                f"backend.kind: slurm needs `{tool}` on PATH and it is not; run on a Slurm login "
                "node, or start the development cluster with `make slurm-up`"
            )
    names = {p.strip().rstrip("*") for p in _run(["sinfo", "-h", "-o", "%P"], "sinfo").split()}
    if partition is not None and partition not in names:
        raise BackendError(
            f"backend.partition: no Slurm partition {partition!r}; partitions here: {', '.join(sorted(names)) or 'none'}"
        )
