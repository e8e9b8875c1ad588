"""The fast path of loading: read MLflow's SQL store (SQLite, PostgreSQL) directly.

`mlflow.search_runs` builds a Python entity per run with every tag, param and metric;
at 100,000 runs that dominates the analysis. Here one query pivots the few tags and
final metrics the table needs (one indexed join per key) and one more reads the params.
It reads what the API path reads: active runs of the campaign's experiment carrying the
role tag, final metrics from `latest_metrics` (NaN where MLflow stored `is_nan`)."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

from analysis.load import RUN_SCHEMA, NoSuchCampaign, sort_runs
from trainers.tracking_schema import (
    METRIC_SAMPLES_TO_TARGET,
    METRIC_TOKENS_TO_TARGET,
    METRIC_TOKENS_TRAINED,
    METRIC_WALL_S,
    TAG_BATCH_SIZE,
    TAG_ERROR,
    TAG_RECIPE,
    TAG_ROLE,
    TAG_RUN_KEY,
    TAG_SEED,
    TAG_STATUS,
)

SQL_SCHEMES = ("sqlite", "postgresql")
_TAGS = {"run_key": TAG_RUN_KEY, "recipe": TAG_RECIPE, "batch_size": TAG_BATCH_SIZE, "seed": TAG_SEED,
         "status": TAG_STATUS, "error": TAG_ERROR}
_METRICS = {"tokens_to_target": METRIC_TOKENS_TO_TARGET, "samples_to_target": METRIC_SAMPLES_TO_TARGET,
            "tokens_trained": METRIC_TOKENS_TRAINED, "wall_s": METRIC_WALL_S}
_DEFAULT_WORKSPACE = "default"


def is_sql_uri(uri: str) -> bool:
    scheme = uri.split(":", 1)[0].split("+", 1)[0]
    return scheme in SQL_SCHEMES


def _pivot_query() -> tuple[str, dict[str, Any]]:
    cols, joins, binds = ["r.run_uuid AS run_id"], [], {}
    for i, (col, key) in enumerate(_TAGS.items()):
        joins.append(f"{'JOIN' if col == 'run_key' else 'LEFT JOIN'} tags t{i} ON t{i}.run_uuid = r.run_uuid AND t{i}.key = :tag{i}")
        cols.append(f"t{i}.value AS {col}")
        binds[f"tag{i}"] = key
    for i, (col, key) in enumerate(_METRICS.items()):
        joins.append(f"LEFT JOIN latest_metrics m{i} ON m{i}.run_uuid = r.run_uuid AND m{i}.key = :metric{i}")
        cols += [f"m{i}.value AS {col}", f"m{i}.is_nan AS {col}_nan"]
        binds[f"metric{i}"] = key
    sql = (f"SELECT {', '.join(cols)} FROM runs r "
           "JOIN tags role ON role.run_uuid = r.run_uuid AND role.key = :role_key AND role.value = :role "
           f"{' '.join(joins)} WHERE r.experiment_id = :exp AND r.lifecycle_stage = 'active'")
    return sql, binds


def _experiment_id(conn, campaign: str, uri: str) -> int:
    from sqlalchemy import inspect, text

    has_workspace = "workspace" in {c["name"] for c in inspect(conn).get_columns("experiments")}
    sql = "SELECT experiment_id FROM experiments WHERE name = :name"
    binds: dict[str, Any] = {"name": campaign}
    if has_workspace:
        sql += " AND workspace = :ws"
        binds["ws"] = _DEFAULT_WORKSPACE
    row = conn.execute(text(sql), binds).first()
    if row is None:
        raise NoSuchCampaign(f"no runs of campaign {campaign!r} in {uri}; run `rcpforge run` first")
    return row[0]


def _metric(value: float | None, is_nan: Any) -> float | None:
    if value is None:
        return None
    return math.nan if is_nan else float(value)


def load_runs_sql(tracking_uri: str, campaign: str, role: str = "campaign") -> pa.Table:
    from sqlalchemy import create_engine, text

    engine = create_engine(tracking_uri)
    try:
        with engine.connect() as conn:
            exp = _experiment_id(conn, campaign, tracking_uri)
            sql, binds = _pivot_query()
            rows = conn.execute(text(sql), {**binds, "role_key": TAG_ROLE, "role": role, "exp": exp}).all()
            params = conn.execute(
                text("SELECT p.run_uuid, p.key, p.value FROM params p JOIN runs r ON r.run_uuid = p.run_uuid "
                     "WHERE r.experiment_id = :exp"), {"exp": exp}).all()
    finally:
        engine.dispose()
    hparams: dict[str, list] = {}
    for run_id, key, value in params:
        hparams.setdefault(run_id, []).append((key, value))
    columns: dict[str, list] = {name: [] for name in RUN_SCHEMA.names}
    for row in rows:
        m = row._mapping
        columns["run_id"].append(m["run_id"])
        for col in _TAGS:
            value = m[col]
            columns[col].append(int(value) if col in ("batch_size", "seed") else value)
        for col in _METRICS:
            columns[col].append(_metric(m[col], m[f"{col}_nan"]))
        columns["hparams"].append(sorted(hparams.get(m["run_id"], [])))
    return sort_runs(pa.table(columns, schema=RUN_SCHEMA))
