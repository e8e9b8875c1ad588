"""Runs filed in bulk: a published round is thousands of runs, and MLflow's
client makes each one in about ten transactions (create, tags, metrics, latest metrics,
end), 30-60 ms a run on SQLite. On a database store (SQLite, PostgreSQL, MySQL) the runs
are written as MLflow writes them (its own row models: the run, its tags, metric points
and latest-metric rows), a chunk of runs per transaction. These are the statements of
the database store's write strategy (`writes.SqlWrites`); any other store gets the
client's calls (`writes.ClientWrites`). A Slurm campaign's runs, all submitted at once,
are registered the same way (`register_chunk_sql`)."""

from __future__ import annotations

import uuid

from rcpforge.orchestrator.tracking.records import ImportedRun, points_of, store_result_file
from rcpforge.trainers.contract.schema import TAG_RUN_KEY

CHUNK = 250  # runs a transaction: a crash loses at most one chunk, which a re-import redoes


def import_chunk_sql(store, experiment_id: str, runs: list[ImportedRun], upload) -> list[str]:
    """The runs as FINISHED MLflow runs of the experiment in one transaction (call it
    with at most CHUNK runs), then their result files as `result.txt` artifacts: copied
    into a local artifact folder, else given to `upload(run_id, file)`."""
    from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlRun, SqlTag

    location = store.get_experiment(experiment_id).artifact_location
    rows, files = [], []
    for run in runs:
        values, tags = _run_values(store, experiment_id, location, run.run_key, run.run_name, run.tags, "FINISHED",
                                   _ms(run.start_ms), _ms(run.end_ms))
        row = SqlRun(**values)
        row.tags = [SqlTag(key=k, value=v) for k, v in tags.items()]
        run_id, artifact_uri = values["run_uuid"], values["artifact_uri"]
        points = points_of(run)
        row.metrics = [SqlMetric(key=k, value=v, timestamp=t, step=s, is_nan=n) for k, v, t, s, n in points]
        row.latest_metrics = [SqlLatestMetric(key=k, value=v, timestamp=t, step=s, is_nan=n)
                              for k, v, t, s, n in _latest(points)]
        rows.append(row)
        files.append((run_id, artifact_uri, run.result_file))
    with store.ManagedSessionMaker(read_only=False) as session:
        session.add_all(rows)
    for run_id, artifact_uri, result_file in files:
        store_result_file(artifact_uri, result_file, run_id, upload)
    return [run_id for run_id, _, _ in files]


def registered_sql(store, experiment_id: str, run_keys: list[str]) -> dict[str, str]:
    """Run key -> MLflow run id of those of `run_keys` the experiment already has: a
    chunk retried after an error whose commit went through is not made twice."""
    from mlflow.store.tracking.dbmodels.models import SqlRun, SqlTag

    with store.ManagedSessionMaker() as session:
        found = (session.query(SqlTag.value, SqlTag.run_uuid).join(SqlRun, SqlRun.run_uuid == SqlTag.run_uuid)
                 .filter(SqlRun.experiment_id == experiment_id, SqlTag.key == TAG_RUN_KEY,
                         SqlTag.value.in_(run_keys)).all())
    return {key: run_id for key, run_id in found}


def register_chunk_sql(store, experiment_id: str, runs: list[tuple[str, str, dict[str, str], dict[str, str]]],
                       now_ms: int) -> list[tuple[str, str]]:
    """Runs to launch later, (run key, run name, tags, params) each, as SCHEDULED MLflow
    runs of the experiment in one transaction (at most CHUNK runs): what `create_run`
    makes of each, one commit for all, as three multi-row inserts (runs, tags, params):
    ORM objects took most of the time at 10,000 runs. Returns (run id, artifact URI) each."""
    from mlflow.store.tracking.dbmodels.models import SqlParam, SqlRun, SqlTag
    from sqlalchemy import insert

    location = store.get_experiment(experiment_id).artifact_location
    run_rows, tag_rows, param_rows = [], [], []
    for run_key, run_name, tags, params in runs:
        row, all_tags = _run_values(store, experiment_id, location, run_key, run_name, tags, "SCHEDULED", now_ms, None)
        run_rows.append(row)
        tag_rows += [{"run_uuid": row["run_uuid"], "key": k, "value": v} for k, v in all_tags.items()]
        param_rows += [{"run_uuid": row["run_uuid"], "key": k, "value": v} for k, v in params.items()]
    with store.ManagedSessionMaker(read_only=False) as session:
        session.execute(insert(SqlRun.__table__), run_rows)
        session.execute(insert(SqlTag.__table__), tag_rows)
        if param_rows:
            session.execute(insert(SqlParam.__table__), param_rows)
    return [(r["run_uuid"], r["artifact_uri"]) for r in run_rows]


