"""A Slurm run's compute as the cluster billed it. The worker records what the run asked
for (its ranks' GPUs, or cores, times the time it trained: `execute.cost_of`); where Slurm
keeps accounting, the orchestrator replaces that, once the run's job has ended, by the
job's allocation times its elapsed time (`cluster/slurm_billing.py`), and tags the run
with where the figure came from (`rcpforge.billed`). `status`, the cost report and an
adaptive campaign's GPU-hour cap then count what the site charges.

A run is settled again when its job changes (a new attempt is a new job); one whose job
accounting has not heard of yet is settled by the next `rcpforge run` (a detached
campaign's runs, by the run that follows them)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rcpforge.cluster.slurm_billing import Allocation, ended_allocations
from rcpforge.orchestrator.backends import SLURM_PREFIX
from rcpforge.orchestrator.ledger import LedgerEntry
from rcpforge.orchestrator.tracking import Tracking
from rcpforge.sweeps.spec import Campaign
from rcpforge.trainers.contract import RunStatus
from rcpforge.trainers.contract.schema import METRIC_CORE_HOURS, METRIC_GPU_HOURS

# How long the end of a campaign waits for accounting to hear of its last jobs (slurmdbd
# records a job's end a moment after the controller ends it).
SETTLE_WAIT_S = 20.0
_UNENDED = {RunStatus.pending, RunStatus.running, RunStatus.preempted}


def billed_job(tag: str | None) -> str | None:
    """The job a run's `rcpforge.billed` tag was settled from (`sacct <job>: ...`)."""
    if not tag or not tag.startswith("sacct "):
        return None
    return tag.split()[1].rstrip(":")


def unsettled(ledger: dict[str, LedgerEntry]) -> dict[str, LedgerEntry]:
    """Slurm job id -> the entry of each ended run whose latest job is not billed yet."""
    found = {}
    for entry in ledger.values():
        job = entry.backend_job or ""
        if job.startswith(SLURM_PREFIX) and entry.status not in _UNENDED:
            job = job.removeprefix(SLURM_PREFIX)
            if billed_job(entry.billed) != job:
                found[job] = entry
    return found


def billed_metrics(entry: LedgerEntry, allocation: Allocation) -> dict[str, float]:
    """The run's cost metric from its job's allocation: GPU-hours where it held GPUs, else
    core-hours; none where the run asked for GPUs but the site does not account them
    (`gres/gpu` missing from AccountingStorageTRES): its asked GPU-hours stand."""
    if allocation.gpus:
        return {METRIC_GPU_HOURS: allocation.gpu_hours}
    if METRIC_GPU_HOURS in entry.metrics:
        return {}
    return {METRIC_CORE_HOURS: allocation.core_hours}


def settle_billing(tracking: Tracking, experiment_id: str, wait_s: float = 0.0,
                   on_notice: Callable[[str], None] | None = None) -> int:
    """Bill every ended, unbilled Slurm run of the experiment from accounting, waiting up to
    `wait_s` for jobs accounting has not heard of yet; the number billed."""
    pending = unsettled(tracking.ledger(experiment_id))
    if not pending:
        return 0
    deadline = time.monotonic() + wait_s
    found = ended_allocations(sorted(pending))
    while found is not None and len(found) < len(pending) and time.monotonic() < deadline:
        time.sleep(1.0)
        found = ended_allocations(sorted(pending))
    if not found:  # no accounting here (the asked figures stand), or none of the jobs in it yet
        return 0
    tracking.record_billing([(pending[job].run_id, billed_metrics(pending[job], a), a.describe())
                             for job, a in sorted(found.items())])
    if on_notice is not None:
        late = len(pending) - len(found)
        on_notice(f"billing: {len(found)} runs' compute as Slurm's accounting billed it (allocation x elapsed)"
                  + (f"; {late} not in sacct yet: the next `rcpforge run` bills them" if late else ""))
    return len(found)


def bill_slurm_runs(campaign: Campaign, tracking: Tracking, experiment_id: str, wait_s: float,
                    on_notice: Callable[[str], None] | None) -> None:
    """`settle_billing` for a campaign on Slurm; nothing on another backend."""
    if campaign.backend.kind == "slurm":
        settle_billing(tracking, experiment_id, wait_s, on_notice)
