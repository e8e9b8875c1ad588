"""Precision convergence factors: how many more samples a candidate recipe needs than
the reference recipe, per batch size, with a stratified bootstrap interval, the
probability of improvement and a verdict; the factor curve across batch size; and RCPs
derived for the candidate by scaling the reference RCPs (the WG proposal of a few runs at
the minimum and maximum batch size instead of full RCPs for a new precision); and the
candidates against each other (an ablation's variants), by the same arithmetic.

Runs count as the checker counts them: converged at their samples to target,
not_converged and diverged at 1e9 (the probability of improvement and the Mann-Whitney
test rank them last); failed, preempted and pending runs are left out. The bootstrap
treats not_converged and diverged runs as censored (infinite): a resample with more of
them than olympic scoring drops has an infinite olympic mean, and a bound that such
resamples decide is reported unbounded (`ci_low` or `ci_high` None, with
`ci_low_unbounded` or `ci_high_unbounded` and the `reason`), never as 0 or a huge ratio."""

from __future__ import annotations

import copy
import math
from collections.abc import Collection
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
from scipy import stats

from rcpforge.trainers.contract.mllog.read import NOT_CONVERGED
from rcpforge.analysis.rcp import trimmed_count
from rcpforge.analysis.rcp_set import convergence_key
from rcpforge.analysis.stats import Interval, bootstrap_ratio, mann_whitney_p, prob_improvement

OUTCOMES = ("converged", "not_converged", "diverged")


def cell_values(runs: pa.Table, not_converged: float = NOT_CONVERGED) -> dict[tuple[str, int], list[float]]:
    """(recipe, batch size) -> the outcomes' values in the checker's unit, a run that did
    not converge (or diverged) at `not_converged`."""
    cells: dict[tuple[str, int], list[float]] = {}
    for r in runs.select(["recipe", "batch_size", "status", "samples_to_target"]).to_pylist():
        if r["status"] not in OUTCOMES:
            continue
        value = r["samples_to_target"] if r["status"] == "converged" else not_converged
        cells.setdefault((r["recipe"], r["batch_size"]), []).append(float(value))
    return cells


@dataclass(frozen=True)
class Factor:
    candidate: str
    reference: str
    batch_size: int
    runs_candidate: int
    runs_reference: int
    factor: float | None
    ci_low: float | None
    ci_high: float | None
    prob_candidate_faster: float
    mann_whitney_p: float
    verdict: str  # slower | faster | not significant | undefined
    # A None bound of a defined factor is unbounded (censored resamples decide it); JSON
    # carries null and these flags, never Infinity.
    ci_low_unbounded: bool = False
    ci_high_unbounded: bool = False
    reason: str | None = None  # why the factor is undefined or its interval one-sided


def _verdict(ci_low: float | None, ci_high: float | None) -> str:
    """From the interval; None is unbounded: below toward 0, above toward infinity."""
    if ci_low is not None and ci_low > 1:
        return "slower"
    if ci_high is not None and ci_high < 1:
        return "faster"
    return "not significant"


def _undefined_reason(name: str, values: list[float], trim: int) -> str | None:
    failed = sum(math.isinf(v) for v in values)
    if len(values) <= 2 * trim:
        return f"{name} has {len(values)} run(s); olympic scoring needs more than {2 * trim}"
    if failed > trim:
        return (f"{failed} of {len(values)} {name} runs did not converge, more than olympic scoring drops "
                f"({trim}): its olympic mean is infinite (the checker's insufficient convergence)")
    return None


def _one_sided_reason(ci, candidate: str, reference: str) -> str | None:
    parts = []
    if ci.low is None:
        parts.append(f"lower bound unbounded: {reference}'s olympic mean is infinite in "
                     f"{ci.reference_censored:.1%} of resamples (non-converged runs)")
    if ci.high is None:
        parts.append(f"upper bound unbounded: {candidate}'s olympic mean is infinite in "
                     f"{ci.candidate_censored:.1%} of resamples (non-converged runs)")
    return "; ".join(parts) or None


def bootstrap_interval(candidate: list[float], reference: list[float], *, trim: int, resamples: int,
                       confidence: float, seed: int) -> Interval:
    """The factor's stratified bootstrap interval at `confidence`, expanded for few runs.

    A percentile bootstrap of 20 runs a recipe is too narrow: it covered the true factor
    92.6-93.2% of the time at a nominal 95% (benchmarks/adaptive.py). The expanded
    percentile interval (Hesterberg, The American Statistician 2015) takes the
    bootstrap's percentiles at the level whose normal quantile is Student's t quantile of
    the smaller recipe's kept runs h (h - 1 degrees of freedom) times sqrt(h / (h - 1)),
    which makes up for both the bootstrap's narrowness bias and the t tails."""
    kept = min(len(candidate), len(reference)) - 2 * trim
    tail = (1 - confidence) / 2
    if kept >= 2:
        z = float(stats.t.isf(tail, kept - 1)) * math.sqrt(kept / (kept - 1))
        tail = float(stats.norm.sf(z))
    return bootstrap_ratio(candidate, reference, trim=trim, resamples=resamples, confidence=1 - 2 * tail, seed=seed)


