"""Eval curves straight from a SQL store (SQLite, PostgreSQL), by one query: MLflow's
`metrics` table (run_uuid, key, value, step, is_nan: every point ever logged, as
`get_metric_history` reads it) joined to the campaign's runs, with the tags each row
needs pivoted as `analysis/load_sql.py` pivots them for the runs table."""

from __future__ import annotations

import math
from typing import Any

from rcpforge.analysis.load_sql import _engine, _experiment_id, _fetch, _pivot
from rcpforge.trainers.contract import schema as ts

_FACT_TAGS = {"run_key": ts.TAG_RUN_KEY, "model": ts.TAG_MODEL, "recipe": ts.TAG_RECIPE,
              "batch_size": ts.TAG_BATCH_SIZE, "seed": ts.TAG_SEED, "trainer": ts.TAG_TRAINER,
              "target": ts.TAG_TARGET_METRIC}


def _query(dialect: str, metrics: list[str] | None, run_ids: list[str] | None) -> tuple[str, dict[str, Any]]:
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
    sql = (f"WITH t AS ({tags_sql}) SELECT r.run_uuid, r.name, {', '.join('t.' + c for c in _FACT_TAGS)}, "
           "m.key, m.step, m.value, m.is_nan FROM runs r JOIN t ON t.run_uuid = r.run_uuid "
           "JOIN metrics m ON m.run_uuid = r.run_uuid WHERE r.experiment_id = :exp "
           "AND r.lifecycle_stage = 'active' AND t.role = :role AND t.run_key IS NOT NULL"
           f"{only} AND ({which} OR m.key = :samples)")
    return sql, binds


def sql_points(uri: str, campaign: str, metrics: list[str] | None, run_ids: list[str] | None, role: str,
               samples: str) -> tuple[dict[str, tuple], list[tuple[str, str, int, float]]]:
    """The campaign's runs that logged a point of the metrics (run id -> run name, key,
    model, recipe, batch size, seed, trainer, target metric), and every such point (run
    id, metric, step, value) with the `samples` metric's beside them, from one query."""
    if run_ids is not None and not run_ids:
        return {}, []
    with _engine(uri) as engine, engine.connect() as conn:
        exp = _experiment_id(conn, campaign, uri)
        sql, binds = _query(engine.dialect.name, metrics, run_ids)
        rows = _fetch(engine, conn, sql, {**binds, "exp": exp, "role": role, "samples": samples})
    facts: dict[str, tuple] = {}
    points: list[tuple[str, str, int, float]] = []
    for run_id, name, run_key, model, recipe, bs, seed, trainer, target, key, step, value, is_nan in rows:
        if run_id not in facts:
            facts[run_id] = (name, run_key, model or "", recipe or "", int(bs), int(seed), trainer, target)
        points.append((run_id, key, int(step), math.nan if is_nan else float(value)))
    return facts, points


def metric_names(uri: str, campaign: str) -> list[str]:
    """Every metric name the campaign's runs logged (their latest values' keys)."""
    with _engine(uri) as engine, engine.connect() as conn:
        exp = _experiment_id(conn, campaign, uri)
        rows = _fetch(engine, conn, "SELECT DISTINCT l.key FROM latest_metrics l JOIN runs r ON "
                      "r.run_uuid = l.run_uuid WHERE r.experiment_id = :exp AND r.lifecycle_stage = 'active'",
                      {"exp": exp})
    return sorted(key for (key,) in rows)
