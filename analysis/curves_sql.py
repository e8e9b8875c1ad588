"""Eval curves straight from a SQL store (SQLite, PostgreSQL), by one query: MLflow's
`metrics` table (run_uuid, key, value, step, is_nan: every point ever logged, as
`get_metric_history` reads it) joined to the campaign's runs, with the tags each row
needs pivoted as `analysis/load_sql.py` pivots them for the runs table."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rcpforge.analysis.load_sql import _engine, _experiment_id, _fetch, _pivot
from rcpforge.trainers.contract import schema as ts

_ROW_SCHEMA = pa.schema([("run_id", pa.string()), ("key", pa.string()), ("step", pa.int64()),
                         ("value", pa.float64()), ("is_nan", pa.int64()), ("name", pa.string()),
                         ("run_key", pa.string()), ("model", pa.string()), ("recipe", pa.string()),
                         ("batch_size", pa.string()), ("seed", pa.string()), ("trainer", pa.string()),
                         ("target", pa.string())])
_ROW = pa.struct(list(_ROW_SCHEMA))
_FACT_TAGS = {"run_key": ts.TAG_RUN_KEY, "model": ts.TAG_MODEL, "recipe": ts.TAG_RECIPE,
              "batch_size": ts.TAG_BATCH_SIZE, "seed": ts.TAG_SEED, "trainer": ts.TAG_TRAINER,
              "target": ts.TAG_TARGET_METRIC}


def _query(dialect: str, metrics: list[str] | None, run_ids: list[str] | None) -> tuple[str, dict[str, Any]]:
    """The points of the campaign's runs (run id, metric, step, value, is_nan) and, in
    the same statement, a row per run of its facts (metric NULL): a run's eight tags,
    repeated on each of its points, would cost more to fetch than the points."""
    tags_sql, binds = _pivot(dialect, "tags", {"role": ts.TAG_ROLE, **_FACT_TAGS})
    if metrics is None:  # each run's own target metric
        which = "m.key = t.target"
    else:
        binds.update({f"metric_{i}": name for i, name in enumerate(metrics)})
        which = f"m.key IN ({', '.join(':metric_' + str(i) for i in range(len(metrics)))})"
    only = ""
    if run_ids is not None:  # a few runs (status: the running ones), named
        binds.update({f"run_{i}": run_id for i, run_id in enumerate(run_ids)})
        only = f" AND r.run_uuid IN ({', '.join(':run_' + str(i) for i in range(len(run_ids)))})"
    runs = (f"JOIN t ON t.run_uuid = r.run_uuid WHERE r.experiment_id = :exp AND r.lifecycle_stage = "
            f"'active' AND t.role = :role AND t.run_key IS NOT NULL{only}")
    nulls = ", ".join(["NULL"] * (len(_FACT_TAGS) + 1))
    facts = ", ".join(["r.name", *(f"t.{c}" for c in _FACT_TAGS)])
    sql = (f"WITH t AS ({tags_sql}) SELECT m.run_uuid, m.key, m.step, m.value, "
           f"CASE WHEN m.is_nan THEN 1 ELSE 0 END, {nulls} "
           f"FROM metrics m JOIN runs r ON r.run_uuid = m.run_uuid {runs} AND ({which} OR m.key = :samples) "
           f"UNION ALL SELECT r.run_uuid, NULL, NULL, NULL, NULL, {facts} FROM runs r {runs}")
    return sql, binds


def sql_points(uri: str, campaign: str, metrics: list[str] | None, run_ids: list[str] | None, role: str,
               samples: str) -> tuple[dict[str, tuple], tuple[Any, Any, Any, Any]]:
    """The campaign's runs that logged a point of the metrics (run id -> run name, key,
    model, recipe, batch size, seed, trainer, target metric), and every such point as
    columns (run id, metric, step, value) with the `samples` metric's beside them, from
    one query."""
    if run_ids is not None and not run_ids:
        return {}, tuple(_ROW_SCHEMA.empty_table()[c] for c in ("run_id", "key", "step", "value"))
    with _engine(uri) as engine, engine.connect() as conn:
        exp = _experiment_id(conn, campaign, uri)
        sql, binds = _query(engine.dialect.name, metrics, run_ids)
        rows = _fetch(engine, conn, sql, {**binds, "exp": exp, "role": role, "samples": samples})
    # the rows into Arrow in one conversion: transposing them in Python costs as much as the query
    table = pa.Table.from_struct_array(pa.array(rows, _ROW)) if rows else _ROW_SCHEMA.empty_table()
    is_fact = pc.is_null(table["key"])
    facts = {r["run_id"]: (r["name"], r["run_key"], r["model"] or "", r["recipe"] or "", int(r["batch_size"]),
                           int(r["seed"]), r["trainer"], r["target"]) for r in table.filter(is_fact).to_pylist()}
    points = table.filter(pc.invert(is_fact))
    value = pc.if_else(pc.cast(points["is_nan"], pa.bool_()), math.nan, points["value"])
    return facts, (points["run_id"], points["key"], points["step"], value)


def metric_names(uri: str, campaign: str) -> list[str]:
    """Every metric name the campaign's runs logged (their latest values' keys)."""
    with _engine(uri) as engine, engine.connect() as conn:
        exp = _experiment_id(conn, campaign, uri)
        rows = _fetch(engine, conn, "SELECT DISTINCT l.key FROM latest_metrics l JOIN runs r ON "
                      "r.run_uuid = l.run_uuid WHERE r.experiment_id = :exp AND r.lifecycle_stage = 'active'",
                      {"exp": exp})
    return sorted(key for (key,) in rows)
