"""What a cell's runs were run with, as they recorded it, and cells whose runs were not all
run with the same settings.

An RCP record pairs a cell's samples to converge with the hyperparameters that produced
them (its `Hyperparams`, which the checker compares with a submission's): they come from
the runs' own recorded parameters, never from the campaign file as it reads now, which may
have been edited since. A cell can hold runs of two configurations (the file's learning
rate edited, new runs beside the old: the cell is the same recipe and batch size, the run
keys differ): its runs are not one distribution, so no RCP record pools them unless asked
(`rcpforge analyze --pool-mixed`), and analyze says which setting differs and how many runs
have each value.

A run's configuration is its `rcpforge.config_key` (its run key with the seed left out:
everything else that decides its result); runs recorded before that tag existed are told
apart by their hyperparameters and recipe options (their MLflow params)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from rcpforge.analysis.hardware import cell_name

RECIPE_PREFIX = "recipe."  # a recipe's options, logged as params beside the hyperparameters


@dataclass(frozen=True)
class Mixture:
    """A cell whose runs are of more than one configuration."""

    recipe: str
    batch_size: int
    runs: tuple[int, ...]  # runs of each configuration, most first
    differing: dict[str, Counter]  # each parameter that differs -> runs per value

    def line(self, pooled: bool = False) -> str:
        if self.differing:
            what = "; ".join(f"{name}: " + ", ".join(f"{n} runs at {value}" for value, n in _most_first(counts))
                             for name, counts in sorted(self.differing.items()))
        else:
            what = (" and ".join(str(n) for n in self.runs) + " runs differ in a setting outside their parameters "
                    "(the trainer's, the budget, the target or the launch: compare the runs' rcpforge.spec tags)")
        done = ("pooled into one RCP record all the same (--pool-mixed)" if pooled else
                "not pooled: no RCP record for the cell (`rcpforge analyze --pool-mixed` writes one)")
        return (f"{cell_name('', self.recipe, self.batch_size)}: its runs are of {len(self.runs)} configurations "
                f"({what}); {done}")


def _most_first(counts: Counter) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _cell(runs: pa.Table, recipe: str, batch_size: int) -> pa.Table:
    return runs.filter(pc.and_(pc.equal(runs["recipe"], recipe), pc.equal(runs["batch_size"], batch_size)))


def _params(cell: pa.Table) -> list[dict[str, str]]:
    if "hparams" not in cell.column_names:
        return [{} for _ in range(cell.num_rows)]
    return [dict(p or []) for p in cell["hparams"].to_pylist()]


def mixture_of(runs: pa.Table, recipe: str, batch_size: int) -> Mixture | None:
    """The cell's mixture, or None where its runs are of one configuration."""
    cell = _cell(runs, recipe, batch_size)
    params = _params(cell)
    keys = cell["config_key"].to_pylist() if "config_key" in cell.column_names else [None] * cell.num_rows
    if all(keys):
        groups = Counter(keys)
    else:  # runs recorded before their configuration key: their parameters tell them apart
        groups = Counter(tuple(sorted(p.items())) for p in params)
    if len(groups) < 2:
        return None
    names = sorted({name for p in params for name in p})
    differing = {name: Counter(p.get(name, "(unset)") for p in params) for name in names}
    differing = {name: counts for name, counts in differing.items() if len(counts) > 1}
    return Mixture(recipe, batch_size, tuple(n for _, n in groups.most_common()), differing)


def mixtures(runs: pa.Table) -> list[Mixture]:
    """Every cell of the runs table whose runs are of more than one configuration."""
    cells = sorted(set(zip(runs["recipe"].to_pylist(), runs["batch_size"].to_pylist(), strict=True)))
    found = (mixture_of(runs, recipe, bs) for recipe, bs in cells)
    return [m for m in found if m is not None]


def _value(text: str) -> Any:
    """A parameter as the campaign file wrote it (MLflow keeps params as strings: Python's
    `str` of the value, so 1e-05 as JSON reads it, True and {'a': 1} as YAML does)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def recorded_hyperparams(runs: pa.Table, recipe: str, batch_size: int) -> dict[str, Any]:
    """The cell's hyperparameters as its runs recorded them (not its recipe's options); a
    parameter whose runs differ (a pooled mixture) lists its values."""
    values: dict[str, set[str]] = {}
    for params in _params(_cell(runs, recipe, batch_size)):
        for name, value in params.items():
            if not name.startswith(RECIPE_PREFIX):
                values.setdefault(name, set()).add(value)
    return {name: _value(next(iter(v))) if len(v) == 1 else [_value(x) for x in sorted(v)]
            for name, v in sorted(values.items())}
