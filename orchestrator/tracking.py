"""The one adapter to MLflow (writes, and the ledger reads of the orchestrator).

Experiment = campaign; one MLflow run per run key, created by the orchestrator before the
run is launched and reattached on every retry, so a run key never has two MLflow runs.
The tag schema (`trainers/tracking_schema.py`) is a public contract: analysis reads it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainers.contract import EvalPoint, RunResult, RunSpec, RunStatus
from trainers.tracking_schema import (
    METRIC_SAMPLES_TO_TARGET,
    METRIC_TOKENS_TO_TARGET,
    METRIC_TOKENS_TRAINED,
    METRIC_WALL_S,
    TAG_ATTEMPTS,
    TAG_BACKEND_JOB,
    TAG_BATCH_SIZE,
    TAG_CAMPAIGN,
    TAG_ERROR,
    TAG_RECIPE,
    TAG_ROLE,
    TAG_RUN_KEY,
    TAG_SEED,
    TAG_SPEC,
    TAG_STATUS,
    TAG_TARGET_METRIC,
    TAG_TRAINER,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient

# MLflow rejects tag values above 8000 characters.
_MAX_TAG = 7000
_PAGE = 5000


def sqlite_uri(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


@dataclass(frozen=True)
class LedgerEntry:
    run_id: str
    run_key: str
    status: RunStatus
    attempts: int
    backend_job: str | None = None
    recipe: str = ""
    batch_size: int = 0


_log = logging.getLogger("rcpforge.tracking")

# Errors that retrying cannot fix: the request itself is wrong.
_PERMANENT = {"INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST", "RESOURCE_ALREADY_EXISTS", "BAD_REQUEST",
              "INVALID_STATE", "PERMISSION_DENIED", "UNAUTHENTICATED"}


def _transient(err: Exception) -> bool:
    code = getattr(err, "error_code", None)
    return code not in _PERMANENT


class _RetryingClient:
    """An MlflowClient whose calls are retried with exponential backoff when the store is
    briefly unavailable (a SQLite file locked past its busy timeout, a server
    restarting), so a run's result is not lost to a hiccup of the tracking store."""

    def __init__(self, client: MlflowClient, attempts: int = 6, first_delay_s: float = 0.5):
        self._client = client
        self._attempts = attempts
        self._first_delay_s = first_delay_s

    def __getattr__(self, name: str):
        method = getattr(self._client, name)
        if not callable(method):
            return method

        def call(*args, **kwargs):
            delay = self._first_delay_s
            for attempt in range(1, self._attempts + 1):
                try:
                    return method(*args, **kwargs)
                except Exception as err:  # noqa: BLE001 - classified just below
                    if attempt == self._attempts or not _transient(err):
                        raise
                    _log.warning("tracking store unavailable (%s: %s); retrying %s in %.1f s",
                                 type(err).__name__, str(err).splitlines()[0][:200] if str(err) else "", name, delay)
                    time.sleep(delay)
                    delay = min(delay * 2, 10.0)

        return call


def _client(uri: str) -> MlflowClient:
    from mlflow import MlflowClient

    return _RetryingClient(MlflowClient(tracking_uri=uri))  # type: ignore[return-value]


class Tracking:
    """The orchestrator's view of one campaign's experiment."""

    def __init__(self, uri: str):
        self.uri = uri
        self.client = _client(uri)

    def open_experiment(self, name: str, artifact_dir: Path) -> str:
        """Create the schema (this first call does it, once, before any worker starts)
        and the campaign's experiment; return its id."""
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        artifact_dir.mkdir(parents=True, exist_ok=True)
        return self.client.create_experiment(name, artifact_location=artifact_dir.resolve().as_uri())

    def ledger(self, experiment_id: str, role: str = "campaign") -> dict[str, LedgerEntry]:
        """Every run key of the campaign with its MLflow run and status."""
        entries: dict[str, LedgerEntry] = {}
        token = None
        while True:
            page = self.client.search_runs(
                [experiment_id],
                filter_string=f"tags.`{TAG_ROLE}` = '{role}'",
                max_results=_PAGE,
                page_token=token,
            )
            for run in page:
                tags = run.data.tags
                key = tags.get(TAG_RUN_KEY)
                if key is None:
                    continue
                entries[key] = LedgerEntry(
                    run_id=run.info.run_id,
                    run_key=key,
                    status=RunStatus(tags.get(TAG_STATUS, "pending")),
                    attempts=int(tags.get(TAG_ATTEMPTS, "0")),
                    backend_job=tags.get(TAG_BACKEND_JOB),
                    recipe=tags.get(TAG_RECIPE, ""),
                    batch_size=int(tags.get(TAG_BATCH_SIZE, "0")),
                )
            token = page.token
            if not token:
                return entries

    def create_run(
        self, experiment_id: str, spec: RunSpec, extra_tags: dict[str, str] | None = None, run_name: str | None = None
    ) -> str:
        """`extra_tags` and `run_name` are for tune runs (their study and trial)."""
        from mlflow.entities import Param, RunTag

        tags = {**spec_tags(spec), **(extra_tags or {})}
        run = self.client.create_run(experiment_id, run_name=run_name or spec.run_name, tags=tags)
        params = [Param(k, str(v)) for k, v in sorted(spec.hparams.items())]
        params += [Param(f"recipe.{k}", str(v)) for k, v in sorted(spec.recipe_options.items())]
        self.client.log_batch(run.info.run_id, params=params, tags=[RunTag(TAG_STATUS, "pending")])
        self.client.update_run(run.info.run_id, status="SCHEDULED")
        return run.info.run_id

    def result_of(self, run_id: str) -> RunResult:
        """The recorded result of a run that a worker finished on its own (a cluster job
        followed by a restarted orchestrator)."""
        run = self.client.get_run(run_id)
        tags, metrics = run.data.tags, run.data.metrics

        def whole(name: str) -> int | None:
            return int(metrics[name]) if name in metrics else None

        return RunResult(
            status=RunStatus(tags.get(TAG_STATUS, "failed")),
            tokens_to_target=whole(METRIC_TOKENS_TO_TARGET),
            samples_to_target=whole(METRIC_SAMPLES_TO_TARGET),
            tokens_trained=whole(METRIC_TOKENS_TRAINED) or 0,
            wall_s=metrics.get(METRIC_WALL_S, 0.0),
            error=tags.get(TAG_ERROR),
        )

    def set_backend_job(self, run_id: str, job: str) -> None:
        self.client.set_tag(run_id, TAG_BACKEND_JOB, job)

    def mark_failed(self, run_id: str, error: str) -> None:
        """Record a failure that the worker could not record itself (it died)."""
        from mlflow.entities import RunTag

        self.client.log_batch(
            run_id, tags=[RunTag(TAG_STATUS, RunStatus.failed.value), RunTag(TAG_ERROR, error[-_MAX_TAG:])]
        )
        self.client.set_terminated(run_id, status="FAILED")


