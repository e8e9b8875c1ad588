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


def _fetch(engine, conn, sql: str, binds: dict[str, Any]) -> list[tuple]:
    """Rows as plain tuples through the driver's own cursor: SQLAlchemy's Row objects
    cost as much as the query itself at 100,000 runs."""
    from sqlalchemy import text

    compiled = text(sql).bindparams(**binds).compile(dialect=engine.dialect)
    args = tuple(compiled.params[k] for k in compiled.positiontup) if compiled.positional else compiled.params
    cursor = conn.connection.driver_connection.cursor()
    try:
        cursor.execute(str(compiled), args)
        return cursor.fetchall()
    finally:
        cursor.close()


def load_runs_sql(tracking_uri: str, campaign: str, role: str = "campaign") -> pa.Table:
    from sqlalchemy import create_engine

    engine = create_engine(tracking_uri)
    try:
        with engine.connect() as conn:
            exp = _experiment_id(conn, campaign, tracking_uri)
            sql, binds = _pivot_query()
            rows = _fetch(engine, conn, sql, {**binds, "role_key": TAG_ROLE, "role": role, "exp": exp})
            params = _fetch(engine, conn, "SELECT p.run_uuid, p.key, p.value FROM params p JOIN runs r "
                            "ON r.run_uuid = p.run_uuid WHERE r.experiment_id = :exp", {"exp": exp})
    finally:
        engine.dispose()
    return _to_table(rows, params)


def _to_table(rows: list[tuple], params: list[tuple]) -> pa.Table:
    hparams: dict[str, list] = {}
    for run_id, key, value in params:
        hparams.setdefault(run_id, []).append((key, value))
    names = ["run_id", *_TAGS] + [n for col in _METRICS for n in (col, f"{col}_nan")]
    raw = dict(zip(names, (list(c) for c in zip(*rows)))) if rows else {n: [] for n in names}
    columns: dict[str, list] = {"run_id": raw["run_id"]}
    for col in _TAGS:
        columns[col] = [None if v is None else int(v) for v in raw[col]] if col in ("batch_size", "seed") else raw[col]
    for col in _METRICS:
        values, nans = raw[col], raw[f"{col}_nan"]
        columns[col] = [math.nan if n else v for v, n in zip(values, nans)] if any(nans) else values
    columns["hparams"] = [sorted(hparams.get(r, [])) for r in raw["run_id"]]
    return sort_runs(pa.table({n: columns[n] for n in RUN_SCHEMA.names}, schema=RUN_SCHEMA))
