"""The orchestrator's side of the tracking store: a campaign's experiment, its ledger read
(one MLflow run per run key, as `orchestrator/ledger.py`'s entries), runs created, taken
up, failed; imported runs and their result files."""

from __future__ import annotations

import time
from functools import cached_property
from pathlib import Path

from rcpforge.orchestrator.ledger import LedgerEntry
from rcpforge.orchestrator.tracking.client import DEFAULT_RETRY_S, absent_sqlite_store, retrying_client
from rcpforge.orchestrator.tracking.new_store import place_new_sqlite_store
from rcpforge.orchestrator.tracking.records import MAX_TAG, ImportedRun, attempt_tags, run_params, spec_tags
from rcpforge.orchestrator.tracking.writes import ClientWrites, writes_for
from rcpforge.trainers.contract import ErrorKind, RunResult, RunSpec, RunStatus
from rcpforge.trainers.contract.mllog.write import RESULT_FILE
from rcpforge.trainers.contract.schema import (
    METRIC_CORE_HOURS,
    METRIC_GPU_HOURS,
    METRIC_SAMPLES_TO_TARGET,
    METRIC_TOKENS_TO_TARGET,
    METRIC_TOKENS_TRAINED,
    METRIC_WALL_S,
    TAG_ACCELERATOR,
    TAG_ATTEMPTS,
    TAG_BACKEND_JOB,
    TAG_BATCH_SIZE,
    TAG_BILLED,
    TAG_ERROR,
    TAG_ERROR_KIND,
    TAG_FREE_ATTEMPTS,
    TAG_MODEL,
    TAG_RECIPE,
    TAG_ROLE,
    TAG_RUN_KEY,
    TAG_SPEC,
    TAG_STATUS,
)

_PAGE = 5000


_LEDGER_METRICS = frozenset({METRIC_TOKENS_TRAINED, METRIC_WALL_S, METRIC_CORE_HOURS, METRIC_GPU_HOURS,
                             METRIC_SAMPLES_TO_TARGET})


