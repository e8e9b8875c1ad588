"""Synthetic runs tables across model sizes with a known power law of the factor
(issue 31): the contract's columns (model, model_params, model_flops_per_token) beside
the runs table's, for the scale analysis' tests and its coverage simulation."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from rcpforge.analysis.load import RUN_SCHEMA

# The runs table's schema with the model axis' columns (which RUN_SCHEMA has once the axis is in).
AXIS = [pa.field("model", pa.string()), pa.field("model_params", pa.int64()),
        pa.field("model_flops_per_token", pa.float64())]
SCHEMA = pa.schema([*RUN_SCHEMA, *(f for f in AXIS if f.name not in RUN_SCHEMA.names)])

SIZES = {"w64": 200_000, "w128": 800_000, "w256": 3_200_000}


def factor_at(params: float, slope: float, base: float = 1.4, at: float = 200_000) -> float:
    """The true factor: base at `at` params, times (params / at)^slope."""
    return base * (params / at) ** slope


def power_law_runs(rng: np.random.Generator, *, slope: float, seeds: int = 8, sizes: dict[str, int] | None = None,
                   recipes: dict[str, float] | None = None, batch_sizes: tuple[int, ...] = (32,),
                   sigma: float = 0.08, fail: float = 0.05) -> pa.Table:
    """Runs of bf16 and each candidate recipe (name -> its slope multiplier, 1 by default)
    on every model: samples to target lognormal around the reference's median times the
    true factor, each run failing to converge with probability `fail`."""
    sizes = sizes or SIZES
    recipes = recipes or {"nvfp4": 1.0}
    rows = []
    for model, params in sizes.items():
        for bs in batch_sizes:
            median = 1e6 * (params / 2e5) ** -0.3 * (bs / 32) ** 0.2
            for recipe, scale in {"bf16": None, **recipes}.items():
                factor = 1.0 if scale is None else factor_at(params, slope * scale)
                for seed in range(seeds):
                    ok = rng.random() >= fail
                    value = float(median * factor * np.exp(sigma * rng.standard_normal()))
                    name = f"{model}-{recipe}-{bs}-{seed}"
                    rows.append({"run_id": name, "run_key": f"k-{name}", "recipe": recipe, "batch_size": bs,
                                 "seed": seed, "status": "converged" if ok else "not_converged",
                                 "tokens_to_target": value * 64 if ok else None,
                                 "samples_to_target": value if ok else None, "tokens_trained": value * 64,
                                 "wall_s": 1.0, "error": None, "hparams": [], "model": model,
                                 "model_params": params, "model_flops_per_token": 6.0 * params})
    return pa.Table.from_pylist(rows, schema=SCHEMA)
