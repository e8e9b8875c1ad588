"""The run distributions a policy simulation draws from, and the eval grid runs land on.

A run converges at an evaluation, so its samples to converge lie on the benchmark's eval
grid. The grid is the largest step that divides every difference between the RCP's run
values (a float gcd, tolerant of the last digits of values such as 0.65 epochs); a draw
scaled by a true factor f is rounded up to the next grid point (a run that needs 3% more
samples converges at the next evaluation that reaches them), anchored at the smallest
run value. With fewer than two distinct values the grid is unknown and draws are not
rounded."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rcpforge.analysis.rcp_set import RcpSet
from rcpforge.trainers.contract.mllog.read import NOT_CONVERGED

# a draw within this fraction of a grid step above a grid point is on it (float noise)
_ON_GRID = 1e-6


# A step that leaves the runs on fewer than one in this many points of the grid spanning
# their range is not an eval grid but the gcd of runs evaluated on different grids (BERT's
# 5.1.0 RCPs at batch sizes 1536, 3072, 6912 give steps of 16 and 48 samples).
_SPARSEST_GRID = 10


def eval_grid(values) -> float | None:
    """The largest step dividing all differences between the finite values; None with
    fewer than two distinct values, or where the step is no eval grid (the runs on fewer
    than one in 10 of its points over their range)."""
    v = np.unique(np.asarray([x for x in values if math.isfinite(x)], float))
    if len(v) < 2:
        return None
    tol = 1e-9 * float(np.max(np.abs(v)))
    step = 0.0
    for d in np.diff(v):
        a, b = max(step, float(d)), min(step, float(d))
        while b > tol:
            r = math.fmod(a, b)
            a, b = b, (0.0 if r < tol or b - r < tol else r)
        step = a
    step = float(f"{step:.12g}")  # 0.04999999999999993 is the 0.05 epochs it means
    return step if (v[-1] - v[0]) / step <= _SPARSEST_GRID * len(v) else None


def on_grid(values: np.ndarray, factor: float, grid: float | None, anchor: float) -> np.ndarray:
    """`values` scaled by `factor`, rounded up to the grid (anchored at `anchor`). At
    factor 1 the values are returned as they are: they are on the grid already."""
    values = np.asarray(values, float)
    if factor == 1.0:
        return values.copy()
    scaled = values * factor
    if grid is None:
        return scaled
    steps = np.ceil((scaled - anchor) / grid - _ON_GRID)
    out = anchor + steps * grid
    return np.where(np.isfinite(values), out, np.inf)


@dataclass(frozen=True)
class Distribution:
    """The runs of one recipe at one batch size: `values` (np.inf for a run that did not
    converge), `grid` the eval grid (None if unknown)."""

    batch_size: int
    values: np.ndarray
    grid: float | None

    def scaled(self, factor: float) -> np.ndarray:
        finite = self.values[np.isfinite(self.values)]
        anchor = float(finite.min()) if len(finite) else 0.0
        return on_grid(self.values, factor, self.grid, anchor)

    @property
    def distinct(self) -> int:
        return len(np.unique(self.values[np.isfinite(self.values)]))


def as_values(runs) -> np.ndarray:
    """Run values with the checker's 1e9 for a run that did not converge made inf (the
    rules count it as infinite time)."""
    out = np.asarray(runs, float)
    return np.where(out >= NOT_CONVERGED, np.inf, out)


def rcp_distributions(rcp_set: RcpSet) -> dict[int, Distribution]:
    """Per batch size with an RCP record: the runs of the first record at it (the one the
    checker finds), on the eval grid of the whole set's values (every record of a
    benchmark converges on the same evaluations)."""
    out: dict[int, Distribution] = {}
    for record in rcp_set.full.values():
        if int(record.bs) not in out:
            out[int(record.bs)] = Distribution(int(record.bs), as_values(record.epochs), eval_grid(record.epochs))
    return out


def campaign_distributions(table, recipe: str) -> dict[int, Distribution]:
    """Per batch size: a campaign recipe's runs (a runs table of `rcpforge.analysis.load`), a run
    that did not converge as inf."""
    cells: dict[int, list[float]] = {}
    for row in table.to_pylist():
        if row["recipe"] != recipe:
            continue
        value = row["samples_to_target"] if row["status"] == "converged" else None
        cells.setdefault(int(row["batch_size"]), []).append(np.inf if value is None else float(value))
    return {bs: Distribution(bs, np.asarray(v, float), eval_grid(v)) for bs, v in sorted(cells.items())}
