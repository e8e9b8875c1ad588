"""Adaptive campaigns: how many seeds each cell runs, decided look by look.

A look comes when every run asked for so far has an outcome (a barrier), so no decision
depends on which run finished first. At a look every open comparison (a candidate
recipe against the reference at one batch size) gets its repeated confidence interval
(`analysis/sequential.py`); one that answers the campaign's question (a verdict,
equivalence, a precision) stops, as does one no answer is within reach of with
`futility` (`orchestrator/adaptive_answers.py`), and the others get `step` more seeds on
the arms whose intervals shrink most per unit of cost (a Neyman-type rule: each arm's
observed spread, its share of runs that converge, its cost per run in tokens times ranks,
and the comparisons it serves, the reference serving all of its batch size, and running
only while one of them is open).

Where the looks stand (`AdaptiveState`) is a pure function of the outcomes recorded so
far: `replay_looks` replays every look from the first, so an orchestrator killed anywhere
and restarted decides the same, runs no seed twice and drops none. A cell's seeds are
always 0..k-1, as MLPerf scores runs. On a model axis a cell's recipe is `<model>/<recipe>`
(`arm_of`) and each model's candidates are compared with that model's reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rcpforge.analysis.rcp import trimmed_count
from rcpforge.analysis.sequential import (
    CALIBRATED_DF_SHIFT,
    SequentialInterval,
    arm,
    boundaries,
    factor_interval,
    information,
)
from rcpforge.orchestrator.adaptive_answers import answer, bound_text, futile
from rcpforge.orchestrator.ledger import LedgerEntry
from rcpforge.sweeps.adaptive_spec import AdaptiveSpec
from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import Campaign
from rcpforge.trainers.contract import RunSpec, RunStatus
from rcpforge.trainers.contract.schema import (
    METRIC_CORE_HOURS,
    METRIC_GPU_HOURS,
    METRIC_SAMPLES_TO_TARGET,
    METRIC_TOKENS_TRAINED,
)

Cell = tuple[str, int]  # (recipe, batch size)

# Why a cell stopped; the detail says the numbers.
ANSWERED, COST_CAP, MAX_SEEDS, FAILED_SEED = "answered", "cost cap", "max seeds", "failed seed"
FUTILE = "futile"  # no goal of the question is within reach of max_seeds (adaptive.futility)


@dataclass(frozen=True)
class Outcome:
    value: float  # samples (or epochs) to target in the checker's unit; inf: no convergence
    tokens: float = 0.0  # tokens trained, times the run's ranks
    gpu_hours: float = 0.0


@dataclass(frozen=True)
class GaveUp:
    """A seed that failed on every attempt it had."""

    error: str = ""


@dataclass(frozen=True)
class Stop:
    reason: str  # ANSWERED, FUTILE, COST_CAP, MAX_SEEDS or FAILED_SEED
    detail: str
    look: int


@dataclass(frozen=True)
class LookEntry:
    look: int
    candidate: str
    batch_size: int
    interval: SequentialInterval
    decision: str | None  # the answer, where this look gave one


@dataclass
class AdaptiveState:
    """Where an adaptive campaign's looks stand: the seeds each cell runs, the cells
    stopped and why, every look's intervals. Not a plan: the ledger's plan
    (`orchestrator/ledger.py`) takes the runs these seeds ask for as its desired runs."""

    reference: str
    seeds: dict[Cell, int]  # the seeds each cell needs now: 0 .. seeds-1
    stops: dict[Cell, Stop]
    looks: list[LookEntry] = field(default_factory=list)
    waiting: int = 0  # runs without an outcome that the next look waits for

    @property
    def finished(self) -> bool:
        return len(self.stops) == len(self.seeds)

    def latest(self) -> dict[Cell, LookEntry]:
        """Each candidate cell's interval at its last look."""
        return {(e.candidate, e.batch_size): e for e in self.looks}


Outcomes = dict[Cell, list["Outcome | GaveUp | None"]]  # by seed; None: no outcome yet


