"""Sizing the trend across model sizes (`rcpforge plan` with a model axis): the runs per
model and recipe that would bring each (recipe, batch size)'s slope interval to +-goal,
predicted from the spread of the runs so far, as `orchestrator/sizing.py` predicts a
single factor's.

Each model's log factor is Yuen's trimmed-mean difference (`analysis/sequential.py`): at n
runs per recipe its variance is the two arms' (n - 1) s^2 / (h (h - 1)), h = n - 2 trim, s^2
the winsorized variance of the arm's log runs so far. The slope of the weighted line
through the models has variance 1 / sum w_m (x_m - x_w)^2, w_m the inverse variances,
x = log parameters: the fewest equal n per model whose 95% half-width z sqrt(var) is at
most the goal. A prediction only, on a normal approximation: the slope's interval in
`analyze` is the bootstrap's, whose coverage docs/scale.md reports."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rcpforge.analysis.factors import cell_values
from rcpforge.analysis.rcp import trimmed_count
from rcpforge.analysis.scale import model_params
from rcpforge.analysis.sequential import arm

SLOPE_PRECISIONS = (0.01, 0.02, 0.05)
LIMIT = 10_000  # runs per model and recipe beyond which a goal is out of reach


@dataclass
class SlopeSize:
    """What one (recipe, batch size)'s slope needs."""

    recipe: str
    batch_size: int
    models: int  # with a parameter count and enough runs to size from
    runs_so_far: dict[str, list[int]] = field(default_factory=dict)  # model -> [candidate, reference] runs
    half_width_now: float | None = None  # the slope's predicted 95% half-width at the runs so far
    runs: dict[str, int | None] = field(default_factory=dict)  # goal -> runs per model and recipe (None: > LIMIT)
    total_runs: dict[str, int | None] = field(default_factory=dict)  # goal -> both recipes' runs on every model
    reason: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _term(n: int, spread: float, trim: int) -> float:
    kept = n - 2 * trim
    return (n - 1) * spread / (kept * (kept - 1))


def _half_width(x: np.ndarray, spreads: list[tuple[float, float]], runs: list[tuple[int, int]], trim: int) -> float:
    var = np.array([_term(nc, sc, trim) + _term(nr, sr, trim)
                    for (sc, sr), (nc, nr) in zip(spreads, runs, strict=True)])
    w = 1 / np.maximum(var, 1e-18)
    xbar = (w * x).sum() / w.sum()
    return 1.96 * math.sqrt(1 / float((w * (x - xbar) ** 2).sum()))


def size_slopes(runs: pa.Table, reference: str, benchmark: str,
                goals: tuple[float, ...] = SLOPE_PRECISIONS) -> list[SlopeSize]:
    """Per candidate recipe and batch size, the runs per model its slope needs per goal."""
    trim = trimmed_count(benchmark)
    params = model_params(runs)
    by_size = sorted(params, key=lambda m: (params[m] is None, params[m] or 0, m))
    per_model = {m: cell_values(runs.filter(pc.equal(runs["model"], m)), not_converged=math.inf) for m in by_size}
    cells = sorted({(r, b) for cells in per_model.values() for (r, b) in cells if r != reference})
    out = []
    for recipe, bs in cells:
        row = SlopeSize(recipe, bs, 0)
        xs, spreads, counts = [], [], []
        for model, found in per_model.items():
            cand, ref = found.get((recipe, bs), []), found.get((reference, bs), [])
            row.runs_so_far[model] = [len(cand), len(ref)]
            finite = [v for v in (*cand, *ref) if math.isfinite(v)]
            a_c = arm(cand, trim, max(finite)) if finite else None
            a_r = arm(ref, trim, max(finite)) if finite else None
            size = params[model]
            if size is None or a_c is None or a_r is None:
                continue
            xs.append(math.log(size))
            spreads.append((a_c.spread, a_r.spread))
            counts.append((len(cand), len(ref)))
        row.models = len(xs)
        if len(set(xs)) < 2:
            row.reason = (f"needs at least 2 model sizes with a parameter count and {2 * trim + 2} or more runs of "
                          f"each recipe; run a pilot (rcpforge plan --pilot {2 * trim + 3})")
            out.append(row)
            continue
        x = np.array(xs)
        row.half_width_now = _half_width(x, spreads, counts, trim)
        for goal in goals:
            key = f"{goal:g}"
            n = next((n for n in range(2 * trim + 2, LIMIT + 1)
                      if _half_width(x, spreads, [(n, n)] * len(xs), trim) <= goal), None)
            row.runs[key] = n
            row.total_runs[key] = None if n is None else 2 * n * len(xs)
        out.append(row)
    return out
