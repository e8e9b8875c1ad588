"""A worker's own run on a database store written without MLflow (orchestrator/tracking/
direct.py) leaves what MLflow's client leaves: the same metrics, histories, params, tags,
status and result file read back through MLflow's own client, two attempts of a run with
a NaN and an infinity among its points; and the worker never imports MLflow. Real SQLite
stores, MLflow's client as the oracle."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from mlflow import MlflowClient

from rcpforge.orchestrator.tracking import RunLog
from rcpforge.orchestrator.tracking.direct import DirectStore, writes_directly
from rcpforge.trainers.contract import EvalPoint, RunResult, RunStatus
from rcpforge.trainers.contract.schema import TAG_ATTEMPT_STARTED
from tests.conftest import ROOT


def _two_attempts(uri: str, run_id: str, folder, artifact_uri: str | None) -> RunLog:
    """Attempt 1 fails after two evals (one NaN); attempt 2 converges, with an infinity."""
    result_file = folder / "result.txt"
    result_file.parent.mkdir(parents=True, exist_ok=True)
    result_file.write_text(":::MLLOG {}\n")
    for attempt, outcome in ((1, RunStatus.failed), (2, RunStatus.converged)):
        log = RunLog(uri, run_id, "eval_loss", folder, retry_s=30, artifact_uri=artifact_uri)
        log.start(attempt)
        for tokens, loss in ((512, 2.0), (1024, math.nan), (1536, math.inf), (2048, 0.5)):
            log.eval_point(EvalPoint(tokens=tokens, samples=tokens // 4, metrics={"eval_loss": loss}))
            if attempt == 1 and tokens == 1024:
                break
        log.flush()
        log.log_artifact(result_file)
        result = (RunResult(status=RunStatus.failed, tokens_trained=1024, wall_s=1.0, error="RuntimeError: boom")
                  if outcome is RunStatus.failed else
                  RunResult(status=RunStatus.converged, tokens_trained=2048, tokens_to_target=2048,
                            samples_to_target=512, wall_s=2.0))
        log.finish(result, cost={"core_hours": 0.5}, tags={"rcpforge.mllog.tensor_parallelism": "1"},
                   params={"lr": "0.1", "seed": "0"})
    return log


def _what_mlflow_reads(client: MlflowClient, run_id: str) -> dict:
    run = client.get_run(run_id)
    histories = {key: sorted((m.step, "nan" if math.isnan(m.value) else m.value)  # nan != nan
                             for m in client.get_metric_history(run_id, key)) for key in run.data.metrics}
    tags = {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")}
    assert tags.pop(TAG_ATTEMPT_STARTED)  # when the attempt started: the two runs' seconds may differ
    return {"metrics": run.data.metrics, "params": run.data.params, "tags": tags, "status": run.info.status,
            "histories": histories, "artifacts": [a.path for a in client.list_artifacts(run_id)]}


def test_a_run_written_without_mlflow_reads_back_as_one_written_through_it(tmp_path):
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("c", artifact_location=(tmp_path / "art").as_uri())
    through, direct = client.create_run(exp), client.create_run(exp)
    assert writes_directly(uri, direct.info.artifact_uri) and not writes_directly(uri, None)
    assert not writes_directly("http://127.0.0.1:5000", direct.info.artifact_uri)
    log = _two_attempts(uri, direct.info.run_id, tmp_path / "direct", direct.info.artifact_uri)
    assert isinstance(log.client.raw, DirectStore)
    log = _two_attempts(uri, through.info.run_id, tmp_path / "through", None)  # MLflow's client
    assert not isinstance(log.client.raw, DirectStore)
    expected, got = _what_mlflow_reads(client, through.info.run_id), _what_mlflow_reads(client, direct.info.run_id)
    assert got == expected
    assert got["status"] == "FINISHED" and got["metrics"]["tokens_to_target"] == 2048
    assert dict(got["histories"]["eval_loss"])[1024] == "nan"  # stored as MLflow stores a NaN (and read as one)
    assert dict(got["histories"]["eval_loss"])[1536] == 1.7976931348623157e308  # an infinity, as MLflow stores it
    assert got["artifacts"] == ["result.txt"]


# A worker's modules (a Slurm job's: the job's entry point and the run it executes), and what
# they must not pull in: MLflow (2 s of CPU a process), the analysis' pyarrow (0.5 s),
# on a SQLite store SQLAlchemy (0.2 s: Python's sqlite3 writes the file), and the campaign
# file's schema and its YAML (0.13 s: the launcher's, not the job's).
_WORKER = """
import sys