def replay_looks(settings: AdaptiveSpec, recipes: list[str], batch_sizes: list[int], outcomes: Outcomes, *,
                 max_seeds: int, trim: int = 1, references: dict[str, str] | None = None) -> AdaptiveState:
    """`references`: each recipe's reference (a model's own, on a model axis); default the campaign's."""
    reference = settings.reference or recipes[0]
    cells = [(r, b) for r in recipes for b in batch_sizes]
    state = AdaptiveState(reference, {c: settings.min_seeds for c in cells}, {})
    ref_of = references or {r: reference for r in recipes}
    comparisons = {(r, b): (ref_of[r], b) for r in recipes if r != ref_of[r] for b in batch_sizes}
    open_ = dict(comparisons)  # candidate cell -> its reference cell
    times: dict[Cell, list[float]] = {c: [] for c in comparisons}
    full = information(max_seeds, max_seeds, trim)
    look = 0

    def seen(cell: Cell) -> list:
        got = outcomes.get(cell, [])
        return [got[s] if s < len(got) else None for s in range(state.seeds[cell])]

    def close(cand: Cell, reason: str, detail: str) -> None:
        del open_[cand]
        state.stops[cand] = Stop(reason, detail, look)

    while open_:
        # The barrier, and seeds that failed for good: never skipped, they end their cell.
        for cand, ref in list(open_.items()):
            for cell, role in ((ref, "reference"), (cand, "candidate")):
                gave_up = [s for s, o in enumerate(seen(cell)) if isinstance(o, GaveUp)]
                if gave_up:
                    error = outcomes[cell][gave_up[0]].error  # type: ignore[union-attr]
                    close(cand, FAILED_SEED, f"{role} {cell[0]} seed {gave_up[0]} failed with no attempts "
                                             f"left{': ' + error if error else ''}; rerun with --retry-failed")
                    break
        active = {c for pair in open_.items() for c in pair}
        waiting = sum(o is None for cell in active for o in seen(cell))
        if waiting:
            state.waiting = waiting
            break
        if not open_:
            break
        look += 1
        values = {cell: [o.value for o in seen(cell)] for cell in active}  # type: ignore[union-attr]
        spreads = _allocation_spreads(state, open_, outcomes, trim) if settings.futility else {}
        for cand, ref in sorted(open_.items()):
            t = information(state.seeds[cand], state.seeds[ref], trim) / full
            if not times[cand] or t > times[cand][-1] + 1e-9:
                times[cand].append(min(t, 1.0))
            z = boundaries(times[cand], 1 - settings.confidence, settings.spending)[-1]
            interval = factor_interval(values[cand], values[ref], z, trim=trim,
                                       df_shift=CALIBRATED_DF_SHIFT if settings.spending == "calibrated" else 0.0)
            decision = answer(interval, settings)
            state.looks.append(LookEntry(look, cand[0], cand[1], interval, decision))
            if decision:
                close(cand, ANSWERED, decision)
            elif settings.futility and (why := futile(values[cand], values[ref], (spreads[cand], spreads[ref]),
                                                      times[cand], settings, max_seeds, trim)):
                close(cand, FUTILE, why)
        if open_:
            _extend(state, open_, outcomes, settings, max_seeds, trim, close)
    _stop_references(state, comparisons, look)
    return state


def interval_text(interval: SequentialInterval) -> str:
    """"1.0312 (0.9801 .. 1.0850, 97.4% look)", or why there is no interval yet."""
    point = "n/a" if interval.factor is None else f"{interval.factor:.4f}"
    if interval.low is None and interval.high is None:
        return f"{point} (no interval: {interval.reason})"
    return f"{point} ({bound_text(interval.low)} .. {bound_text(interval.high)}, {interval.level:.1%} look)"