class ParamConflict(ValueError):
    """A hyperparameter already logged with another value: MLflow refuses it too."""

    error_code = "INVALID_PARAMETER_VALUE"  # the retry policy's permanent refusal (trainers/contract/retry.py)


def start_sql(engine, run_id: str, tags: dict[str, str], start_ms: int | None) -> None:
    """An attempt's start in one transaction: the run RUNNING (MLflow's `update_run`: no
    end time), its attempt's tags, and on its first start its start time (a queued run
    was made when it was queued; MLflow's API has no call that moves a start time), where
    the client would make two calls and a third write. Idempotent, so it is retried whole.
    `engine`: the store's (MLflow's store's SQLAlchemy engine, or a worker's own: direct.py)."""
    from rcpforge.orchestrator.tracking.tables import transaction

    first = {} if start_ms is None else {"start": start_ms}
    with transaction(engine) as sql:
        sql.run(f"UPDATE runs SET status = 'RUNNING', end_time = NULL{', start_time = :start' if first else ''} "
                "WHERE run_uuid = :run", run=run_id, **first)
        set_tags(sql, run_id, tags)


def finish_sql(engine, run_id: str, metrics: list, params: list, tags: list, status: str, end_ms: int) -> None:
    """An attempt's outcome in one transaction: its metric points (and the latest-metric
    rows MLflow shows as values, by its rule: the greatest step, timestamp, value),
    hyperparameters, tags, status and end time, where MLflow's `log_batch` and
    `set_terminated` take five. Metrics, params and tags: anything with MLflow's entities'
    fields (key, value; timestamp and step). A param already logged keeps its value, as
    MLflow keeps it (a different value is refused). Not idempotent (metric points are
    rows): `RunLog.finish` retries it only where the outcome is not already recorded."""
    from rcpforge.orchestrator.tracking.tables import transaction

    with transaction(engine) as sql:
        add_params(sql, run_id, {p.key: p.value for p in params})
        add_points(sql, run_id, metrics)
        set_tags(sql, run_id, {t.key: t.value for t in tags})
        sql.run("UPDATE runs SET status = :status, end_time = :end WHERE run_uuid = :run",
                status=status, end=end_ms, run=run_id)


def add_params(sql, run_id: str, wanted: dict[str, str]) -> None:
    """Hyperparameters not logged yet; one logged with another value is refused. `sql`:
    a transaction's statements (tables.py)."""
    from rcpforge.orchestrator.tracking.tables import among

    if not wanted:
        return
    keys, named = among("k", wanted)
    held = dict(sql.rows(f'SELECT "key", "value" FROM params WHERE run_uuid = :run AND "key" {keys}',
                         run=run_id, **named))
    changed = [k for k, v in held.items() if v != wanted[k]]
    if changed:
        raise ParamConflict(f"run {run_id} has param {changed[0]}={held[changed[0]]!r}; refused the value "
                            f"{wanted[changed[0]]!r}")
    sql.many('INSERT INTO params (run_uuid, "key", "value") VALUES (:run, :key, :value)',
             [{"run": run_id, "key": k, "value": v} for k, v in wanted.items() if k not in held])


_POINT = ("key", "value", "timestamp", "step", "is_nan")


