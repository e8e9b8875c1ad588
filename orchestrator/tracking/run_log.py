"""A worker's writes to its own MLflow run: eval points in batches, the outcome once."""

from __future__ import annotations

import time
from functools import cached_property
from pathlib import Path

from rcpforge.orchestrator.tracking.client import DEFAULT_RETRY_S, retrying_client
from rcpforge.orchestrator.tracking.direct import DirectStore, writes_directly
from rcpforge.orchestrator.tracking.records import MAX_TAG, attempt_tags, store_result_file
from rcpforge.orchestrator.tracking.writes import ClientWrites, writes_for
from rcpforge.trainers.contract import ErrorKind, EvalPoint, RunResult, RunStatus
from rcpforge.trainers.contract.schema import (
    METRIC_CORE_HOURS,
    METRIC_GPU_HOURS,
    METRIC_SAMPLES_TO_TARGET,
    METRIC_TIME_TO_TRAIN,
    METRIC_TOKENS_TO_TARGET,
    METRIC_TOKENS_TRAINED,
    METRIC_WALL_S,
    TAG_ERROR,
    TAG_ERROR_KIND,
    TAG_STATUS,
)

_FINAL_METRICS = {METRIC_TOKENS_TRAINED, METRIC_WALL_S, METRIC_TOKENS_TO_TARGET, METRIC_SAMPLES_TO_TARGET,
                  METRIC_CORE_HOURS, METRIC_GPU_HOURS, METRIC_TIME_TO_TRAIN}


def _client(uri: str, retry_s: float, artifact_uri: str | None):
    """The run's client under the retry policy, and the module of its entities: the
    database itself where the worker may write it so (tracking/direct.py: no MLflow
    import), else MLflow's client."""
    if writes_directly(uri, artifact_uri):
        from rcpforge.orchestrator.tracking import direct
        from rcpforge.trainers.contract.retry import RetryingClient

        return RetryingClient(DirectStore(uri), uri, retry_s), direct
    import mlflow.entities

    return retrying_client(uri, retry_s), mlflow.entities


