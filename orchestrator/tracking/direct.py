"""A worker's own run on a database store (SQLite, PostgreSQL, MySQL), written without
MLflow: the statements of the database store's write strategy (`bulk.py`) on MLflow's
own tables (`tables.py`), through Python's sqlite3 on a SQLite file, else SQLAlchemy.

Why: a worker in a process of its own (a Slurm job, a Ray worker) otherwise imports
MLflow and its SQL store, about 2 s of CPU, to write a few rows: most of an instant run's
job, and on a small cluster the wall time of a campaign of many short runs. The
orchestrator, which makes the runs, reads the ledger and imports rounds, keeps MLflow's
client; so do the workers of a tracking server, and of a store whose artifacts are not
a local folder (the result file is then uploaded through MLflow's client).

`DirectStore` answers the calls `RunLog` makes of MLflow's client, under the same retry
policy; its entities (`Metric`, `Param`, `RunTag`) have MLflow's fields."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, field
from typing import Any

from rcpforge.trainers.contract.uri import DATABASE_SCHEMES, scheme_of

Metric = namedtuple("Metric", "key value timestamp step")
Param = namedtuple("Param", "key value")
RunTag = namedtuple("RunTag", "key value")


def writes_directly(uri: str, artifact_uri: str | None) -> bool:
    """Whether a worker writes its run without MLflow: a database store, and the run's
    artifact folder local (known to the launcher)."""
    return scheme_of(uri) in DATABASE_SCHEMES and bool(artifact_uri) and str(artifact_uri).startswith("file:")


_ENGINES: dict[tuple[str, int], Any] = {}


def _engine(uri: str) -> Any:
    """One engine per store and process, as MLflow keeps one store per URI: a worker
    process that runs many runs opens no connection per run. A SQLite file through
    Python's sqlite3 (tables.py `SqliteFile`: no SQLAlchemy import), any other database
    through an SQLAlchemy engine and its pool, keyed by the process too: a connection
    must not be shared across a fork."""
    import os

    from rcpforge.orchestrator.tracking.tables import sqlite_file

    key = (uri, os.getpid())
    if key not in _ENGINES:
        engine: Any = sqlite_file(uri)
        if engine is None:
            from sqlalchemy import create_engine

            engine = create_engine(uri, pool_pre_ping=True)
        _ENGINES[key] = engine
    return _ENGINES[key]


@dataclass
class _RunInfo:
    end_time: int | None


@dataclass
class _RunData:
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class _Run:
    info: _RunInfo
    data: _RunData


class DirectStore:
    """MLflow's client's calls on one run, as statements on the store's database."""

    def __init__(self, uri: str):
        self.engine = _engine(uri)

    def get_metric_history(self, run_id: str, key: str) -> list[Metric]:
        from rcpforge.orchestrator.tracking.tables import transaction

        with transaction(self.engine) as sql:
            rows = sql.rows('SELECT "key", "value", "timestamp", step FROM metrics WHERE run_uuid = :run '
                            'AND "key" = :key', run=run_id, key=key)
        return [Metric(*row) for row in rows]

    def get_run(self, run_id: str) -> _Run:
        """The run as far as `RunLog` reads it: its metrics' latest values, its tags,
        its end time."""
        from rcpforge.orchestrator.tracking.tables import transaction

        with transaction(self.engine) as sql:
            ended = sql.rows("SELECT end_time FROM runs WHERE run_uuid = :run", run=run_id)
            if not ended:
                raise LookupError(f"run {run_id} is not in the tracking store")
            metrics = dict(sql.rows('SELECT "key", "value" FROM latest_metrics WHERE run_uuid = :run', run=run_id))
            tags = dict(sql.rows('SELECT "key", "value" FROM tags WHERE run_uuid = :run', run=run_id))
        return _Run(_RunInfo(ended[0][0]), _RunData(metrics, tags))

    def delete_tag(self, run_id: str, key: str) -> None:
        from rcpforge.orchestrator.tracking.tables import transaction

        with transaction(self.engine) as sql:
            sql.run('DELETE FROM tags WHERE run_uuid = :run AND "key" = :key', run=run_id, key=key)

    def log_batch(self, run_id: str, metrics: Any = (), params: Any = (), tags: Any = ()) -> None:
        """One transaction; points the run already holds are not written again (a retry
        after an answer lost on its way back, as MLflow's own store skips them)."""
        from rcpforge.orchestrator.tracking.bulk import add_params, add_points, set_tags
        from rcpforge.orchestrator.tracking.tables import transaction

        with transaction(self.engine) as sql:
            add_params(sql, run_id, {p.key: p.value for p in params})
            add_points(sql, run_id, _not_held(sql, run_id, list(metrics)))
            set_tags(sql, run_id, {t.key: t.value for t in tags})


def _not_held(sql: Any, run_id: str, metrics: list) -> list:
    """The points of `metrics` the run does not hold yet (by key, step and timestamp)."""
    from rcpforge.orchestrator.tracking.tables import among

    if not metrics:
        return metrics
    keys, named_keys = among("k", sorted({m.key for m in metrics}))
    steps, named_steps = among("s", sorted({int(m.step) for m in metrics}))
    held = set(sql.rows(f'SELECT "key", step, "timestamp" FROM metrics WHERE run_uuid = :run AND "key" {keys} '
                        f"AND step {steps}", run=run_id, **named_keys, **named_steps))
    return [m for m in metrics if (m.key, int(m.step), int(m.timestamp)) not in held]
