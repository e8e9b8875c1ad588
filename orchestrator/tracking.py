"""The one adapter to MLflow (writes, and the ledger reads of the orchestrator).

Experiment = campaign; one MLflow run per run key, created by the orchestrator before the
run is launched and reattached on every retry, so a run key never has two MLflow runs.
The tag schema (`trainers/tracking_schema.py`) is a public contract: analysis reads it.
"""

from __future__ import annotations

import logging
import os
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
_FINAL_METRICS = {METRIC_TOKENS_TRAINED, METRIC_WALL_S, METRIC_TOKENS_TO_TARGET, METRIC_SAMPLES_TO_TARGET}
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
    # False for a run made just before the store went away: its hyperparameters were
    # never logged, and the launcher logs them when it takes the run up again
    has_params: bool = True


_log = logging.getLogger("rcpforge.tracking")

# How long a call waits for an unavailable tracking store before giving up: a tracking
# server restart or a SQLite file locked by a backup takes seconds to minutes, and a run
# that gave up fails its attempt. A campaign sets its own in `tracking.retry_s`.
DEFAULT_RETRY_S = 600.0
_MAX_DELAY_S = 10.0

# Errors that retrying cannot fix: the request itself is wrong.
_PERMANENT = {"INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST", "RESOURCE_ALREADY_EXISTS", "BAD_REQUEST",
              "INVALID_STATE", "PERMISSION_DENIED", "UNAUTHENTICATED"}


class TrackingUnavailable(RuntimeError):
    """The tracking store stayed unreachable for the whole retry window."""


def _transient(err: Exception) -> bool:
    code = getattr(err, "error_code", None)
    return code not in _PERMANENT and not isinstance(err, TrackingUnavailable)


def _first_line(err: Exception) -> str:
    """The error on one line, its head and its tail: an HTTP client's message puts the
    cause ("Connection refused") at the end of a long line. A URI in it is shown
    without its password."""
    from sweeps.spec import redact_uri

    text = redact_uri(" ".join(str(err).split()))
    if len(text) > 300:
        text = f"{text[:150]} ... {text[-120:]}"
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class _RetryingClient:
    """An MlflowClient whose calls are retried with exponential backoff (0.5 s doubling
    to 10 s) while the store is unavailable (a SQLite file locked past its busy timeout, a
    tracking server stopped or restarting), for at most `retry_s` seconds per call; then
    `TrackingUnavailable` names the store and says what to do. A run's result is not
    lost to a hiccup of the tracking store, and a store that stays down ends the
    campaign with a clear message instead of hanging it."""

    def __init__(self, client: MlflowClient, uri: str, retry_s: float = DEFAULT_RETRY_S, first_delay_s: float = 0.5):
        self._client = client
        self._uri = uri
        self._retry_s = retry_s
        self._first_delay_s = first_delay_s

    @property
    def raw(self) -> MlflowClient:
        return self._client

    def __getattr__(self, name: str):
        method = getattr(self._client, name)
        if not callable(method):
            return method
        return lambda *args, **kwargs: self.retry(name, lambda: method(*args, **kwargs))

    def retry(self, what: str, call):
        """`call()` under the retry policy; `what` names it in the log."""
        from sweeps.spec import redact_uri

        deadline = time.monotonic() + self._retry_s
        delay = self._first_delay_s
        while True:
            try:
                return call()
            except Exception as err:  # noqa: BLE001 - classified just below
                if not _transient(err):
                    raise
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TrackingUnavailable(
                        f"tracking store {redact_uri(self._uri)} unavailable for {self._retry_s:g} s "
                        f"(tracking.retry_s), last error on {what}: {_first_line(err)}; start it again or fix "
                        "tracking.uri, then run the command again (`rcpforge run` resumes the campaign)"
                    ) from err
                pause = min(delay, left)
                _log.warning("tracking store unavailable: %s (%s); retrying %s in %.1f s, for up to %.0f s more",
                             redact_uri(self._uri), _first_line(err), what, pause, left)
                time.sleep(pause)
                delay = min(delay * 2, _MAX_DELAY_S)


def _client(uri: str, retry_s: float = DEFAULT_RETRY_S) -> MlflowClient:
    from mlflow import MlflowClient

    if uri.startswith(("http://", "https://")):
        # MLflow's HTTP client retries a refused connection itself, 7 times over about 4
        # minutes per call, which would stretch our window unpredictably: the retry
        # policy is ours. A value the user set is kept.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    return _RetryingClient(MlflowClient(tracking_uri=uri), uri, retry_s)  # type: ignore[return-value]


