"""Per RCP record, what `rcp-stats` adds (issue 32): today's honest rejection rate (the
share of honest N-run submissions drawn from the record's own runs that the checker's
pruned pass rejects at its batch size; seeded Monte Carlo) and a mark for RCPs whose
runs the eval grid has squeezed: 3 or fewer distinct values, or zero spread. The campaign
report shows the same for a campaign's own RCPs (`campaign_health`)."""

from __future__ import annotations

import math

import numpy as np

from rcpforge.analysis.check import DEFAULT_RULESET
from rcpforge.analysis.policy.submitters import draw, olympic
from rcpforge.analysis.policy.thresholds import today
from rcpforge.analysis.rcp import trimmed_count
from rcpforge.analysis.rcp_set import RcpSet
from rcpforge.analysis.rcp_table import rcp_records

COARSE_DISTINCT = 3
# The campaign report's simulations per RCP: modest (the report stays fast), seeded (the
# report's --seed), a rate's standard error at most 1.1 percentage points.
REPORT_SIMS = 2_000


def coarse_mark(values) -> str | None:
    distinct = len(set(values))
    if distinct <= 1 or float(np.std(values)) == 0:
        return "zero spread"
    return f"{distinct} distinct values" if distinct <= COARSE_DISTINCT else None


def honest_rejection(values, rcp_set: RcpSet, bs, ruleset: str | None, sims: int, seed: int) -> tuple[float, float]:
    threshold = today(rcp_set, bs, ruleset)
    runs = draw(np.asarray(values, float), np.random.default_rng([seed, int(bs)]), (sims, rcp_set.submission_runs))
    rejected = ~(olympic(runs, trimmed_count(rcp_set.benchmark)) >= threshold.minimum)
    p = float(rejected.mean())
    return p, math.sqrt(p * (1 - p) / sims)


def rcp_health(rcp_set: RcpSet, ruleset: str | None, sims: int = 10_000, seed: int = 0) -> dict[str, dict]:
    """Per record name: honest_rejected (and _se; None where the record's runs or batch
    size are not numbers the checker's test can use) and coarse (the mark, or None)."""
    out = {}
    for name, record in rcp_set.full.items():
        entry: dict = {"honest_rejected": None, "honest_rejected_se": None, "coarse": None}
        try:  # fuzzed or huge run values: no warnings, a rate of nan at worst
            with np.errstate(all="ignore"):
                _entry(entry, record, rcp_set, ruleset, sims, seed)
        except (TypeError, ValueError, OverflowError, ZeroDivisionError):
            pass  # a record the checker itself could not test: its statistics row says so
        out[name] = entry
    return out


def _entry(entry: dict, record, rcp_set: RcpSet, ruleset: str | None, sims: int, seed: int) -> None:
    values = [float(v) for v in record.epochs]
    entry["coarse"] = coarse_mark(values) if values else None
    if all(math.isfinite(v) for v in values) and rcp_set.submission_runs > 2 * trimmed_count(rcp_set.benchmark):
        entry["honest_rejected"], entry["honest_rejected_se"] = honest_rejection(
            values, rcp_set, record.bs, ruleset, sims, seed)


def campaign_health(runs, recipes: list[str], benchmark: str, hparams: dict, submission_runs: int,
                    sims: int = REPORT_SIMS, seed: int = 0) -> list[dict]:
    """Per RCP record of a campaign (each recipe's complete cells, as `analyze` writes
    them, N the campaign's): recipe, batch_size, runs and `rcp_health`'s entry, the
    recipe's records tested as the checker's pruned pass tests them under the checker's
    default ruleset."""
    rows = []
    for recipe in recipes:
        records = rcp_records(runs, recipe, benchmark, hparams, submission_runs)
        if not records:
            continue
        rcp_set = RcpSet(records, benchmark, submission_runs)
        for name, entry in rcp_health(rcp_set, DEFAULT_RULESET, sims, seed).items():
            record = rcp_set.full[name]
            rows.append({"recipe": recipe, "batch_size": int(record.bs), "runs": len(record.epochs), **entry})
    return rows
