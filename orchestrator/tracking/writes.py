"""How a kind of store is written: one write strategy per kind, chosen once for a client
(`writes_for`), so that no write asks again which store it is on.

- `ClientWrites`: every write through MLflow's client, a call at a time: a tracking
  server and a file store;
- `SqlWrites`: a database store (SQLite, PostgreSQL, MySQL), where what the client does
  in many calls is one transaction of MLflow's own tables (`bulk.py`): runs registered
  and imported a chunk per transaction, an attempt's start and its outcome one each.
  A single run is still made through the client, as on any store.

Every call runs under the client's retry policy; a transaction rolls back whole, so it
is retried whole, and one that is not idempotent first looks for what an earlier try
whose answer was lost wrote."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rcpforge.orchestrator.tracking import bulk
from rcpforge.orchestrator.tracking.records import ImportedRun, points_of, store_result_file
from rcpforge.trainers.contract.mllog.write import RESULT_FILE
from rcpforge.trainers.contract.schema import TAG_RUN_KEY

# A run to register: (run key, run name, tags, params).
Queued = tuple[str, str, dict[str, str], dict[str, str]]


def writes_for(client: Any) -> ClientWrites:
    """The write strategy of the client's store (the retrying client: its MLflow client,
    its retry policy)."""
    from rcpforge.orchestrator.tracking.direct import DirectStore

    if isinstance(client.raw, DirectStore):  # a worker's own run, written without MLflow
        return SqlWrites(client, client.raw)
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = client.raw._tracking_client.store  # noqa: SLF001 - the one place that reaches for it
    return SqlWrites(client, store) if isinstance(store, SqlAlchemyStore) else ClientWrites(client)


class ClientWrites:
    """Writes through MLflow's client, each call on its own."""

    in_bulk = False  # runs are made one by one, as they are launched

    def __init__(self, client: Any):
        self.client = client

    def create_run(self, experiment_id: str, run_key: str, run_name: str, tags: dict[str, str],
                   start_time: float | None = None):
        """The MLflow run. `create_run` is not idempotent: a try whose answer was lost (a
        tracking server stopped mid-request) may have made the run, so every later try
        looks for it first, and a run key never gets two MLflow runs."""
        tried = False

        def attempt():
            nonlocal tried
            if tried:
                found = self.client.raw.search_runs(
                    [experiment_id], filter_string=f"tags.`{TAG_RUN_KEY}` = '{run_key}'", max_results=1)
                if found:
                    return found[0]
            tried = True
            return self.client.raw.create_run(experiment_id, run_name=run_name, tags=tags,
                                              start_time=None if start_time is None else int(start_time))

        return self.client.retry("create_run", attempt)

    def log_params(self, run_id: str, params: dict[str, str]) -> None:
        """One call, so a run has all its hyperparameters or none."""
        from mlflow.entities import Param

        if params:
            self.client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])

    def queue_run(self, experiment_id: str, run: Queued):
        """A run that will wait in a queue: SCHEDULED in MLflow until its worker starts
        it, with its hyperparameters."""
        run_key, run_name, tags, params = run
        made = self.create_run(experiment_id, run_key, run_name, tags)
        self.log_params(made.info.run_id, params)
        self.client.update_run(made.info.run_id, status="SCHEDULED")
        return made

    def register_runs(self, experiment_id: str, runs: list[Queued]) -> Iterator[tuple[str, str, str | None]]:
        """Runs that wait in a queue, made as `queue_run` makes each: (run key, run id,
        artifact URI where known) as each is made."""
        for run in runs:
            made = self.queue_run(experiment_id, run)
            yield run[0], made.info.run_id, made.info.artifact_uri

    def import_runs(self, experiment_id: str, runs: list[ImportedRun]) -> list[str]:
        return [self.import_run(experiment_id, run) for run in runs]

    def import_run(self, experiment_id: str, run: ImportedRun) -> str:
        """One finished run in three calls: the run with its tags and start time, its
        metrics (a batch per 1000 points), its end; the file as its `result.txt`."""
        from mlflow.entities import Metric

        made = self.create_run(experiment_id, run.run_key, run.run_name, {**run.tags, TAG_RUN_KEY: run.run_key},
                               start_time=run.start_ms)
        run_id = made.info.run_id
        points = [Metric(key, value, stamp, step) for key, value, stamp, step, _ in points_of(run)]
        for i in range(0, len(points), 1000):  # MLflow takes at most 1000 metrics a batch
            self.client.log_batch(run_id, metrics=points[i : i + 1000])
        store_result_file(made.info.artifact_uri, run.result_file, run_id, self.upload)
        self.client.set_terminated(run_id, status="FINISHED", end_time=None if run.end_ms is None else int(run.end_ms))
        return run_id

    def upload(self, run_id: str, result_file: Path) -> None:
        import shutil
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / RESULT_FILE
            shutil.copyfile(result_file, copy)
            self.client.log_artifact(run_id, str(copy))

    def set_tag(self, pairs: list[tuple[str, str]], key: str) -> None:
        """One tag, (run id, value) each, on many runs."""
        for run_id, value in pairs:
            self.client.set_tag(run_id, key, value)

    def start(self, run_id: str, tags: dict[str, str], first_start_ms: int | None) -> None:
        """An attempt's start: the run RUNNING with the attempt's tags. A tracking server
        keeps a queued run's start time (its submission): `first_start_ms` goes unused."""
        from mlflow.entities import RunTag

        self.client.update_run(run_id, status="RUNNING")
        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def finish(self, run_id: str, metrics: list, params: list, tags: list, status: str) -> None:
        """An attempt's outcome: its metrics, params and tags (MLflow's entities, within
        one batch's limits), then its status and end."""
        self.client.log_batch(run_id, metrics=metrics, params=params, tags=tags)
        self.client.set_terminated(run_id, status=status)