import pytest
from pathlib import Path
import rcpforge.cluster.slurm_backend, rcpforge.orchestrator.execute
from rcpforge.orchestrator.tracking import RunLog
from rcpforge.trainers.contract import EvalPoint, RunResult, RunStatus
uri, run_id, folder, artifact_uri = sys.argv[1:]
log = RunLog(uri, run_id, "eval_loss", Path(folder), retry_s=30, artifact_uri=artifact_uri)
log.start(1)
log.eval_point(EvalPoint(tokens=64, samples=16, metrics={"eval_loss": 1.5}))
log.finish(RunResult(status=RunStatus.not_converged, tokens_trained=64, wall_s=0.1))
heavy = ("mlflow", "pyarrow", "pandas", "sqlalchemy", "yaml")
print(sorted(m for m in sys.modules if m.split(".")[0] in heavy or m == "rcpforge.sweeps.spec"))
"""


def test_a_worker_on_a_sqlite_store_never_imports_mlflow_pyarrow_or_sqlalchemy(tmp_path):
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("c", artifact_location=(tmp_path / "art").as_uri())
    run = client.create_run(exp)
    proc = subprocess.run([sys.executable, "-c", _WORKER, uri, run.info.run_id, str(tmp_path / "run"),
                           run.info.artifact_uri], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout
    written = client.get_run(run.info.run_id)
    assert written.data.tags["rcpforge.status"] == "not_converged" and written.data.metrics["eval_loss"] == 1.5


def test_points_a_lost_answer_already_wrote_are_not_written_again(tmp_path):
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    client = MlflowClient(tracking_uri=uri)
    run_id = client.create_run(client.create_experiment("c")).info.run_id
    store = DirectStore(uri)
    from rcpforge.orchestrator.tracking.direct import Metric

    batch = [Metric("loss", 1.0, 10, 64), Metric("loss", 0.5, 20, 128)]
    store.log_batch(run_id, metrics=batch)
    store.log_batch(run_id, metrics=[*batch, Metric("loss", 0.25, 30, 192)])  # the retry, and one more
    assert sorted((m.step, m.value) for m in client.get_metric_history(run_id, "loss")) == [
        (64, 1.0), (128, 0.5), (192, 0.25)]
    assert client.get_run(run_id).data.metrics["loss"] == 0.25


def test_one_statement_text_serves_every_database():
    """The statements' double-quoted identifiers become MySQL's backquotes (its double
    quotes are strings), and a list binds as named parameters on every database."""
    from rcpforge.orchestrator.tracking.tables import Sql, among

    ran = []
    sql = Sql(lambda text, params: ran.append((text, params)) or [], lambda text, rows: ran.append((text, rows)),
              quote="`")
    keys, named = among("k", ["lr", "seed"])
    sql.run(f'DELETE FROM tags WHERE run_uuid = :run AND "key" {keys}', run="r", **named)
    sql.many('INSERT INTO tags (run_uuid, "key", "value") VALUES (:run, :key, :value)', [])  # nothing to insert
    assert ran == [("DELETE FROM tags WHERE run_uuid = :run AND `key` IN (:k0, :k1)",
                    {"run": "r", "k0": "lr", "k1": "seed"})]


@pytest.mark.parametrize(("uri", "preloads_mlflow"), [("sqlite:///{dir}/m.db", False),
                                                       ("postgresql+psycopg2://u@h/db", False),
                                                       ("http://127.0.0.1:5000", True)])
def test_the_local_workers_fork_server_imports_mlflow_only_where_workers_write_through_it(
        uri, preloads_mlflow, tmp_path, monkeypatch):
    from rcpforge.cluster import local
    from rcpforge.orchestrator.backends import _start_local_workers_server
    from rcpforge.sweeps.spec import parse_campaign
    from tests.helpers.campaigns import tiny_campaign

    asked: list[list[str]] = []
    monkeypatch.setattr(local, "start_worker_server", lambda preload=(): asked.append(list(preload)))
    campaign = parse_campaign({**tiny_campaign(), "tracking": {"uri": uri.format(dir=tmp_path)}}, tmp_path)
    _start_local_workers_server(campaign)
    assert ("mlflow" in asked[0]) is preloads_mlflow and "rcpforge.trainers.tinylm" in " ".join(asked[0]), asked
