"""The fast path of loading: read MLflow's SQL store (SQLite, PostgreSQL) directly, and
`load_campaign_runs`, which takes it where the URI allows (`analysis/load.py`'s MLflow
client otherwise).

`mlflow.search_runs` builds a Python entity per run with every tag, param and metric;
at 100,000 runs that dominates the analysis. Here the database pivots the few tags and
final metrics the table needs (GROUP BY over sequential scans) into one row per run,
read as plain tuples, and the params become an Arrow map column by column.
It reads what the API path reads: active runs of the campaign's experiment carrying the
role tag, final metrics from `latest_metrics` (NaN where MLflow stored `is_nan`)."""

from __future__ import annotations

import math
from collections import Counter
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rcpforge.analysis.load import (
    METRIC_COLUMNS,
    RUN_SCHEMA,
    TAG_COLUMNS,
    NoSuchCampaign,
    load_runs,
    model_number,
    no_such_campaign,
    sort_runs,
    tag_values,
)
from rcpforge.trainers.contract.schema import TAG_PREFIX, TAG_ROLE
from rcpforge.trainers.contract.uri import scheme_of

SQL_SCHEMES = ("sqlite", "postgresql")
_DEFAULT_WORKSPACE = "default"


def is_sql_uri(uri: str) -> bool:
    return scheme_of(uri) in SQL_SCHEMES


def load_campaign_runs(tracking_uri: str, campaign: str, role: str = "campaign") -> pa.Table:
    """The SQL fast path for SQLite and PostgreSQL stores, the MLflow API otherwise
    (a tracking server over http(s))."""
    if is_sql_uri(tracking_uri):
        return load_runs_sql(tracking_uri, campaign, role)
    return load_runs(tracking_uri, campaign, role)


def campaign_in_store(tracking_uri: str, campaign: str) -> bool:
    """Whether the store holds the campaign's experiment, asked without making anything:
    no tables in a database (MLflow's client would make them) and no experiment on a
    server. A SQLite file that does not exist is for the caller to rule out first: opening
    it makes it."""
    try:
        if is_sql_uri(tracking_uri):
            with _engine(tracking_uri) as engine, engine.connect() as conn:
                _experiment_id(conn, campaign, tracking_uri)
        else:
            from rcpforge.analysis.load import StoreReader

            StoreReader(tracking_uri).experiment_id(campaign)
    except NoSuchCampaign:
        return False
    return True


def campaign_tag_values(tracking_uri: str, campaign: str, keys: tuple[str, ...],
                        role: str = "campaign") -> dict[str, Counter]:
    """How many of the campaign's runs carry each value of each tag of `keys`: one
    GROUP BY on a SQL store, the runs' tags through MLflow's client otherwise."""
    if not is_sql_uri(tracking_uri):
        return tag_values(tracking_uri, campaign, keys, role)
    binds: dict[str, Any] = {f"k{i}": key for i, key in enumerate(keys)}
    sql = ("SELECT t.key, t.value, COUNT(*) FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
           "JOIN tags o ON o.run_uuid = r.run_uuid AND o.key = :role_key AND o.value = :role "
           f"WHERE r.experiment_id = :exp AND r.lifecycle_stage = 'active' AND t.key IN "
           f"({', '.join(':' + b for b in binds)}) GROUP BY t.key, t.value")
    with _engine(tracking_uri) as engine, engine.connect() as conn:
        exp = _experiment_id(conn, campaign, tracking_uri)
        rows = _fetch(engine, conn, sql, {**binds, "exp": exp, "role_key": TAG_ROLE, "role": role})
    found: dict[str, Counter] = {key: Counter() for key in keys}
    for key, value, count in rows:
        found[key][value] += count
    return found


def _experiment_id(conn, campaign: str, uri: str) -> int:
    from sqlalchemy import inspect, text

    found = inspect(conn)
    if not found.has_table("experiments"):  # a database MLflow has not set up: no campaign in it
        raise no_such_campaign(campaign, uri)
    has_workspace = "workspace" in {c["name"] for c in found.get_columns("experiments")}
    sql = "SELECT experiment_id FROM experiments WHERE name = :name"
    binds: dict[str, Any] = {"name": campaign}
    if has_workspace:
        sql += " AND workspace = :ws"
        binds["ws"] = _DEFAULT_WORKSPACE
    row = conn.execute(text(sql), binds).first()
    if row is None:
        raise no_such_campaign(campaign, uri)
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


def _pivot(dialect: str, table: str, keys: dict[str, str], extra: str = "") -> tuple[str, dict[str, Any]]:
    """One row per run with a column per key, by one sequential pass over the table and
    a GROUP BY. On SQLite the (key, run_uuid) index would cost one random table lookup
    per value, several times slower than the scan."""
    hint = " NOT INDEXED" if dialect == "sqlite" else ""
    binds = {f"{table}_{i}": key for i, key in enumerate(keys.values())}
    cols = [f"MAX(CASE WHEN key = :{b} THEN value END) AS {col}" for b, col in zip(binds, keys)]
    if extra:  # a flag column; PostgreSQL has no MAX of a boolean, so count it as 0/1
        cols += [f"MAX(CASE WHEN key = :{b} AND {extra} THEN 1 ELSE 0 END) AS {col}_{extra}" for b, col in zip(binds, keys)]
    sql = (f"SELECT run_uuid, {', '.join(cols)} FROM {table}{hint} "
           f"WHERE key IN ({', '.join(':' + b for b in binds)}) GROUP BY run_uuid")
    return sql, binds


