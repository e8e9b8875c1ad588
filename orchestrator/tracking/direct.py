"""A worker's own run on a database store (SQLite, PostgreSQL, MySQL), written without
MLflow: the statements of the database store's write strategy (`bulk.py`) on MLflow's
own tables (`tables.py`), through SQLAlchemy alone.

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

from rcpforge.trainers.contract.uri import DATABASE_SCHEMES

Metric = namedtuple("Metric", "key value timestamp step")
Param = namedtuple("Param", "key value")
RunTag = namedtuple("RunTag", "key value")


def writes_directly(uri: str, artifact_uri: str | None) -> bool:
    """Whether a worker writes its run without MLflow: a database store, and the run's
    artifact folder local (known to the launcher)."""
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower()
    return scheme in DATABASE_SCHEMES and bool(artifact_uri) and str(artifact_uri).startswith("file:")


_ENGINES: dict[tuple[str, int], Any] = {}


def _engine(uri: str) -> Any:
    """One engine (and its pool of connections) per store and process, as MLflow keeps one
    store per URI: a worker process that runs many runs opens no connection per run. Keyed
    by the process too: a connection must not be shared across a fork."""
    import os

    from sqlalchemy import create_engine

    key = (uri, os.getpid())
    if key not in _ENGINES:
        _ENGINES[key] = create_engine(uri, pool_pre_ping=True)
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
        from sqlalchemy import select

        from rcpforge.orchestrator.tracking.tables import METRICS, transaction

        with transaction(self.engine) as conn:
            rows = conn.execute(select(METRICS.c.key, METRICS.c.value, METRICS.c.timestamp, METRICS.c.step)
                                .where(METRICS.c.run_uuid == run_id, METRICS.c.key == key)).all()
        return [Metric(*row) for row in rows]

    def get_run(self, run_id: str) -> _Run:
        """The run as far as `RunLog` reads it: its metrics' latest values, its tags,
        its end time."""
        from sqlalchemy import select

        from rcpforge.orchestrator.tracking.tables import LATEST_METRICS, RUNS, TAGS, transaction

        with transaction(self.engine) as conn:
            ended = conn.execute(select(RUNS.c.end_time).where(RUNS.c.run_uuid == run_id)).first()
            if ended is None:
                raise LookupError(f"run {run_id} is not in the tracking store")
            metrics = dict(conn.execute(select(LATEST_METRICS.c.key, LATEST_METRICS.c.value)
                                        .where(LATEST_METRICS.c.run_uuid == run_id)).all())
            tags = dict(conn.execute(select(TAGS.c.key, TAGS.c.value).where(TAGS.c.run_uuid == run_id)).all())
        return _Run(_RunInfo(ended[0]), _RunData(metrics, tags))

    def delete_tag(self, run_id: str, key: str) -> None:
        from sqlalchemy import delete

        from rcpforge.orchestrator.tracking.tables import TAGS, transaction

        with transaction(self.engine) as conn:
            conn.execute(delete(TAGS).where(TAGS.c.run_uuid == run_id, TAGS.c.key == key))

    def log_batch(self, run_id: str, metrics: Any = (), params: Any = (), tags: Any = ()) -> None:
        """One transaction; points the run already holds are not written again (a retry
        after an answer lost on its way back, as MLflow's own store skips them)."""
        from rcpforge.orchestrator.tracking.bulk import add_params, add_points, set_tags
        from rcpforge.orchestrator.tracking.tables import transaction

        with transaction(self.engine) as conn:
            add_params(conn, run_id, {p.key: p.value for p in params})
            add_points(conn, run_id, _not_held(conn, run_id, list(metrics)))
            set_tags(conn, run_id, {t.key: t.value for t in tags})


def _not_held(conn: Any, run_id: str, metrics: list) -> list:
    """The points of `metrics` the run does not hold yet (by key, step and timestamp)."""
    from sqlalchemy import select

    from rcpforge.orchestrator.tracking.tables import METRICS

    if not metrics:
        return metrics
    held = set(conn.execute(select(METRICS.c.key, METRICS.c.step, METRICS.c.timestamp).where(
        METRICS.c.run_uuid == run_id, METRICS.c.key.in_(sorted({m.key for m in metrics})),
        METRICS.c.step.in_(sorted({int(m.step) for m in metrics})))).all())
    return [m for m in metrics if (m.key, int(m.step), int(m.timestamp)) not in held]
