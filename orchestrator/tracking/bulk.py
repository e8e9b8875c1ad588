"""Finished runs filed in bulk: a published round is thousands of runs, and MLflow's
client makes each one in about ten transactions (create, tags, metrics, latest metrics,
end), 30-60 ms a run on SQLite. On a database store (SQLite, PostgreSQL, MySQL) the runs
are written as MLflow writes them (its own row models: the run, its tags, metric points
and latest-metric rows), a chunk of runs per transaction; any other store (a tracking
server) gets the client's three calls a run (`Tracking.import_run`)."""

from __future__ import annotations

import math
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from trainers.contract.mllog.write import RESULT_FILE
from trainers.contract.schema import TAG_RUN_KEY

if TYPE_CHECKING:
    from orchestrator.tracking.store import ImportedRun

CHUNK = 250  # runs a transaction: a crash loses at most one chunk, which a re-import redoes
_MAX_FLOAT = 1.7976931348623157e308  # what MLflow stores for +-inf (SQL has no infinity)


def database_store(client):
    """The client's SqlAlchemyStore, or None for a store that is not a database."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = client._tracking_client.store  # noqa: SLF001 - the one place that reaches for it
    return store if isinstance(store, SqlAlchemyStore) else None


def import_chunk_sql(store, experiment_id: str, runs: list[ImportedRun], upload) -> list[str]:
    """The runs as FINISHED MLflow runs of the experiment in one transaction (call it
    with at most CHUNK runs), then their result files as `result.txt` artifacts: copied
    into a local artifact folder, else given to `upload(run_id, file)`."""
    from mlflow.entities import RunStatus, SourceType
    from mlflow.entities.lifecycle_stage import LifecycleStage
    from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlRun, SqlTag
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME
    from mlflow.utils.uri import append_to_uri_path

    location = store.get_experiment(experiment_id).artifact_location
    rows, files = [], []
    for run in runs:
        run_id = uuid.uuid4().hex
        artifact_uri = append_to_uri_path(location, run_id, store.ARTIFACTS_FOLDER_NAME)
        row = SqlRun(
            name=run.run_name, artifact_uri=artifact_uri, run_uuid=run_id, experiment_id=experiment_id,
            source_type=SourceType.to_string(SourceType.UNKNOWN), source_name="", entry_point_name="",
            user_id="unknown",  # what the client files when no mlflow.user tag is given
            status=RunStatus.to_string(RunStatus.FINISHED),
            start_time=_ms(run.start_ms), end_time=_ms(run.end_ms), deleted_time=None, source_version="",
            lifecycle_stage=LifecycleStage.ACTIVE,
        )
        tags = {**run.tags, TAG_RUN_KEY: run.run_key, MLFLOW_RUN_NAME: run.run_name}
        row.tags = [SqlTag(key=k, value=v) for k, v in tags.items()]
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


def _ms(value: float | None) -> int | None:
    return None if value is None else int(value)


def points_of(run: ImportedRun) -> list[tuple[str, float, int, int, bool]]:
    """(key, value, timestamp, step, is_nan) as MLflow stores a metric point, duplicates
    dropped as its `log_batch` drops them."""
    stamp = int(run.end_ms or run.start_ms or 0)
    seen: dict[tuple, None] = {}
    for name, value, step in run.metrics:
        value = float(value)
        is_nan = math.isnan(value)
        stored = 0.0 if is_nan else max(-_MAX_FLOAT, min(_MAX_FLOAT, value))
        seen.setdefault((name, stored, stamp, int(step), is_nan))
    return list(seen)


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


def store_result_file(artifact_uri: str, result_file: Path, run_id: str, upload) -> None:
    if artifact_uri.startswith("file:"):  # a local folder: one copy, no round trip
        folder = Path(unquote(urlparse(artifact_uri).path))
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(result_file, folder / RESULT_FILE)
    else:
        upload(run_id, result_file)