def _extend(state: AdaptiveState, open_: dict[Cell, Cell], outcomes: Outcomes, settings: AdaptiveSpec,
            max_seeds: int, trim: int, close) -> None:
    """Give `step` seeds to each open comparison's arms that shrink its interval most per
    unit of cost (within half the best arm's gain), within max_seeds and the cost cap."""
    spread = _allocation_spreads(state, open_, outcomes, trim)
    cost = {cell: _cost_per_run(outcomes[cell][:state.seeds[cell]], settings) for cell in spread}
    converging = {cell: _converging_share(outcomes[cell][:state.seeds[cell]]) for cell in spread}

    def variance(cell: Cell, extra: int = 0) -> float:
        # a run that does not converge adds no information on the factor: count the share that do
        return spread[cell] / max((state.seeds[cell] + extra) * converging[cell] - 2 * trim, 0.5)

    def shrink(cell: Cell) -> float:  # summed relative variance reduction over the comparisons it serves
        return sum((variance(cell) - variance(cell, settings.step)) / (variance(c) + variance(r))
                   for c, r in open_.items() if cell in (c, r))

    gain = {cell: shrink(cell) / (settings.step * cost[cell]) for cell in spread}
    wanted: dict[Cell, list[Cell]] = {}  # arm -> the comparisons that asked for it
    for cand, ref in sorted(open_.items()):
        arms = [c for c in (cand, ref) if state.seeds[c] < max_seeds]
        # Neither arm runs ahead of the other by more than half again: an arm that looked
        # tight on its first few runs must not be starved on that look alone.
        behind = [a for a in arms if state.seeds[a] * 3 < state.seeds[cand if a == ref else ref] * 2]
        arms = behind or arms
        if not arms:
            close(cand, MAX_SEEDS, f"{max_seeds} runs per cell, the most adaptive.max_seeds allows")
            continue
        best = max(gain[a] for a in arms)
        for a in arms:
            if gain[a] >= best / 2:
                wanted.setdefault(a, []).append(cand)
    granted = _within_cap(state, wanted, gain, outcomes, settings, max_seeds)
    for cand in sorted(open_):
        if not any(cand in wanted.get(a, []) and a in granted for a in (cand, open_[cand])):
            close(cand, COST_CAP, _cap_text(settings))
    for a in granted:
        state.seeds[a] = min(max_seeds, state.seeds[a] + settings.step)


SHRINK_RUNS = 10  # pseudo-runs of the batch size's pooled spread in each arm's allocation spread


def _allocation_spreads(state: AdaptiveState, open_: dict[Cell, Cell], outcomes: Outcomes,
                        trim: int) -> dict[Cell, float]:
    """Each open arm's spread for allocation: its own, shrunk toward its batch size's
    pooled spread by SHRINK_RUNS pseudo-runs, since a spread from five runs is noisy and
    the arms of a batch size differ in it far less than such estimates do."""
    own: dict[Cell, tuple[float, int]] = {}
    for cell in {c for pair in open_.items() for c in pair}:
        vals = [o.value for o in outcomes[cell][:state.seeds[cell]]]  # type: ignore[union-attr]
        finite = [v for v in vals if math.isfinite(v)] or [1.0]
        summary = arm(vals, trim, max(finite))
        own[cell] = (summary.spread, summary.kept) if summary and summary.variance_term > 0 else (0.0, 0)
    pooled: dict[int, float] = {}
    for bs in {c[1] for c in own}:
        weights = [(s, k) for c, (s, k) in own.items() if c[1] == bs and k > 0]
        pooled[bs] = sum(s * k for s, k in weights) / sum(k for _, k in weights) if weights else 1.0
    return {c: (s * k + pooled[c[1]] * SHRINK_RUNS) / (k + SHRINK_RUNS) or 1.0 for c, (s, k) in own.items()}


def _converging_share(seen: list) -> float:
    """The share of an arm's runs expected to converge: its record so far, shrunk toward
    all converging by one pseudo-run (a first failure is no rate)."""
    done = [o for o in seen if isinstance(o, Outcome)]
    return (sum(math.isfinite(o.value) for o in done) + 1) / (len(done) + 1)


def _cost_per_run(seen: list, settings: AdaptiveSpec) -> float:
    """What allocation weighs a run by: tokens x ranks, or GPU-hours where only they are
    capped; 1 before anything is known."""
    unit = "gpu_hours" if settings.cost_cap.gpu_hours is not None and settings.cost_cap.tokens is None else "tokens"
    return unit_cost(seen, unit) or 1.0


