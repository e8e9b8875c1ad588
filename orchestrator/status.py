"""Where a campaign stands, read back from the tracking store (and from Slurm, for runs
whose attempt is a Slurm job): per (recipe, batch size), how many runs are pending,
running, converged, not converged, diverged, failed. Works while a detached campaign is
on the cluster and from any machine that reaches the tracking store. A campaign with a
model axis has a cell per (model, recipe, batch size)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rcpforge.orchestrator.adaptive import arm_of, campaign_looks, look_specs, stop_facts
from rcpforge.orchestrator.backends import ledger_and_states, slurm_pending_reasons
from rcpforge.orchestrator.cost import CellCost, add_dollars, compute_unit, estimates, usd_per_hour
from rcpforge.orchestrator.failfast import reason_line
from rcpforge.orchestrator.ledger import LedgerEntry
from rcpforge.orchestrator.tracking import Tracking
from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import Campaign
from rcpforge.trainers.contract import RunStatus

COLUMNS = ("pending", "running", "converged", "not_converged", "diverged", "failed")


@dataclass
class CellStatus:
    recipe: str
    batch_size: int
    runs: int = 0
    counts: Counter = field(default_factory=Counter)
    slurm: Counter = field(default_factory=Counter)  # Slurm job state -> runs
    # Why Slurm keeps the cell's pending jobs waiting (squeue's reason) -> runs: a limit
    # (QOSMaxJobsPerUserLimit, AssocGrpGRES), Resources, Priority, ...
    waiting: Counter = field(default_factory=Counter)
    cost: CellCost = field(default_factory=CellCost)
    # Cost and ETA figures (orchestrator/cost.py), filled by `campaign_status`.
    estimate: dict = field(default_factory=dict)
    # An adaptive campaign's: the seeds the cell has so far, its stop reason (None while
    # it goes on) and its last interval (orchestrator/adaptive.py `stop_facts`).
    adaptive: dict = field(default_factory=dict)
    # Runs of the cell in the store that this campaign file does not plan (imported, or
    # made by an earlier version of the file), by status: `analyze` counts them.
    outside: Counter = field(default_factory=Counter)
    # Its running runs' latest eval point: (run name, tokens, target metric's value or
    # None before the first eval); what `status --watch` shows, not in the JSON.
    latest: list[tuple[str, float, float | None]] = field(default_factory=list)
    model: str = ""  # "" without a model axis
    # Its runs per GPU name they ran on (`rcpforge.accelerator`): more than one is flagged.
    accelerators: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict:
        return {"model": self.model, "recipe": self.recipe, "batch_size": self.batch_size, "runs": self.runs,
                **{c: self.counts[c] for c in COLUMNS}, "slurm": dict(sorted(self.slurm.items())),
                "slurm_pending_reasons": dict(sorted(self.waiting.items())),
                "accelerators": dict(sorted(self.accelerators.items())),
                "outside_plan": dict(sorted(self.outside.items())), **self.estimate, **self.adaptive}


@dataclass
class CampaignStatus:
    cells: list[CellStatus]
    # The campaign's cost and ETA (orchestrator/cost.py).
    totals: dict
    world_size: int
    # Each run recorded failed: its name, cell, attempts, kind of error and the line of
    # its error that says what is wrong (orchestrator/failfast.py `reason_line`).
    failures: list[dict] = field(default_factory=list)


def failure_of(run_name: str, entry: LedgerEntry) -> dict:
    return {"run": run_name, "run_key": entry.run_key, "model": entry.model, "recipe": entry.recipe,
            "batch_size": entry.batch_size,
            "attempts": entry.attempts, "kind": entry.error_kind, "reason": reason_line(entry.error)}


def _column(status: RunStatus, slurm_state: str | None) -> str:
    from rcpforge.cluster.slurm_states import ENDED

    if status.is_outcome or status is RunStatus.failed:
        return status.value
    if slurm_state is not None and (slurm_state in ENDED or slurm_state == "UNLISTED"):
        # Its job ended without an outcome: it failed (it will be retried), unless the store
        # holds it pending and the job was cancelled or is gone, as a Ctrl-C of its
        # orchestrator leaves it (the job cancelled, the run put back): launched again.
        if status is RunStatus.pending and slurm_state in ("CANCELLED", "UNLISTED"):
            return "pending"
        return "failed"
    if status is RunStatus.preempted:
        return "pending"  # waits to be launched again; never an outcome
    if slurm_state == "PENDING" or slurm_state == "REQUEUED":
        return "pending"
    return status.value


def campaign_status(campaign: Campaign) -> CampaignStatus:
    tracking = Tracking(campaign.tracking_uri, campaign.tracking.retry_s)
    ledger, states = ledger_and_states(lambda: tracking.campaign_ledger(campaign.name))
    reasons = slurm_pending_reasons(ledger, states)
    cells: dict[tuple[str, str, int], CellStatus] = {}
    running = 0
    failures: list[dict] = []
    specs, stops = expand(campaign), {}
    latest = _last_points(campaign, [e.run_id for e in ledger.values() if e.status is RunStatus.running])
    if campaign.adaptive is not None:  # the runs its looks asked for so far, not max_seeds of each cell
        looked = campaign_looks(campaign, ledger)
        specs, stops = look_specs(campaign, looked), stop_facts(looked)
    for spec in specs:
        cell = cells.setdefault((spec.model, spec.recipe, spec.batch_size),
                                CellStatus(spec.recipe, spec.batch_size, model=spec.model,
                                           adaptive=stops.get((arm_of(spec.model, spec.recipe), spec.batch_size), {})))
        cell.runs += 1
        entry = ledger.get(spec.run_key)
        if entry is None:
            cell.counts["pending"] += 1
            cell.cost.to_do.append(0.0)
            continue
        state = states.get(spec.run_key)
        column = _column(entry.status, state)
        cell.counts[column] += 1
        if entry.status is RunStatus.failed:
            failures.append(failure_of(spec.run_name, entry))
        if state is not None:
            cell.slurm[state] += 1
        if spec.run_key in reasons:
            cell.waiting[reasons[spec.run_key]] += 1
        if entry.accelerator:
            cell.accelerators[entry.accelerator] += 1
        if entry.status.is_outcome:
            cell.cost.add_finished(entry.metrics)
        if column == "running":
            running += 1
            tokens, value = latest.get(entry.run_id, (0.0, None))
            cell.latest.append((spec.run_name, tokens, value))
            cell.cost.to_do.append(tokens)
        elif not entry.status.is_outcome and not (
                column == "failed" and entry.charged >= campaign.backend.max_attempts):
            cell.cost.to_do.append(0.0)
    for key in outside_plan(campaign, ledger):
        entry = ledger[key]
        cells.setdefault((entry.model, entry.recipe, entry.batch_size),
                         CellStatus(entry.recipe, entry.batch_size, model=entry.model)).outside[entry.status.value] += 1
    listed = sorted(cells.values(), key=lambda c: (c.model, c.recipe, c.batch_size)) if any(
        c.outside for c in cells.values()) else list(cells.values())
    slots = running or (campaign.backend.workers if campaign.backend.kind == "local" else 1)
    per_cell, totals = estimates([c.cost for c in listed], campaign.budget.max_tokens, slots)
    if (price := usd_per_hour(campaign)) is not None:
        add_dollars(per_cell, totals, compute_unit(campaign), price)
    for cell, figures in zip(listed, per_cell, strict=True):
        cell.estimate = figures
    return CampaignStatus(listed, totals, campaign.launch.world_size, failures)


def outside_plan(campaign: Campaign, run_keys) -> list[str]:
    """The run keys in the store that this campaign file does not plan: runs imported into
    its experiment, or made by an earlier version of the file (other settings, other
    keys). The analysis counts every run of the experiment, so status shows them too."""
    planned = {spec.run_key for spec in expand(campaign)}
    return sorted(set(run_keys) - planned)


def _last_points(campaign: Campaign, run_ids: list[str]) -> dict[str, tuple[float, float | None]]:
    """The running runs' progress: each one's step (tokens) and value of its last eval
    point, read in bulk as the report reads curves (`rcpforge.analysis.curves`)."""
    from rcpforge.analysis.curves import load_curves

    if not run_ids:
        return {}
    curves = load_curves(campaign.tracking_uri, campaign.name, [campaign.target.metric], run_ids=run_ids)
    last: dict[str, tuple[float, float | None]] = {}
    for run_id, tokens, value in zip(*(curves[c].to_pylist() for c in ("run_id", "tokens", "value")), strict=True):
        if tokens is not None and tokens >= last.get(run_id, (-1.0, None))[0]:
            last[run_id] = (float(tokens), float(value))
    return last