def factors(runs: pa.Table, reference: str, benchmark: str, *, confidence: float = 0.95,
            resamples: int = 10_000, seed: int = 0, candidates: Collection[str] | None = None) -> list[Factor]:
    """Every recipe's factor against `reference` at each batch size both ran (only the
    `candidates`' where given)."""
    trim = trimmed_count(benchmark)
    cells = cell_values(runs)
    censored = cell_values(runs, not_converged=math.inf)
    out = []
    for (recipe, bs) in sorted(cells):
        ref = cells.get((reference, bs))
        cand = cells[(recipe, bs)]
        if recipe == reference or ref is None or (candidates is not None and recipe not in candidates):
            continue
        p_faster = prob_improvement(cand, ref)
        p_value = mann_whitney_p(cand, ref)
        cand_c, ref_c = censored[(recipe, bs)], censored[(reference, bs)]
        undefined = _undefined_reason(recipe, cand_c, trim) or _undefined_reason(reference, ref_c, trim)
        if undefined:  # too few runs, or more failures than olympic scoring drops
            out.append(Factor(recipe, reference, bs, len(cand), len(ref), None, None, None, p_faster, p_value,
                              "undefined", reason=undefined))
            continue
        ci = bootstrap_interval(cand_c, ref_c, trim=trim, resamples=resamples, confidence=confidence, seed=seed)
        out.append(Factor(recipe, reference, bs, len(cand), len(ref), ci.estimate, ci.low, ci.high,
                          p_faster, p_value, _verdict(ci.low, ci.high), ci.low is None, ci.high is None,
                          _one_sided_reason(ci, recipe, reference)))
    return out


def pairwise_factors(runs: pa.Table, recipes: list[str], benchmark: str, *, confidence: float = 0.95,
                     resamples: int = 10_000, seed: int = 0) -> list[Factor]:
    """The recipes against each other (an ablation grid's variants, say): for each pair in
    the given order, the later recipe's factor against the earlier one's. One direction
    is enough: the other's factor is the reciprocal, and so is its interval up to the
    bootstrap's noise."""
    out = []
    for i, earlier in enumerate(recipes):
        out += factors(runs, earlier, benchmark, confidence=confidence, resamples=resamples, seed=seed,
                       candidates=set(recipes[i + 1:]))
    order = {r: i for i, r in enumerate(recipes)}  # rows in campaign order, not by name
    return sorted(out, key=lambda f: (order[f.reference], order[f.candidate], f.batch_size))


def interval_text(f: Factor, digits: int = 4) -> str:
    """The interval as a person reads it: "0.9812 .. 1.0420", "0.9812 .. unbounded",
    or "-" for an undefined factor."""
    if f.factor is None:
        return "-"
    low = "unbounded" if f.ci_low is None else f"{f.ci_low:.{digits}f}"
    high = "unbounded" if f.ci_high is None else f"{f.ci_high:.{digits}f}"
    return f"{low} .. {high}"


def factor_curve(found: list[Factor], candidate: str) -> tuple[list[int], list[float]]:
    points = sorted((f.batch_size, f.factor) for f in found if f.candidate == candidate and f.factor is not None)
    return [b for b, _ in points], [f for _, f in points]


def derived_rcps(reference_records: dict, candidate: str, curve: tuple[list[int], list[float]]) -> dict:
    """The reference RCPs scaled by the candidate's factor at each record's batch size:
    linear between measured batch sizes, the nearest measured factor outside them."""
    sizes, values = curve
    if not sizes:
        return {}
    out = {}
    for name, record in reference_records.items():
        factor = float(np.interp(record["BS"], sizes, values))
        derived = copy.deepcopy(record)
        key = convergence_key(record["Benchmark"])
        derived[key] = [float(v) * factor for v in record[key]]
        derived["Precision"] = candidate
        derived["Creator"] = "rcpforge (derived)"
        derived["Platform"] = (f"{record.get('Platform', '')}; derived from {record.get('Precision', 'reference')} "
                               f"x {factor:.6f} ({factor_basis(record['BS'], sizes)})")
        out[name] = derived
    return out


def factor_basis(bs: int, sizes: list[int]) -> str:
    """Where a derived RCP's factor comes from: its batch size's own cell, or others'."""
    if bs in sizes:
        return "the factor measured at this batch size"
    if sizes[0] < bs < sizes[-1]:
        below, above = max(s for s in sizes if s < bs), min(s for s in sizes if s > bs)
        return f"not measured here: interpolated between batch sizes {below} and {above}"
    nearest = sizes[0] if bs < sizes[0] else sizes[-1]
    return f"not measured here: batch size {nearest}'s, the nearest measured"


def derived_notes(derived: dict, candidate: str, sizes: list[int]) -> list[str]:
    """A note for each derived RCP at a batch size where the candidate has no factor."""
    return [f"derived RCP {name} of {candidate} at batch size {r['BS']}: {factor_basis(r['BS'], sizes)}; "
            f"measure {candidate} at batch size {r['BS']} before relying on it"
            for name, r in derived.items() if r["BS"] not in sizes]


def factors_json(found: list[Factor], reference: str, confidence: float, resamples: int, seed: int,
                 adaptive: dict | None = None, pairwise: list[Factor] | None = None) -> dict:
    """The factors; for an adaptive campaign each also says where its cell stopped and
    why, and `adaptive` holds every look's interval; `pairwise`: the candidates against
    each other (`pairwise_factors`)."""
    curves = {}
    for cand in sorted({f.candidate for f in found}):
        sizes, values = factor_curve(found, cand)
        curves[cand] = [{"batch_size": b, "factor": v} for b, v in zip(sizes, values)]
    stops = {(c["recipe"], c["batch_size"]): c for c in (adaptive or {}).get("cells", [])}
    rows = []
    for f in found:
        row = asdict(f)
        if adaptive is not None:
            cell = stops.get((f.candidate, f.batch_size), {})
            row |= {"stop_reason": cell.get("stop_reason"), "stop_detail": cell.get("stop_detail")}
        rows.append(row)
    out = {"reference": reference, "confidence": confidence, "resamples": resamples, "seed": seed,
           "factors": rows, "curves": curves, "pairwise": [asdict(f) for f in pairwise or []]}
    if adaptive is not None:
        out["adaptive"] = adaptive
    return out