class RunLog:
    """A worker's handle on its own MLflow run: eval points go out in batches, and on a
    retry the points the run already logged are not written again."""

    def __init__(self, uri: str, run_id: str, target_metric: str, output_dir: Path, flush_every_s: float = 2.0,
                 retry_s: float = DEFAULT_RETRY_S, fresh: bool = False, artifact_uri: str | None = None,
                 unlogged: bool = False):
        """`fresh`: the launcher made the run for this very attempt and it started at once
        (MLflow makes a run RUNNING, with nothing logged): nothing to read back, no status
        to set, two tracking calls fewer per run. `unlogged`: the launcher made the run
        ahead (queued, in bulk) for this first attempt, which nothing else can have started
        (a local worker): nothing to read back, only its start to set."""
        self.client, self.entities = _client(uri, retry_s, artifact_uri)
        self.fresh = fresh
        self.artifact_uri = artifact_uri  # where known: a local folder is written without a call
        self.output_dir = output_dir
        output_dir.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self.flush_every_s = flush_every_s
        self._pending: list = []
        self._last_flush = time.monotonic()
        history = [] if fresh or unlogged else self.client.get_metric_history(run_id, target_metric)
        self.logged_until = max((m.step for m in history), default=-1)
        self._final_logged: set[str] = set()

    @cached_property
    def writes(self) -> ClientWrites:
        """The store's write strategy, chosen once for this run's writes."""
        return writes_for(self.client)

    def start(self, attempt: int) -> None:
        if self.fresh and attempt == 1:
            return  # the launcher made the run with this attempt's tags (`attempt_tags(1)`)
        if attempt > 1 or self.logged_until >= 0:
            # Final metrics an earlier attempt (or a requeued job) wrote without its
            # outcome tag, the store gone between the two: written again they would be
            # duplicate points. A first start of a fresh run has none: no read.
            run = self.client.get_run(self.run_id)
            self._final_logged = set(run.data.metrics) & _FINAL_METRICS
            for tag in (TAG_ERROR, TAG_ERROR_KIND):
                if tag in run.data.tags:
                    self._forget_error(tag)
        # A queued run's first start, where the store can move it (a database store), is
        # its MLflow start time.
        first_start = int(time.time() * 1000) if attempt == 1 and self.logged_until < 0 else None
        self.writes.start(self.run_id, attempt_tags(attempt), first_start)

    def _forget_error(self, tag: str) -> None:
        """An earlier attempt's error (and its kind) belongs to that attempt: left in place,
        this attempt's outcome (converged, say) would be read back with it."""
        try:
            self.client.delete_tag(self.run_id, tag)
        except Exception as err:  # noqa: BLE001 - a retry whose first try's answer was lost
            if getattr(err, "error_code", None) != "RESOURCE_DOES_NOT_EXIST":
                raise

    def eval_point(self, point: EvalPoint) -> None:
        Metric = self.entities.Metric  # noqa: N806 - MLflow's entity, or direct.py's

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
        if not path.is_file():
            return
        if self.artifact_uri is not None and self.artifact_uri.startswith("file:"):
            store_result_file(self.artifact_uri, path, self.run_id, None)  # a copy, as MLflow's own
        else:
            self.client.log_artifact(self.run_id, str(path))

    def finish(self, result: RunResult, cost: dict[str, float] | None = None,
               tags: dict[str, str] | None = None, params: dict[str, str] | None = None) -> None:
        """`cost`: the attempt's GPU- or core-hours (and its MLPerf time to train),
        written with the outcome like the wall time; `tags`: what its result file
        disclosed, written with any status; `params`: the run's hyperparameters, written
        with any status by every attempt (MLflow takes a param again with the same value),
        so a run made as it started (`Tracking.create_run`'s `starts_now`) has them."""
        Metric, Param, RunTag = self.entities.Metric, self.entities.Param, self.entities.RunTag  # noqa: N806

        now = int(time.time() * 1000)
        metrics = []
        # Final metrics are written once, with the outcome: a failed attempt is retried
        # and must not leave a point that the retry would write again.
        if result.status.is_outcome:
            metrics += [Metric(METRIC_TOKENS_TRAINED, float(result.tokens_trained), now, 0),
                        Metric(METRIC_WALL_S, float(result.wall_s), now, 0)]
            metrics += [Metric(name, float(hours), now, 0) for name, hours in (cost or {}).items()]
        if result.status is RunStatus.converged:
            metrics += [Metric(METRIC_TOKENS_TO_TARGET, float(result.tokens_to_target), now, 0),
                        Metric(METRIC_SAMPLES_TO_TARGET, float(result.samples_to_target), now, 0)]
        metrics = [m for m in metrics if m.key not in self._final_logged]
        tags_out = [RunTag(TAG_STATUS, result.status.value)]
        tags_out += [RunTag(k, v[:MAX_TAG]) for k, v in sorted((tags or {}).items())]
        if result.error:
            tags_out.append(RunTag(TAG_ERROR, result.error[-MAX_TAG:]))
        if result.status is RunStatus.failed:
            tags_out.append(RunTag(TAG_ERROR_KIND, (result.error_kind or ErrorKind.transient).value))
        # The points still waiting go out in the outcome's batch where they fit in one
        # (MLflow takes up to 1000 metrics and 100 tags a batch), one call fewer a run.
        params_out = [Param(k, v) for k, v in (params or {}).items()]
        if len(params_out) > 100:  # MLflow's limit a batch: on their own, before the outcome
            for i in range(0, len(params_out), 100):
                self.client.log_batch(self.run_id, params=params_out[i : i + 100])
            params_out = []
        if len(self._pending) + len(metrics) + len(params_out) + len(tags_out) > 1000 or len(tags_out) > 100:
            self.flush()
        metrics, self._pending = self._pending + metrics, []
        status = "FAILED" if result.status is RunStatus.failed else "FINISHED"
        self.writes.finish(self.run_id, metrics, params_out, tags_out, status)
