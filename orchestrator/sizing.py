"""Sizing a campaign (the `rcpforge plan` command): how many runs each comparison needs
for a precision, predicted from the runs recorded so far (or a pilot of a few seeds per
cell): per candidate recipe and batch size, the runs per recipe and the compute that
would bring its factor's interval to +-2%, +-3%, +-5%, ..., under the campaign's design
(the repeated intervals of its adaptive section, or a fixed-sample interval). A
prediction only: what a campaign launches is its plan (`orchestrator/ledger.py`)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from rcpforge.analysis.rcp import trimmed_count
from rcpforge.analysis.sequential import arm, factor_interval, runs_for_half_width
from rcpforge.orchestrator.adaptive import Outcome, campaign_outcomes, unit_cost
from rcpforge.orchestrator.ledger import LedgerEntry
from rcpforge.sweeps.spec import Campaign

PRECISIONS = (0.02, 0.03, 0.05)


@dataclass
class ComparisonSize:
    """What one comparison (a candidate against the reference at a batch size) needs."""

    candidate: str
    batch_size: int
    runs_candidate: int  # with an outcome, so far
    runs_reference: int
    factor: float | None
    cv_candidate: float | None  # the spread of the runs' logs, about their coefficient of variation
    cv_reference: float | None
    hours_per_run_candidate: float = 0.0  # mean compute of a run so far
    hours_per_run_reference: float = 0.0
    # per precision: runs per recipe (None: out of reach within adaptive.max_seeds) and
    # the compute those runs of both recipes cost
    runs: dict[str, int | None] = field(default_factory=dict)
    hours: dict[str, float | None] = field(default_factory=dict)
    # per precision out of reach within adaptive.max_seeds: the max_seeds that would reach it
    max_seeds_needed: dict[str, int | None] = field(default_factory=dict)
    reason: str | None = None  # why there is no prediction
    model: str = ""  # on a model axis, the model both recipes ran on ("" without one)

    def as_dict(self) -> dict:
        return asdict(self)


def size_comparisons(campaign: Campaign, ledger: dict[str, LedgerEntry], reference: str,
                     precisions: tuple[float, ...] = PRECISIONS) -> list[ComparisonSize]:
    trim = trimmed_count(campaign.benchmark)
    outcomes = campaign_outcomes(campaign, ledger)
    done = {cell: [o for o in seen if isinstance(o, Outcome)] for cell, seen in outcomes.items()}
    rows = []
    # On a model axis each model's candidates are compared with that model's reference,
    # under the arms' names the adaptive looks use (orchestrator/adaptive.py: "<model>/<recipe>").
    for model in [m.name for m in getattr(campaign, "models", None) or []] or [""]:
        def arm(recipe: str, model: str = model) -> str:
            return f"{model}/{recipe}" if model else recipe

        for recipe in (r.name for r in campaign.recipes if r.name != reference):
            for bs in campaign.batch_sizes:
                cand, ref = done[(arm(recipe), bs)], done[(arm(reference), bs)]
                row = _row(arm(recipe), bs, cand, ref, campaign, precisions, trim)
                row.model = model
                rows.append(row)
    return rows


def campaign_totals(rows: list[ComparisonSize], reference: str) -> dict[str, dict]:
    """Per precision, the runs and compute of the whole campaign: every candidate's runs,
    and each batch size's reference runs once (per model on a model axis), as many as its
    neediest comparison's (None where any comparison is out of reach)."""
    totals: dict[str, dict] = {}
    for goal in (rows[0].runs if rows else {}):
        if any(r.runs.get(goal) is None for r in rows):
            totals[goal] = {"runs": None, "hours": None}
            continue
        reference_runs: dict[tuple[str, int], tuple[int, float]] = {}  # (model, bs) -> (runs, compute per run)
        runs, hours = 0, 0.0
        for r in rows:
            n = r.runs[goal] or 0
            runs += n
            hours += n * r.hours_per_run_candidate
            if n >= reference_runs.get((r.model, r.batch_size), (0, 0.0))[0]:
                reference_runs[(r.model, r.batch_size)] = (n, r.hours_per_run_reference)
        runs += sum(n for n, _ in reference_runs.values())
        hours += sum(n * h for n, h in reference_runs.values())
        totals[goal] = {"runs": runs, "hours": hours}
    return totals


def _row(recipe: str, bs: int, cand: list[Outcome], ref: list[Outcome], campaign: Campaign,
         precisions: tuple[float, ...], trim: int) -> ComparisonSize:
    row = ComparisonSize(recipe, bs, len(cand), len(ref), None, None, None)
    values_c, values_r = [o.value for o in cand], [o.value for o in ref]
    finite = [v for v in (*values_c, *values_r) if math.isfinite(v)]
    a_c = arm(values_c, trim, max(finite)) if finite else None
    a_r = arm(values_r, trim, max(finite)) if finite else None
    if a_c is None or a_r is None:
        row.reason = (f"needs at least {2 * trim + 2} runs with an outcome of each recipe; run a pilot "
                      f"(rcpforge plan --pilot {2 * trim + 3})")
        return row
    row.factor = factor_interval(values_c, values_r, 1.96, trim=trim).factor
    row.cv_candidate, row.cv_reference = math.sqrt(a_c.spread), math.sqrt(a_r.spread)
    row.hours_per_run_candidate, row.hours_per_run_reference = unit_cost(cand, "gpu_hours"), unit_cost(ref, "gpu_hours")
    adaptive = campaign.adaptive
    for goal in precisions:
        key = f"{goal:g}"
        if adaptive is not None:
            n = runs_for_half_width(goal, a_c.spread, a_r.spread, min_seeds=adaptive.min_seeds, step=adaptive.step,
                                    max_seeds=campaign.adaptive_max_seeds, confidence=adaptive.confidence,
                                    spending=adaptive.spending, trim=trim)
        else:
            n = runs_for_half_width(goal, a_c.spread, a_r.spread, min_seeds=2 * trim + 2, step=1, max_seeds=None,
                                    confidence=0.95, trim=trim)
        row.runs[key] = n
        row.hours[key] = None if n is None else n * (row.hours_per_run_candidate + row.hours_per_run_reference)
        if n is None and adaptive is not None:
            row.max_seeds_needed[key] = _max_seeds_needed(goal, a_c.spread, a_r.spread, campaign, trim)
    return row


def _max_seeds_needed(goal: float, spread_c: float, spread_r: float, campaign: Campaign, trim: int) -> int | None:
    """The smallest adaptive.max_seeds (in steps from the fixed-sample need) whose last
    look reaches the goal; None beyond three times the fixed-sample need."""
    adaptive = campaign.adaptive
    assert adaptive is not None
    fixed = runs_for_half_width(goal, spread_c, spread_r, min_seeds=2 * trim + 2, step=1, max_seeds=None,
                                confidence=adaptive.confidence, trim=trim)
    if fixed is None:
        return None
    cap = max(fixed, adaptive.min_seeds)
    while cap <= 3 * fixed + adaptive.step:
        if runs_for_half_width(goal, spread_c, spread_r, min_seeds=adaptive.min_seeds, step=adaptive.step,
                               max_seeds=cap, confidence=adaptive.confidence, spending=adaptive.spending,
                               trim=trim) is not None:
            return cap
        cap += adaptive.step
    return None