def _within_cap(state: AdaptiveState, wanted: dict[Cell, list[Cell]], gain: dict[Cell, float],
                outcomes: Outcomes, settings: AdaptiveSpec, max_seeds: int) -> list[Cell]:
    """The wanted arms, best gain first, while the projected cost stays within every cap."""
    caps = {u: c for u, c in (("tokens", settings.cost_cap.tokens), ("gpu_hours", settings.cost_cap.gpu_hours))
            if c is not None}
    if not caps:
        return sorted(wanted)
    spent = {u: sum(getattr(o, u) for cell, seen in outcomes.items() for o in seen[:state.seeds.get(cell, 0)]
                    if isinstance(o, Outcome)) for u in caps}
    per_run = {u: {cell: unit_cost(outcomes[cell][:state.seeds[cell]], u) for cell in wanted} for u in caps}
    granted = []
    for cell in sorted(wanted, key=lambda c: (-gain[c], c)):
        extra = min(max_seeds, state.seeds[cell] + settings.step) - state.seeds[cell]
        if all(spent[u] + extra * per_run[u][cell] <= caps[u] for u in caps):
            granted.append(cell)
            for u in caps:
                spent[u] += extra * per_run[u][cell]
    return granted


def unit_cost(seen: list, unit: str) -> float:
    """The mean `unit` (tokens or gpu_hours) of the outcomes among `seen`; 0 for none."""
    spent = [getattr(o, unit) for o in seen if isinstance(o, Outcome)]
    return sum(spent) / len(spent) if spent else 0.0


def _cap_text(settings: AdaptiveSpec) -> str:
    caps = [f"{v:g} {u.replace('_', '-')}" for u, v in settings.cost_cap.model_dump().items() if v is not None]
    return f"the next step would pass adaptive.cost_cap ({', '.join(caps)})"


def _stop_references(state: AdaptiveState, comparisons: dict[Cell, Cell], look: int) -> None:
    """A reference cell stops once every comparison it serves has, for the reason of the
    one that stopped last (the most serious one among those of that look)."""
    severity = [ANSWERED, FUTILE, MAX_SEEDS, COST_CAP, FAILED_SEED]
    for ref in set(comparisons.values()):
        served = {c: state.stops.get(c) for c, r in comparisons.items() if r == ref}
        if not all(served.values()):
            continue
        stops = [(s, c) for c, s in served.items() if s is not None]
        last, _ = max(stops, key=lambda sc: (sc[0].look, severity.index(sc[0].reason)))
        each = "; ".join(f"{c[0]}: {s.reason}" for s, c in sorted(stops, key=lambda sc: sc[1]))
        state.stops[ref] = Stop(last.reason, f"every comparison with it stopped ({each})", last.look)


# --- a campaign's looks, from its ledger ------------------------------------------------

def campaign_outcomes(campaign: Campaign, ledger: dict[str, LedgerEntry], retry_failed: bool = False) -> Outcomes:
    """Each cell's outcomes by seed, as the ledger has them: samples to target in the
    checker's unit (inf for not converged or diverged), a failed seed with no attempts
    left (unless `retry_failed`: it is launched again), None for no outcome yet."""
    outcomes: Outcomes = {}
    for spec in expand(campaign):
        entry = ledger.get(spec.run_key)
        outcomes.setdefault((arm_of(spec.model, spec.recipe), spec.batch_size), []).append(
            _outcome(entry, campaign, retry_failed) if entry is not None else None)
    return outcomes


def _outcome(entry: LedgerEntry, campaign: Campaign, retry_failed: bool) -> Outcome | GaveUp | None:
    if entry.status is RunStatus.failed and entry.charged >= campaign.backend.max_attempts and not retry_failed:
        return GaveUp()
    if not entry.status.is_outcome:
        return None
    m = entry.metrics
    value = m.get(METRIC_SAMPLES_TO_TARGET, math.inf) if entry.status is RunStatus.converged else math.inf
    hours = m.get(METRIC_GPU_HOURS, m.get(METRIC_CORE_HOURS, 0.0))
    return Outcome(float(value), tokens=m.get(METRIC_TOKENS_TRAINED, 0.0) * campaign.launch.world_size,
                   gpu_hours=float(hours))


