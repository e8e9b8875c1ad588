from __future__ import annotations

import importlib.util
from collections import Counter

import pytest

from rcpforge.orchestrator.tracking import RunLog, Tracking, TrackingUnavailable, _RetryingClient
from rcpforge.trainers.contract import EvalPoint, RunResult, RunStatus
from rcpforge.trainers.contract.redact import redact_uri
from rcpforge.trainers.contract.schema import METRIC_TOKENS_TO_TARGET, METRIC_TOKENS_TRAINED, TAG_RUN_KEY, TAG_STATUS
from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.cli import invoke, one_line_usage_error

URI = "postgresql+psycopg2://rcpforge:s3cret-pw@db.example:5432/mlflow"


class _Flaky:
    def __init__(self, failures: int, error: Exception):
        self.failures = failures
        self.error = error
        self.calls = 0

    def log_batch(self, run_id):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return run_id


class _Coded(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.error_code = code


def test_transient_errors_are_retried_until_the_store_answers():
    flaky = _Flaky(3, RuntimeError("database is locked"))
    client = _RetryingClient(flaky, URI, retry_s=60, first_delay_s=0.001)
    assert client.log_batch("r1") == "r1"
    assert flaky.calls == 4


def test_retries_give_up_after_the_window_with_an_error_that_names_the_store(caplog):
    flaky = _Flaky(10**9, RuntimeError(f"connection refused by {URI}"))
    client = _RetryingClient(flaky, URI, retry_s=0.05, first_delay_s=0.001)
    with pytest.raises(TrackingUnavailable) as caught:
        client.log_batch("r1")
    message = str(caught.value)
    assert "db.example:5432/mlflow" in message and "s3cret-pw" not in message  # named, password masked
    assert "tracking.retry_s" in message and "rcpforge run" in message and "connection refused" in message
    assert "\n" not in message
    assert flaky.calls > 1  # it did retry before giving up
    waits = [r.getMessage() for r in caplog.records if r.name == "rcpforge.tracking"]
    assert waits and all("db.example:5432/mlflow" in w and "s3cret-pw" not in w for w in waits)


def test_a_wrong_request_is_not_retried():
    flaky = _Flaky(10, _Coded("INVALID_PARAMETER_VALUE"))
    client = _RetryingClient(flaky, URI, retry_s=60, first_delay_s=0.001)
    with pytest.raises(_Coded):
        client.log_batch("r1")
    assert flaky.calls == 1


def test_a_database_refusing_the_data_and_a_bug_are_not_retried(tmp_path):
    """MLflow's SQL store reports a constraint violation as INTERNAL_ERROR, as it does a
    lost connection: the database's own error in the chain says which (a real SQLite
    UNIQUE violation here); a programming error is not waited on either; a locked
    database still is."""
    import sqlite3

    from mlflow.exceptions import MlflowException
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.begin() as db:
        db.execute(text("create table t (k integer primary key)"))
        db.execute(text("insert into t values (1)"))

    def duplicate():
        try:
            with engine.begin() as db:
                db.execute(text("insert into t values (1)"))
        except Exception as err:
            raise MlflowException(err, "INTERNAL_ERROR") from None  # as SqlAlchemyStore wraps it (no __cause__)

    for error_call in (duplicate, lambda: {}["missing"]):
        calls = []
        client = _RetryingClient(object(), URI, retry_s=60, first_delay_s=0.001)
        with pytest.raises((MlflowException, KeyError)):
            client.retry("a call", lambda f=error_call, c=calls: (c.append(1), f()))
        assert calls == [1]
    locked = _Flaky(2, MlflowException(sqlite3.OperationalError("database is locked"), "INTERNAL_ERROR"))
    assert _RetryingClient(locked, URI, retry_s=60, first_delay_s=0.001).log_batch("r1") == "r1"
    assert locked.calls == 3


class _LostAnswer:
    """A client whose first create_run reaches the store but whose answer is lost, as
    when a tracking server is stopped mid-request."""

    def __init__(self, client):
        self._client = client
        self.creates = 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    def create_run(self, *args, **kwargs):
        self.creates += 1
        run = self._client.create_run(*args, **kwargs)
        if self.creates == 1:
            raise ConnectionError("connection reset by peer")
        return run


def test_a_run_whose_creation_answer_was_lost_is_not_created_twice(tmp_path):
    from mlflow import MlflowClient

    from rcpforge.sweeps.expand import expand
    from rcpforge.sweeps.spec import load_campaign

    campaign = load_campaign(write_campaign(tmp_path, tiny_campaign(recipes=["bf16"], seeds=1)))
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    tracking = Tracking(uri)
    lossy = _LostAnswer(MlflowClient(tracking_uri=uri))
    tracking.client = _RetryingClient(lossy, uri, retry_s=30, first_delay_s=0.001)
    exp = tracking.open_experiment("c", tmp_path / "art")
    spec = expand(campaign)[0]
    run_id = tracking.create_run(exp, spec)
    runs = MlflowClient(tracking_uri=uri).search_runs([exp])
    assert lossy.creates == 1  # the retry found the run instead of creating another
    assert [r.info.run_id for r in runs] == [run_id]
    assert runs[0].data.tags[TAG_RUN_KEY] == spec.run_key and runs[0].data.params  # params logged on it


def test_a_bulk_registered_chunk_whose_commit_answer_was_lost_is_not_made_twice(tmp_path, monkeypatch):
    """`create_runs` on a database store: the first try of a chunk commits, then its
    answer is lost (the error comes after the commit); the retry makes only what is not
    there yet, so every run key has one MLflow run."""
    from mlflow import MlflowClient

    from rcpforge.orchestrator.tracking import bulk
    from rcpforge.sweeps.expand import expand
    from rcpforge.sweeps.spec import load_campaign

    campaign = load_campaign(write_campaign(tmp_path, tiny_campaign(recipes=["bf16"], seeds=3)))
    specs = expand(campaign)
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    tracking = Tracking(uri, retry_s=30)
    exp = tracking.open_experiment("c", tmp_path / "art")
    original, calls = bulk.register_chunk_sql, []

    def lost_answer(store, experiment_id, runs, now_ms):
        calls.append(len(runs))
        made = original(store, experiment_id, runs, now_ms)
        if len(calls) == 1:
            raise RuntimeError("server closed the connection unexpectedly")  # after the commit
        return made

    monkeypatch.setattr(bulk, "register_chunk_sql", lost_answer)
    made = tracking.create_runs(exp, specs)
    runs = MlflowClient(tracking_uri=uri).search_runs([exp])
    assert calls == [6]  # the retry found all six, and made none
    assert Counter(r.data.tags[TAG_RUN_KEY] for r in runs) == Counter({s.run_key: 1 for s in specs})
    assert made == {r.data.tags[TAG_RUN_KEY]: r.info.run_id for r in runs}


def test_an_outcome_whose_commit_answer_was_lost_is_not_written_twice(tmp_path, monkeypatch):
    """On a database store an attempt's outcome is one transaction (`bulk.finish_sql`):
    its first try commits, then its answer is lost; the retry sees the attempt's own end
    time and writes nothing again, so no metric point is doubled. A second attempt of the
    same run with the same outcome as the first is written (its end time is its own)."""
    from mlflow import MlflowClient

    from rcpforge.orchestrator.tracking import bulk

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("c", artifact_location=(tmp_path / "art").as_uri())
    run_id = client.create_run(exp).info.run_id
    original, calls = bulk.finish_sql, []

    def lost_answer(*args):
        calls.append(args[5])
        original(*args)
        if len(calls) == 1:
            raise RuntimeError("server closed the connection unexpectedly")  # after the commit

    monkeypatch.setattr(bulk, "finish_sql", lost_answer)
    failed = RunResult(status=RunStatus.failed, tokens_trained=0, wall_s=1.0, error="RuntimeError: boom")
    for attempt in (1, 2):
        log = RunLog(uri, run_id, "eval_excess_loss", tmp_path / "run", retry_s=30)
        log.start(attempt)
        log.eval_point(EvalPoint(tokens=1024 * attempt, samples=128 * attempt, metrics={"eval_excess_loss": 0.5}))
        log.finish(failed, params={"lr": "0.1"})
    assert calls == ["FAILED", "FAILED"]  # the lost answer's retry wrote nothing; attempt 2 wrote once
    history = client.get_metric_history(run_id, "eval_excess_loss")
    assert sorted(m.step for m in history) == [1024, 2048]
    run = client.get_run(run_id)
    assert (run.info.status, run.data.params, run.data.tags[TAG_STATUS]) == ("FAILED", {"lr": "0.1"}, "failed")
    # a param keeps its value (MLflow's rule): a different one is refused, nothing written
    log = RunLog(uri, run_id, "eval_excess_loss", tmp_path / "run", retry_s=30)
    log.start(3)
    with pytest.raises(Exception, match="lr"):
        log.finish(failed, params={"lr": "0.2"})
    assert client.get_run(run_id).data.params == {"lr": "0.1"}


def test_final_metrics_of_an_attempt_that_lost_its_outcome_tag_are_not_written_twice(tmp_path):
    """The store went down between an attempt's final metrics and its outcome tag: the
    next attempt records the outcome without a second point of each final metric."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("c", artifact_location=(tmp_path / "art").as_uri())
    run_id = client.create_run(exp).info.run_id
    client.log_batch(run_id, metrics=[Metric(METRIC_TOKENS_TO_TARGET, 4096.0, 1, 0),
                                      Metric(METRIC_TOKENS_TRAINED, 4096.0, 1, 0)])
    log = RunLog(uri, run_id, "eval_excess_loss", tmp_path / "run")
    log.start(attempt=2)
    log.finish(RunResult(status=RunStatus.converged, tokens_to_target=4096, samples_to_target=64,
                         tokens_trained=4096, wall_s=1.5))
    counts = Counter(name for name in ("tokens_to_target", "tokens_trained", "samples_to_target", "run_wall_s")
                     for _ in client.get_metric_history(run_id, name))
    assert counts == {"tokens_to_target": 1, "tokens_trained": 1, "samples_to_target": 1, "run_wall_s": 1}
    assert client.get_run(run_id).data.tags[TAG_STATUS] == "converged"


def test_a_requeued_job_marks_its_run_preempted_with_the_arguments_the_launcher_gives(tmp_path):
    """Slurm calls the job's `on_requeue(*job.args)`: the arguments the launcher passes
    must be accepted, or the note is lost (the hook's errors are swallowed)."""
    from mlflow import MlflowClient

    from rcpforge.orchestrator.execute import RunAssignment, note_requeue

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("c", artifact_location=(tmp_path / "art").as_uri())
    run_id = client.create_run(exp).info.run_id
    args = (RunAssignment("{}", uri, run_id, 1, str(tmp_path / "run")),)
    note_requeue(*args)
    assert client.get_run(run_id).data.tags[TAG_STATUS] == "preempted"


_NO_PSYCOPG = importlib.util.find_spec("psycopg") is None
# (URI, what the line says); {tmp} is the test's folder, which holds a plain file `afile`
BAD_URIS = [
    ("sqlite:////proc/rcpforge-test/x.db", "cannot make files in folder /proc"),  # unwritable, for root too
    ("sqlite:///{tmp}/afile/x.db", "is a file, so the database cannot be made under it"),
    ("sqllite:///x.db", "did you mean sqlite://"),
    ("http//host", "is not a URI (no scheme://)"),
    pytest.param("postgresql://u:pw-secret@h/db", "driver psycopg is not installed: pip install",
                 marks=pytest.mark.skipif(not _NO_PSYCOPG, reason="psycopg is installed here")),
]
# every command that opens the tracking store of a campaign file, and import's --tracking-uri
COMMANDS = [
    ("run",), ("status",), ("analyze", "--out", "{tmp}/out"), ("report", "--out", "{tmp}/r.html"),
    ("export", "--parquet", "{tmp}/runs.parquet"), ("plan",), ("import", "{tmp}", "--campaign", "c"),
]


@pytest.mark.parametrize("uri,says", BAD_URIS)
def test_a_bad_tracking_uri_is_one_line_naming_it_and_the_fix_from_every_command(tmp_path, uri, says):
    (tmp_path / "afile").write_text("not a folder")
    uri = uri.format(tmp=tmp_path)
    path = write_campaign(tmp_path, tiny_campaign(tracking={"uri": uri}))
    for command in COMMANDS:
        args = [a.format(tmp=tmp_path) for a in command]
        args = [*args, "--tracking-uri", uri] if args[0] == "import" else [args[0], str(path), *args[1:]]
        line = one_line_usage_error(invoke(*args), "tracking", says)
        assert redact_uri(uri) in line and "pw-secret" not in line, line
    assert not (tmp_path / "afile").is_dir() and not list(tmp_path.glob("**/*.db"))


@pytest.mark.parametrize("uri,says", [
    ("http://127.0.0.1:1", "tracking server http://127.0.0.1:1 did not answer within 1 s"),
    # MLflow alone retries a database for about 100 s, then prints its traceback
    ("postgresql+psycopg2://u:pw-secret@127.0.0.1:1/db",
     "tracking database postgresql+psycopg2://u:***@127.0.0.1:1/db did not accept a connection within 1 s"),
])
def test_status_gives_an_unreachable_store_a_short_wait_not_the_campaigns_retry_window(tmp_path, monkeypatch,
                                                                                      uri, says):
    """A mistyped server URL or database host: `status` says so in one line after
    READ_RETRY_S (1 s here), not after the campaign's tracking.retry_s (600 s), which
    `run` keeps."""
    import rcpforge.orchestrator.tracking.client as client_mod

    monkeypatch.setattr(client_mod, "READ_RETRY_S", 1.0)
    path = write_campaign(tmp_path, tiny_campaign(tracking={"uri": uri, "retry_s": 600}))
    line = one_line_usage_error(invoke("status", str(path)), says, "tracking.uri")
    assert "600" not in line and "pw-secret" not in line