def _runs_query(dialect: str) -> tuple[str, dict[str, Any]]:
    tags_sql, tag_binds = _pivot(dialect, "tags", {"role": TAG_ROLE, **TAG_COLUMNS})
    metrics_sql, metric_binds = _pivot(dialect, "latest_metrics", METRIC_COLUMNS, extra="is_nan")
    cols = ["r.run_uuid", *(f"t.{c}" for c in TAG_COLUMNS), *(f"m.{c}" for c in METRIC_COLUMNS), *(f"m.{c}_is_nan" for c in METRIC_COLUMNS)]
    sql = (f"WITH t AS ({tags_sql}), m AS ({metrics_sql}) SELECT {', '.join(cols)} FROM runs r "
           "JOIN t ON t.run_uuid = r.run_uuid LEFT JOIN m ON m.run_uuid = r.run_uuid "
           "WHERE r.experiment_id = :exp AND r.lifecycle_stage = 'active' AND t.role = :role AND t.run_key IS NOT NULL")
    return sql, {**tag_binds, **metric_binds}


def load_runs_sql(tracking_uri: str, campaign: str, role: str = "campaign") -> pa.Table:
    from concurrent.futures import ThreadPoolExecutor

    with _engine(tracking_uri) as engine, engine.connect() as conn:
        exp = _experiment_id(conn, campaign, tracking_uri)
    # The params read runs beside the main query: both spend most of their time in the
    # database driver, which releases the GIL.
    with ThreadPoolExecutor(1) as pool:
        params = pool.submit(_read_params, tracking_uri, exp)
        with _engine(tracking_uri) as engine, engine.connect() as conn:
            sql, binds = _runs_query(engine.dialect.name)
            rows = _fetch(engine, conn, sql, {**binds, "exp": exp, "role": role})
        return _to_table(rows, params.result())


@contextmanager
def _engine(uri: str):
    """One engine per thread: a SQLite connection belongs to the thread that opened it."""
    from sqlalchemy import create_engine

    engine = create_engine(uri)
    try:
        yield engine
    finally:
        engine.dispose()


def _read_params(uri: str, exp: int) -> tuple[pa.Array, pa.Array, pa.Array]:
    with _engine(uri) as engine, engine.connect() as conn:
        # rcpforge's own params (the run's recipe, batch size and seed, for MLflow's UI)
        # are columns of the table already, not hyperparameters
        rows = _fetch(engine, conn, "SELECT p.run_uuid, p.key, p.value FROM params p "
                      "JOIN runs r ON r.run_uuid = p.run_uuid WHERE r.experiment_id = :exp "
                      "AND p.key NOT LIKE :own", {"exp": exp, "own": f"{TAG_PREFIX}%"})
    if not rows:
        return (pa.array([], pa.string()),) * 3
    return tuple(pa.array(list(c), pa.string()) for c in zip(*rows))


def _to_table(rows: list[tuple], params: tuple[pa.Array, pa.Array, pa.Array]) -> pa.Table:
    names = ["run_id", *TAG_COLUMNS, *METRIC_COLUMNS, *(f"{c}_is_nan" for c in METRIC_COLUMNS)]
    raw = dict(zip(names, map(list, zip(*rows)))) if rows else {n: [] for n in names}
    columns: dict[str, Any] = {n: raw[n] for n in ("run_id", *TAG_COLUMNS)}
    for col in ("batch_size", "seed"):
        columns[col] = pa.array(raw[col], pa.string()).cast(pa.int64())
    columns["model"] = [m or "" for m in raw["model"]]
    columns["model_params"] = [model_number(v, int) for v in raw["model_params"]]
    columns["model_flops_per_token"] = [model_number(v, float) for v in raw["model_flops_per_token"]]
    for col in METRIC_COLUMNS:  # MLflow stores NaN as is_nan with a placeholder value
        values, nans = raw[col], raw[f"{col}_is_nan"]
        columns[col] = [math.nan if n else v for v, n in zip(values, nans)] if any(nans) else values
    columns["hparams"] = _hparams(columns["run_id"], *params)
    return sort_runs(pa.table({n: columns[n] for n in RUN_SCHEMA.names}, schema=RUN_SCHEMA))


def _hparams(run_ids: list[str], run: pa.Array, key: pa.Array, value: pa.Array) -> pa.MapArray:
    """Each run's params as a map sorted by key, built column-wise in Arrow: a Python
    dict of lists per run costs more than all the SQL at 100,000 runs."""
    position = pc.index_in(run, value_set=pa.array(run_ids, pa.string()))
    kept = pa.table({"pos": position, "key": key, "value": value}).filter(pc.is_valid(position))
    kept = kept.sort_by([("pos", "ascending"), ("key", "ascending"), ("value", "ascending")])
    counts = np.bincount(kept["pos"].to_numpy(), minlength=len(run_ids))
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    return pa.MapArray.from_arrays(offsets, kept["key"].combine_chunks(), kept["value"].combine_chunks())