def campaign_looks(campaign: Campaign, ledger: dict[str, LedgerEntry], retry_failed: bool = False) -> AdaptiveState:
    assert campaign.adaptive is not None
    models = [m.name for m in campaign.models or []] or [""]
    references = {arm_of(m, r.name): arm_of(m, campaign.reference) for m in models for r in campaign.recipes}
    state = replay_looks(campaign.adaptive, list(references), campaign.batch_sizes,
                         campaign_outcomes(campaign, ledger, retry_failed), max_seeds=campaign.adaptive_max_seeds,
                         trim=trimmed_count(campaign.benchmark), references=references)
    state.reference = campaign.reference
    return state


def arm_of(model: str, recipe: str) -> str:
    """A cell's recipe in the looks: the recipe, or `<model>/<recipe>` on a model axis."""
    return f"{model}/{recipe}" if model else recipe


def _split(label: str, key: str = "recipe") -> dict[str, str]:
    """An arm's model (on a model axis only) and recipe, as a record names them."""
    model, _, recipe = label.rpartition("/")
    return {"model": model, key: recipe} if model else {key: recipe}


def look_specs(campaign: Campaign, state: AdaptiveState) -> list[RunSpec]:
    """The runs the looks ask for so far: seeds 0..k-1 of every cell."""
    return [s for s in expand(campaign) if s.seed < state.seeds[(arm_of(s.model, s.recipe), s.batch_size)]]


def stop_facts(state: AdaptiveState) -> dict[Cell, dict]:
    """Per cell, what `status --json`, the report and factors.json say of where it stopped."""
    latest = state.latest()
    out = {}
    for cell, seeds in state.seeds.items():
        stop = state.stops.get(cell)
        facts: dict = {"seeds": seeds, "stop_reason": stop.reason if stop else None,
                       "stop_detail": stop.detail if stop else None, "stopped_at_look": stop.look if stop else None}
        if cell in latest:
            iv = latest[cell].interval
            facts["sequential"] = {"factor": iv.factor, "low": iv.low, "high": iv.high, "level": iv.level,
                                   "half_width": iv.half_width, "reason": iv.reason}
        out[cell] = facts
    return out


def adaptive_record(campaign: Campaign, state: AdaptiveState) -> dict:
    """An adaptive campaign's looks and stops as plain values, for the analysis package
    (factors.json, summary.md, the report), which reads no campaign file."""
    assert campaign.adaptive is not None
    cells = [{**_split(r), "batch_size": b, **{k: v for k, v in facts.items() if k != "sequential"}}
             for (r, b), facts in stop_facts(state).items()]
    looks = [{"look": e.look, **_split(e.candidate, "candidate"), "batch_size": e.batch_size,
              "runs_candidate": e.interval.runs_candidate, "runs_reference": e.interval.runs_reference,
              "factor": e.interval.factor, "low": e.interval.low, "high": e.interval.high,
              "level": e.interval.level, "half_width": e.interval.half_width, "decision": e.decision,
              "reason": e.interval.reason} for e in state.looks]
    return {"reference": state.reference, "settings": campaign.adaptive.model_dump(mode="json"),
            "max_seeds": campaign.adaptive_max_seeds, "finished": state.finished, "cells": cells, "looks": looks}


def read_adaptive_record(campaign: Campaign) -> dict | None:
    """The record from the campaign's tracking store; None for a fixed campaign."""
    if campaign.adaptive is None:
        return None
    from rcpforge.orchestrator.tracking import Tracking

    ledger = Tracking(campaign.tracking_uri, campaign.tracking.retry_s).campaign_ledger(campaign.name)
    return adaptive_record(campaign, campaign_looks(campaign, ledger))