def add_points(sql, run_id: str, metrics: list) -> None:
    """Metric points as rows, and each key's latest-metric row moved to its newest point."""
    from rcpforge.orchestrator.tracking.tables import among, stored_value

    points: dict[tuple, None] = {}  # duplicates dropped, as log_batch drops them
    for metric in metrics:
        is_nan, value = stored_value(float(metric.value))
        points.setdefault((metric.key, value, int(metric.timestamp), int(metric.step), is_nan))
    if not points:
        return
    columns = 'run_uuid, "key", "value", "timestamp", step, is_nan'
    values = "(:run, :key, :value, :timestamp, :step, :is_nan)"
    sql.many(f"INSERT INTO metrics ({columns}) VALUES {values}",
             [{"run": run_id, **dict(zip(_POINT, p, strict=True))} for p in points])
    keys, named = among("k", sorted({p[0] for p in points}))
    shown = {key: (step, stamp, value) for key, value, stamp, step in sql.rows(
        f'SELECT "key", "value", "timestamp", step FROM latest_metrics WHERE run_uuid = :run AND "key" {keys}',
        run=run_id, **named)}
    for point in _latest(list(points)):
        row = {"run": run_id, **dict(zip(_POINT, point, strict=True))}
        key, value, stamp, step, _ = point
        if key not in shown:
            sql.run(f"INSERT INTO latest_metrics ({columns}) VALUES {values}", **row)
        elif (step, stamp, value) > shown[key]:
            sql.run('UPDATE latest_metrics SET "value" = :value, "timestamp" = :timestamp, step = :step, '
                    'is_nan = :is_nan WHERE run_uuid = :run AND "key" = :key', **row)


def set_tags(sql, run_id: str, tags: dict[str, str]) -> None:
    """Tags set on a run (replacing what they held): two statements, not an ORM merge
    (a read and a write) per tag."""
    from rcpforge.orchestrator.tracking.tables import among

    if not tags:
        return
    keys, named = among("k", tags)
    sql.run(f'DELETE FROM tags WHERE run_uuid = :run AND "key" {keys}', run=run_id, **named)
    sql.many('INSERT INTO tags (run_uuid, "key", "value") VALUES (:run, :key, :value)',
             [{"run": run_id, "key": k, "value": v} for k, v in tags.items()])


def set_tag_sql(store, pairs: list[tuple[str, str]], key: str) -> None:
    """One tag, (run id, value) each, set on many runs in one transaction."""
    from mlflow.store.tracking.dbmodels.models import SqlTag

    with store.ManagedSessionMaker(read_only=False) as session:
        for run_id, value in pairs:
            session.merge(SqlTag(run_uuid=run_id, key=key, value=value))


def _run_values(store, experiment_id: str, location: str, run_key: str, run_name: str, tags: dict[str, str],
                status: str, start_ms: int | None, end_ms: int | None) -> tuple[dict, dict[str, str]]:
    """An MLflow run's row (its columns) as the client files it, and its tags (the run
    key's and the name's among them)."""
    from mlflow.entities import SourceType
    from mlflow.entities.lifecycle_stage import LifecycleStage
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME
    from mlflow.utils.uri import append_to_uri_path

    run_id = uuid.uuid4().hex
    row = dict(
        name=run_name, artifact_uri=append_to_uri_path(location, run_id, store.ARTIFACTS_FOLDER_NAME), run_uuid=run_id,
        experiment_id=experiment_id, source_type=SourceType.to_string(SourceType.UNKNOWN), source_name="",
        entry_point_name="", user_id="unknown",  # what the client files when no mlflow.user tag is given
        status=status, start_time=start_ms, end_time=end_ms, deleted_time=None, source_version="",
        lifecycle_stage=LifecycleStage.ACTIVE,
    )
    return row, {**tags, TAG_RUN_KEY: run_key, MLFLOW_RUN_NAME: run_name}


def _ms(value: float | None) -> int | None:
    return None if value is None else int(value)


def _latest(points: list[tuple[str, float, int, int, bool]]) -> list[tuple[str, float, int, int, bool]]:
    """Per key the point MLflow shows as the metric's value: the greatest (step,
    timestamp, value)."""
    best: dict[str, tuple[str, float, int, int, bool]] = {}
    for point in points:
        key, value, stamp, step, _ = point
        held = best.get(key)
        if held is None or (step, stamp, value) > (held[3], held[2], held[1]):
            best[key] = point
    return list(best.values())
