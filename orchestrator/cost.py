"""What a campaign has cost and how long it still has to go, from its ledger: per cell
and for the campaign, the compute spent (GPU-hours, or CPU core-hours for runs without
GPUs), the wall time of its runs, and an ETA that counts the progress of running runs.

The ETA's arithmetic (docs/clusters.md, "Cost and ETA", and docs/monitoring.md say it in words):
- a run's *typical tokens* is the median tokens trained by the cell's finished runs (the
  campaign's when the cell has none yet, the token budget when nothing has finished);
- its *seconds per token* is the cell's finished runs' wall time over their tokens (the
  campaign's when the cell has none); without any finished run there is no ETA (null);
- a run still to do needs (typical tokens - tokens it has trained so far) x seconds per
  token of run time, never less than 0;
- the ETA is that run time over the runs training at once: those running now, or when
  none is, the local backend's workers (1 for a cluster, whose slots rcpforge cannot see).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from rcpforge.trainers.contract.schema import METRIC_CORE_HOURS, METRIC_GPU_HOURS, METRIC_TOKENS_TRAINED, METRIC_WALL_S


@dataclass
class CellCost:
    """One cell's finished runs (tokens trained, wall s) and its runs still to do (the
    tokens each has trained so far), with the compute spent."""

    finished: list[tuple[float, float]] = field(default_factory=list)
    to_do: list[float] = field(default_factory=list)
    gpu_hours: float = 0.0
    core_hours: float = 0.0
    wall_s: float = 0.0

    def add_finished(self, metrics: dict[str, float]) -> None:
        tokens, wall = metrics.get(METRIC_TOKENS_TRAINED), metrics.get(METRIC_WALL_S)
        if tokens is not None and wall is not None:
            self.finished.append((tokens, wall))
            self.wall_s += wall
        self.gpu_hours += metrics.get(METRIC_GPU_HOURS, 0.0)
        self.core_hours += metrics.get(METRIC_CORE_HOURS, 0.0)


def _typical_tokens(finished: list[tuple[float, float]]) -> float | None:
    return statistics.median(t for t, _ in finished) if finished else None


def _seconds_per_token(finished: list[tuple[float, float]]) -> float | None:
    tokens = sum(t for t, _ in finished)
    return sum(w for _, w in finished) / tokens if tokens > 0 else None


def estimates(cells: list[CellCost], max_tokens: int, concurrency: int) -> tuple[list[dict], dict]:
    """Per cell and for the campaign: cost, remaining run time and ETA (JSON-ready)."""
    everything = [f for c in cells for f in c.finished]
    campaign_typical = _typical_tokens(everything) or float(max_tokens)
    campaign_rate = _seconds_per_token(everything)
    per_cell = []
    for c in cells:
        typical = _typical_tokens(c.finished) or campaign_typical
        rate = _seconds_per_token(c.finished) or campaign_rate
        if not c.to_do:
            remaining: float | None = 0.0
        else:
            remaining = None if rate is None else sum(max(0.0, typical - done) for done in c.to_do) * rate
        per_cell.append(_figures(c.gpu_hours, c.core_hours, c.wall_s, remaining, concurrency) | {
            "typical_tokens": typical, "runs_to_do": len(c.to_do)})
    remainders = [p["remaining_run_hours"] for p in per_cell]
    total_remaining = None if any(r is None for r in remainders) else sum(remainders) * 3600.0
    totals = _figures(sum(c.gpu_hours for c in cells), sum(c.core_hours for c in cells),
                      sum(c.wall_s for c in cells), total_remaining, concurrency)
    totals["runs_to_do"] = sum(len(c.to_do) for c in cells)
    totals["concurrency"] = concurrency
    return per_cell, totals


def compute_unit(campaign) -> str:
    """What the campaign's runs spend: GPU-hours when they hold GPUs, else CPU core-hours."""
    return "gpu_hours" if campaign.launch.gpus_per_process else "core_hours"


def usd_per_hour(campaign) -> float | None:
    """The price of an hour of the campaign's compute unit (its `cost:` section,
    sweeps/cost_spec.py); None without prices."""
    if campaign.cost is None:
        return None
    return campaign.cost.price(campaign.launch.gpus_per_process, campaign.launch.gpu_type)


def add_dollars(per_cell: list[dict], totals: dict, unit: str, price: float) -> None:
    """`cost_usd` beside the hours: each cell's `unit` spent x the price, and the
    campaign's, the sum of its cells'."""
    for figures in per_cell:
        figures["cost_usd"] = figures[unit] * price
    totals["cost_usd"] = sum(f["cost_usd"] for f in per_cell)


def plan_dollars(rows: list[dict], totals: dict[str, dict], price: float) -> None:
    """`plan`'s predictions in US dollars: per precision, each comparison's and the
    campaign's predicted compute x the price (None where the precision is out of reach)."""
    for row in rows:
        row["cost_usd"] = {goal: None if h is None else h * price for goal, h in row["hours"].items()}
    for total in totals.values():
        total["cost_usd"] = None if total["hours"] is None else total["hours"] * price


def _figures(gpu_hours: float, core_hours: float, wall_s: float, remaining_s: float | None,
             concurrency: int) -> dict:
    return {
        "gpu_hours": gpu_hours, "core_hours": core_hours, "run_wall_hours": wall_s / 3600.0,
        "remaining_run_hours": None if remaining_s is None else remaining_s / 3600.0,
        "eta_s": None if remaining_s is None else remaining_s / max(1, concurrency),
    }
