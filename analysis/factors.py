"""Precision convergence factors: how many more samples a candidate recipe needs than
the reference recipe, per batch size, with a stratified bootstrap interval, the
probability of improvement and a verdict; the factor curve across batch size; and RCPs
derived for the candidate by scaling the reference RCPs (the WG proposal of a few runs at
the minimum and maximum batch size instead of full RCPs for a new precision).

Runs count as the checker counts them: converged at their samples to target,
not_converged and diverged at 1e9; failed, preempted and pending runs are left out."""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa

from trainers.contract.mllog.read import NOT_CONVERGED
from analysis.rcp import trimmed_count
from analysis.rcp_set import convergence_key
from analysis.stats import bootstrap_ratio, mann_whitney_p, prob_improvement

OUTCOMES = ("converged", "not_converged", "diverged")


def cell_values(runs: pa.Table) -> dict[tuple[str, int], list[float]]:
    """(recipe, batch size) -> the outcomes' values in the checker's unit."""
    cells: dict[tuple[str, int], list[float]] = {}
    for r in runs.select(["recipe", "batch_size", "status", "samples_to_target"]).to_pylist():
        if r["status"] not in OUTCOMES:
            continue
        value = r["samples_to_target"] if r["status"] == "converged" else NOT_CONVERGED
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


def _verdict(ci_low: float, ci_high: float) -> str:
    if ci_low > 1:
        return "slower"
    if ci_high < 1:
        return "faster"
    return "not significant"


def factors(runs: pa.Table, reference: str, benchmark: str, *, confidence: float = 0.95,
            resamples: int = 10_000, seed: int = 0) -> list[Factor]:
    trim = trimmed_count(benchmark)
    cells = cell_values(runs)
    out = []
    for (recipe, bs) in sorted(cells):
        ref = cells.get((reference, bs))
        cand = cells[(recipe, bs)]
        if recipe == reference or ref is None:
            continue
        p_faster = prob_improvement(cand, ref)
        p_value = mann_whitney_p(cand, ref)
        defined = min(len(cand), len(ref)) > 2 * trim and all(
            sum(v >= NOT_CONVERGED for v in vals) <= trim for vals in (cand, ref))
        if not defined:  # too few runs, or more failures than olympic scoring drops
            out.append(Factor(recipe, reference, bs, len(cand), len(ref), None, None, None, p_faster, p_value, "undefined"))
            continue
        ci = bootstrap_ratio(cand, ref, trim=trim, resamples=resamples, confidence=confidence, seed=seed)
        out.append(Factor(recipe, reference, bs, len(cand), len(ref), ci.estimate, ci.low, ci.high,
                          p_faster, p_value, _verdict(ci.low, ci.high)))
    return out


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
        derived["Platform"] = f"{record.get('Platform', '')}; derived from {record.get('Precision', 'reference')} x {factor:.6f}"
        out[name] = derived
    return out


def factors_json(found: list[Factor], reference: str, confidence: float, resamples: int, seed: int) -> dict:
    curves = {}
    for cand in sorted({f.candidate for f in found}):
        sizes, values = factor_curve(found, cand)
        curves[cand] = [{"batch_size": b, "factor": v} for b, v in zip(sizes, values)]
    return {"reference": reference, "confidence": confidence, "resamples": resamples, "seed": seed,
            "factors": [asdict(f) for f in found], "curves": curves}
