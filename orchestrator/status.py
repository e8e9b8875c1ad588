"""Where a campaign stands, read back from the tracking store (and from Slurm, for runs
whose attempt is a Slurm job): per (recipe, batch size), how many runs are pending,
running, converged, not converged, diverged, failed. Works while a detached campaign is
on the cluster and from any machine that reaches the tracking store."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from orchestrator.backends import slurm_states
from orchestrator.tracking import Tracking
from sweeps.expand import expand
from sweeps.spec import Campaign
from trainers.contract import RunStatus

COLUMNS = ("pending", "running", "converged", "not_converged", "diverged", "failed")


@dataclass
class CellStatus:
    recipe: str
    batch_size: int
    runs: int = 0
    counts: Counter = field(default_factory=Counter)
    slurm: Counter = field(default_factory=Counter)  # Slurm job state -> runs

    def as_dict(self) -> dict:
        return {"recipe": self.recipe, "batch_size": self.batch_size, "runs": self.runs,
                **{c: self.counts[c] for c in COLUMNS}, "slurm": dict(sorted(self.slurm.items()))}


def _column(status: RunStatus, slurm_state: str | None) -> str:
    from cluster.slurm_states import ENDED

    if status.is_outcome or status is RunStatus.failed:
        return status.value
    if slurm_state is not None and (slurm_state in ENDED or slurm_state == "UNLISTED"):
        return "failed"  # its job ended without recording an outcome: it will be retried
    if status is RunStatus.preempted:
        return "pending"  # waits to be launched again; never an outcome
    if slurm_state == "PENDING" or slurm_state == "REQUEUED":
        return "pending"
    return status.value


def campaign_status(campaign: Campaign) -> list[CellStatus]:
    tracking = Tracking(campaign.tracking_uri, campaign.tracking.retry_s)
    exp = tracking.client.get_experiment_by_name(campaign.name)
    ledger = tracking.ledger(exp.experiment_id) if exp is not None else {}
    states = slurm_states(ledger)
    cells: dict[tuple[str, int], CellStatus] = {}
    for spec in expand(campaign):
        cell = cells.setdefault((spec.recipe, spec.batch_size), CellStatus(spec.recipe, spec.batch_size))
        cell.runs += 1
        entry = ledger.get(spec.run_key)
        if entry is None:
            cell.counts["pending"] += 1
            continue
        state = states.get(spec.run_key)
        cell.counts[_column(entry.status, state)] += 1
        if state is not None:
            cell.slurm[state] += 1
    return list(cells.values())