class Tracking:
    """The orchestrator's view of one campaign's experiment."""

    def __init__(self, uri: str, retry_s: float = DEFAULT_RETRY_S, campaign_tags: dict[str, str] | None = None):
        """`campaign_tags`: what every run made here records of its campaign beside its
        RunSpec (`records.campaign_tags`: the RCPs' benchmark and N, the reference recipe)."""
        self.uri = uri
        self.campaign_tags = dict(campaign_tags or {})
        if (db := absent_sqlite_store(uri)) is not None:
            place_new_sqlite_store(db)  # MLflow's client would make it: whole, at once, instead
        self.client = retrying_client(uri, retry_s)
        # run id -> artifact URI of the runs made here: a worker told it stores the run's
        # result file without asking MLflow where it goes (a call a run)
        self.artifact_uris: dict[str, str] = {}

    @cached_property
    def writes(self) -> ClientWrites:
        """The store's write strategy, chosen at the first write (opening the store
        before then would make a SQLite file that a read command must not make)."""
        return writes_for(self.client)

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
                    model=tags.get(TAG_MODEL, ""),
                    has_params=bool(run.data.params),
                    error_kind=tags.get(TAG_ERROR_KIND),
                    free_attempts=int(tags.get(TAG_FREE_ATTEMPTS, "0")),
                    error=tags.get(TAG_ERROR),
                    billed=tags.get(TAG_BILLED),
                    accelerator=tags.get(TAG_ACCELERATOR),
                    metrics={k: v for k, v in run.data.metrics.items() if k in _LEDGER_METRICS},
                )
            token = page.token
            if not token:
                return entries

    def campaign_ledger(self, campaign: str) -> dict[str, LedgerEntry]:
        """The ledger of the campaign's experiment; empty where no run has made one yet."""
        exp = self.client.get_experiment_by_name(campaign)
        return self.ledger(exp.experiment_id) if exp is not None else {}

    def create_run(
        self, experiment_id: str, spec: RunSpec, extra_tags: dict[str, str] | None = None, run_name: str | None = None,
        starts_now: bool = False,
    ) -> str:
        """`extra_tags` and `run_name` are for tune runs (their study and trial). A run that
        will wait in a queue is SCHEDULED in MLflow until its worker starts it; one that
        `starts_now` keeps the RUNNING that MLflow makes it with, and is made with its first
        attempt's tags (what a worker's `RunLog.start` would write: one call fewer a run)."""
        tags = {**spec_tags(spec), **self.campaign_tags, **(extra_tags or {})}
        name = run_name or spec.run_name
        if starts_now:
            # It gets its hyperparameters with its outcome, from the worker (`RunLog.finish`):
            # one call fewer a run. One whose worker never finished lacks them, and
            # `take_up` logs them when it is launched again.
            run = self.writes.create_run(experiment_id, spec.run_key, name, {**tags, **attempt_tags(1)})
        else:
            run = self.writes.queue_run(experiment_id, (spec.run_key, name, tags, run_params(spec)))
        self.artifact_uris[run.info.run_id] = run.info.artifact_uri
        return run.info.run_id

    @property
    def registers_in_bulk(self) -> bool:
        """A database store: `create_runs` makes many runs in one transaction."""
        return self.writes.in_bulk

    def take_up(self, experiment_id: str, spec: RunSpec, entry: LedgerEntry | None, starts_now: bool = False) -> str:
        """The run of `spec` to launch: its ledger entry's, or a new one. A run made by an
        orchestrator that stopped before it logged the hyperparameters (the store went
        away between the two calls) gets them now, so no run of the ledger lacks them."""
        if entry is None:
            return self.create_run(experiment_id, spec, starts_now=starts_now)
        if not entry.has_params:
            self.log_params(entry.run_id, spec)
        return entry.run_id

    def create_runs(self, experiment_id: str, specs: list[RunSpec]) -> dict[str, str]:
        """Runs that wait in a queue, made SCHEDULED as `create_run` makes each (run key ->
        MLflow run id): on a database store a chunk of runs per transaction."""
        made: dict[str, str] = {}
        queued = [(s.run_key, s.run_name, {**spec_tags(s), **self.campaign_tags}, run_params(s)) for s in specs]
        for run_key, run_id, artifact_uri in self.writes.register_runs(experiment_id, queued):
            made[run_key] = run_id
            if artifact_uri is not None:  # its worker writes its result file without a call
                self.artifact_uris[run_id] = artifact_uri
        return made

    def log_params(self, run_id: str, spec: RunSpec) -> None:
        """One call, so a run has all its hyperparameters or none."""
        self.writes.log_params(run_id, run_params(spec))

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
            error_kind=ErrorKind(tags[TAG_ERROR_KIND]) if tags.get(TAG_ERROR_KIND) in ErrorKind._value2member_map_
            else None,
        )

    def status_of(self, run_id: str) -> str | None:
        """The run's status tag as recorded."""
        return self.client.get_run(run_id).data.tags.get(TAG_STATUS)

    def recorded(self, run_id: str) -> tuple[str | None, int]:
        """The run's status tag and attempts as recorded (an attempt counts once its
        worker started it)."""
        tags = self.client.get_run(run_id).data.tags
        return tags.get(TAG_STATUS), int(tags.get(TAG_ATTEMPTS, "0"))

    def set_free_attempts(self, free: list[tuple[str, int]]) -> None:
        """(run id, attempts that were the campaign's failures) on each run."""
        self.writes.set_tag([(run_id, str(n)) for run_id, n in free], TAG_FREE_ATTEMPTS)

    def recorded_spec(self, run_id: str) -> tuple[str, RunSpec | None]:
        """The run's name and the RunSpec it was filed with (None for an imported run, or
        a spec tag this version cannot read)."""
        run = self.client.get_run(run_id)
        spec_json = run.data.tags.get(TAG_SPEC)
        spec = None
        if spec_json:
            try:
                spec = RunSpec.model_validate_json(spec_json)
            except ValueError:
                spec = None
        return run.info.run_name, spec

    def result_file(self, run_id: str, into: Path) -> Path | None:
        """The run's MLLOG result file artifact, downloaded into `into`; None when the run
        has none."""
        if not any(a.path == RESULT_FILE for a in self.client.list_artifacts(run_id)):
            return None
        into.mkdir(parents=True, exist_ok=True)
        return Path(self.client.download_artifacts(run_id, RESULT_FILE, str(into)))

    def import_runs(self, experiment_id: str, runs: list[ImportedRun]) -> list[str]:
        """Finished runs read from elsewhere (MLCommons result files), in bulk on a
        database store (`bulk.py`), else run by run."""
        return self.writes.import_runs(experiment_id, runs)

    def set_backend_jobs(self, jobs: list[tuple[str, str]]) -> None:
        """Each (run id, cluster job) on its run: in one transaction on a database store."""
        self.writes.set_tag(jobs, TAG_BACKEND_JOB)

    def record_billing(self, bills: list[tuple[str, dict[str, float], str]]) -> None:
        """Each (run id, cost metrics, where they came from) on its run (orchestrator/billing.py).
        At step 1, where the worker's asked figures are at step 0: MLflow's latest value of
        a metric is that of its highest step, whatever the clocks of the nodes say."""
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        for run_id, metrics, source in bills:
            self.client.log_batch(run_id, metrics=[Metric(k, v, now, 1) for k, v in metrics.items()],
                                  tags=[RunTag(TAG_BILLED, source[:MAX_TAG])])

    def set_error_kinds(self, run_ids: list[str], kind: ErrorKind) -> None:
        """The kind of the runs' failures, decided after their workers wrote them (two
        startups that fail alike are `configuration`)."""
        self.writes.set_tag([(run_id, kind.value) for run_id in run_ids], TAG_ERROR_KIND)

    def mark_failed(self, run_id: str, error: str, spec: RunSpec | None = None,
                    kind: ErrorKind = ErrorKind.transient) -> None:
        """Record a failure that the worker could not record itself (it died, or the
        campaign stopped it: `kind` cancelled), with the run's hyperparameters (a run made
        as it started has them from its worker only)."""
        from mlflow.entities import RunTag

        self._log_spec_params(run_id, spec)
        self.client.log_batch(
            run_id, tags=[RunTag(TAG_STATUS, RunStatus.failed.value), RunTag(TAG_ERROR, error[-MAX_TAG:]),
                          RunTag(TAG_ERROR_KIND, kind.value)]
        )
        self.client.set_terminated(run_id, status="FAILED")

    def mark_pending(self, run_id: str, spec: RunSpec | None = None) -> None:
        """Put back in the queue a run its orchestrator stopped (Ctrl-C): `pending`, and
        SCHEDULED in MLflow, as a run that has not started, not `running` with nothing
        behind it; with its hyperparameters, as `mark_failed`."""
        self._log_spec_params(run_id, spec)
        self.client.set_tag(run_id, TAG_STATUS, RunStatus.pending.value)
        self.client.update_run(run_id, status="SCHEDULED")

    def _log_spec_params(self, run_id: str, spec: RunSpec | None) -> None:
        from mlflow.entities import Param

        params = [Param(k, v) for k, v in run_params(spec).items()] if spec is not None else []
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params a batch
            self.client.log_batch(run_id, params=params[i : i + 100])


def mark_preempted(uri: str, run_id: str, retry_s: float = DEFAULT_RETRY_S) -> None:
    retrying_client(uri, retry_s).set_tag(run_id, TAG_STATUS, RunStatus.preempted.value)