def mark_preempted(uri: str, run_id: str) -> None:
    _client(uri).set_tag(run_id, TAG_STATUS, RunStatus.preempted.value)


def spec_tags(spec: RunSpec) -> dict[str, str]:
    return {
        TAG_CAMPAIGN: spec.campaign,
        TAG_ROLE: spec.role,
        TAG_RUN_KEY: spec.run_key,
        TAG_RECIPE: spec.recipe,
        TAG_BATCH_SIZE: str(spec.batch_size),
        TAG_SEED: str(spec.seed),
        TAG_TRAINER: spec.trainer_kind,
        TAG_TARGET_METRIC: spec.target.metric,
        TAG_SPEC: spec.model_dump_json()[:_MAX_TAG],
        TAG_STATUS: RunStatus.pending.value,
        TAG_ATTEMPTS: "0",
    }


class RunLog:
    """A worker's handle on its own MLflow run: eval points go out in batches, and on a
    retry the points the run already logged are not written again."""

    def __init__(self, uri: str, run_id: str, target_metric: str, output_dir: Path, flush_every_s: float = 2.0):
        self.client = _client(uri)
        self.output_dir = output_dir
        output_dir.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self.flush_every_s = flush_every_s
        self._pending: list = []
        self._last_flush = time.monotonic()
        history = self.client.get_metric_history(run_id, target_metric)
        self.logged_until = max((m.step for m in history), default=-1)

    def start(self, attempt: int) -> None:
        from mlflow.entities import RunTag

        self.client.update_run(self.run_id, status="RUNNING")
        self.client.log_batch(
            self.run_id,
            tags=[RunTag(TAG_STATUS, RunStatus.running.value), RunTag(TAG_ATTEMPTS, str(attempt))],
        )

    def eval_point(self, point: EvalPoint) -> None:
        from mlflow.entities import Metric

        if point.tokens <= self.logged_until:
            return  # logged by an earlier attempt; a deterministic rerun gives the same value
        now = int(time.time() * 1000)
        self._pending.extend(Metric(k, float(v), now, point.tokens) for k, v in point.metrics.items())
        self._pending.append(Metric("samples", float(point.samples), now, point.tokens))
        self.logged_until = point.tokens
        self.flush_if_due()

    def flush_if_due(self) -> None:
        """Write what waits once `flush_every_s` has passed; a trainer that waits on
        something else (an external program's output) calls it when idle, so that its
        last points do not wait for the next one."""
        if self._pending and time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        # MLflow accepts at most 1000 metrics in one batch.
        for i in range(0, len(self._pending), 1000):
            self.client.log_batch(self.run_id, metrics=self._pending[i : i + 1000])
        self._pending = []
        self._last_flush = time.monotonic()

    def log_artifact(self, path: Path) -> None:
        """Store a run's file (its MLLOG result.txt) beside its metrics; a retry
        overwrites the earlier attempt's copy."""
        if path.is_file():
            self.client.log_artifact(self.run_id, str(path))

    def finish(self, result: RunResult) -> None:
        from mlflow.entities import Metric, RunTag

        self.flush()
        now = int(time.time() * 1000)
        metrics = []
        # Final metrics are written once, with the outcome: a failed attempt is retried
        # and must not leave a point that the retry would write again.
        if result.status.is_outcome:
            metrics += [Metric(METRIC_TOKENS_TRAINED, float(result.tokens_trained), now, 0),
                        Metric(METRIC_WALL_S, float(result.wall_s), now, 0)]
        if result.status is RunStatus.converged:
            metrics += [Metric(METRIC_TOKENS_TO_TARGET, float(result.tokens_to_target), now, 0),
                        Metric(METRIC_SAMPLES_TO_TARGET, float(result.samples_to_target), now, 0)]
        tags = [RunTag(TAG_STATUS, result.status.value)]
        if result.error:
            tags.append(RunTag(TAG_ERROR, result.error[-_MAX_TAG:]))
        self.client.log_batch(self.run_id, metrics=metrics, tags=tags)
        self.client.set_terminated(self.run_id, status="FAILED" if result.status is RunStatus.failed else "FINISHED")