class SqlWrites(ClientWrites):
    """Writes to a database store, in transactions of their own where they save calls."""

    in_bulk = True  # `register_runs` makes many runs in one transaction

    def __init__(self, client: Any, store: Any):
        super().__init__(client)
        # MLflow's SqlAlchemyStore, or a worker's DirectStore (direct.py): start and finish use its engine
        self.store = store

    def register_runs(self, experiment_id: str, runs: list[Queued]) -> Iterator[tuple[str, str, str | None]]:
        """A chunk of runs per transaction, so a 10,000-run Slurm campaign is registered
        in seconds, not in a 10,000-call loop."""
        for start in range(0, len(runs), bulk.CHUNK):
            chunk = runs[start : start + bulk.CHUNK]
            tries = 0

            def register(c=chunk) -> list[tuple[str, str, str | None]]:
                # A chunk's transaction rolls back whole, so it is tried again whole; but a
                # commit whose answer was lost went through: a later try makes only the rest.
                nonlocal tries
                tries += 1
                there = bulk.registered_sql(self.store, experiment_id, [key for key, *_ in c]) if tries > 1 else {}
                rest = [run for run in c if run[0] not in there]
                made = bulk.register_chunk_sql(self.store, experiment_id, rest, int(time.time() * 1000)) if rest else []
                # a run found there has no artifact URI here: its worker asks the store
                return [(key, run_id, None) for key, run_id in there.items()] + [
                    (key, run_id, artifact_uri) for (key, *_), (run_id, artifact_uri) in zip(rest, made, strict=True)]

            yield from self.client.retry("create_runs", register)

    def import_runs(self, experiment_id: str, runs: list[ImportedRun]) -> list[str]:
        ids: list[str] = []
        for start in range(0, len(runs), bulk.CHUNK):  # a chunk's transaction rolls back whole: retried whole
            chunk = runs[start : start + bulk.CHUNK]
            ids += self.client.retry(
                "import_runs", lambda c=chunk: bulk.import_chunk_sql(self.store, experiment_id, c, self.upload))
        return ids

    def set_tag(self, pairs: list[tuple[str, str]], key: str) -> None:
        """In one transaction a chunk (a single run: the client's one call)."""
        if len(pairs) == 1:
            super().set_tag(pairs, key)
            return
        for start in range(0, len(pairs), bulk.CHUNK):
            chunk = pairs[start : start + bulk.CHUNK]
            self.client.retry("set_backend_jobs", lambda c=chunk: bulk.set_tag_sql(self.store, c, key))

    def start(self, run_id: str, tags: dict[str, str], first_start_ms: int | None) -> None:
        """Status, tags and, on its first start, its start time in one transaction: a
        queued run (made ahead, or submitted to Ray or Slurm) was made before it started,
        and its first start becomes its MLflow start time, so MLflow's UI shows the run's
        own duration. Idempotent, so it is retried whole."""
        self.client.retry("start the run", lambda: bulk.start_sql(self.store.engine, run_id, tags, first_start_ms))

    def finish(self, run_id: str, metrics: list, params: list, tags: list, status: str) -> None:
        tries, end_ms = 0, int(time.time() * 1000)

        def record() -> None:
            # A try whose commit went through but whose answer was lost is not written
            # again (its metric points would be duplicate rows): its end time is this
            # attempt's own, unlike any earlier attempt's.
            nonlocal tries
            tries += 1
            if tries > 1 and self.client.raw.get_run(run_id).info.end_time == end_ms:
                return
            bulk.finish_sql(self.store.engine, run_id, metrics, params, tags, status, end_ms)

        self.client.retry("record the outcome", record)