class Tracking:
    """The orchestrator's view of one campaign's experiment."""

    def __init__(self, uri: str, retry_s: float = DEFAULT_RETRY_S):
        self.uri = uri
        self.client = _client(uri, retry_s)

    def open_experiment(self, name: str, artifact_dir: Path) -> str:
        """Create the schema (this first call does it, once, before any worker starts)
        and the campaign's experiment; return its id."""
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        artifact_dir.mkdir(parents=True, exist_ok=True)
        try:
            return self.client.create_experiment(name, artifact_location=artifact_dir.resolve().as_uri())
        except Exception as err:
            # made by an earlier try whose answer was lost (a server stopped mid-request)
            if getattr(err, "error_code", None) != "RESOURCE_ALREADY_EXISTS":
                raise
            return self.client.get_experiment_by_name(name).experiment_id

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
                    has_params=bool(run.data.params),
                )
            token = page.token
            if not token:
                return entries

    def create_run(
        self, experiment_id: str, spec: RunSpec, extra_tags: dict[str, str] | None = None, run_name: str | None = None
    ) -> str:
        """`extra_tags` and `run_name` are for tune runs (their study and trial)."""
        tags = {**spec_tags(spec), **(extra_tags or {})}
        run = self._create_once(experiment_id, spec.run_key, run_name or spec.run_name, tags)
        self.log_params(run.info.run_id, spec)
        self.client.update_run(run.info.run_id, status="SCHEDULED")
        return run.info.run_id

    def take_up(self, experiment_id: str, spec: RunSpec, entry: LedgerEntry | None) -> str:
        """The run of `spec` to launch: its ledger entry's, or a new one. A run made by an
        orchestrator that stopped before it logged the hyperparameters (the store went
        away between the two calls) gets them now, so no run of the ledger lacks them."""
        if entry is None:
            return self.create_run(experiment_id, spec)
        if not entry.has_params:
            self.log_params(entry.run_id, spec)
        return entry.run_id

    def log_params(self, run_id: str, spec: RunSpec) -> None:
        """One call, so a run has all its hyperparameters or none."""
        from mlflow.entities import Param

        params = [Param(k, str(v)) for k, v in sorted(spec.hparams.items())]
        params += [Param(f"recipe.{k}", str(v)) for k, v in sorted(spec.recipe_options.items())]
        if params:
            self.client.log_batch(run_id, params=params)

    def _create_once(self, experiment_id: str, run_key: str, run_name: str, tags: dict[str, str]):
        """`create_run` is not idempotent: a try whose answer was lost (a tracking server
        stopped mid-request) may have made the run, so every later try looks for it
        first, and a run key never gets two MLflow runs."""
        tried = False

        def attempt():
            nonlocal tried
            if tried:
                found = self.client.raw.search_runs(
                    [experiment_id], filter_string=f"tags.`{TAG_RUN_KEY}` = '{run_key}'", max_results=1)
                if found:
                    return found[0]
            tried = True
            return self.client.raw.create_run(experiment_id, run_name=run_name, tags=tags)

        return self.client.retry("create_run", attempt)

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


def mark_preempted(uri: str, run_id: str, retry_s: float = DEFAULT_RETRY_S) -> None:
    _client(uri, retry_s).set_tag(run_id, TAG_STATUS, RunStatus.preempted.value)


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

    def __init__(self, uri: str, run_id: str, target_metric: str, output_dir: Path, flush_every_s: float = 2.0,
                 retry_s: float = DEFAULT_RETRY_S):
        self.client = _client(uri, retry_s)
        self.output_dir = output_dir
        output_dir.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self.flush_every_s = flush_every_s
        self._pending: list = []
        self._last_flush = time.monotonic()
        history = self.client.get_metric_history(run_id, target_metric)
        self.logged_until = max((m.step for m in history), default=-1)
        self._final_logged: set[str] = set()

    def start(self, attempt: int) -> None:
        from mlflow.entities import RunTag

        if attempt > 1 or self.logged_until >= 0:
            # Final metrics an earlier attempt (or a requeued job) wrote without its
            # outcome tag, the store gone between the two: written again they would be
            # duplicate points. A first start of a fresh run has none: no read.
            self._final_logged = set(self.client.get_run(self.run_id).data.metrics) & _FINAL_METRICS
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
        if self.flush_due():
            self.flush()

    def flush_due(self) -> bool:
        return bool(self._pending) and time.monotonic() - self._last_flush >= self.flush_every_s

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
        metrics = [m for m in metrics if m.key not in self._final_logged]
        tags = [RunTag(TAG_STATUS, result.status.value)]
        if result.error:
            tags.append(RunTag(TAG_ERROR, result.error[-_MAX_TAG:]))
        self.client.log_batch(self.run_id, metrics=metrics, tags=tags)
        self.client.set_terminated(self.run_id, status="FAILED" if result.status is RunStatus.failed else "FINISHED")
