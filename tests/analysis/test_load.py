"""The SQL fast path and the MLflow API path give the same runs table, on a real MLflow
SQLite store written through the MLflow API (as the orchestrator writes it)."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rcpforge.analysis.load import NoSuchCampaign, load_runs, write_parquet
from rcpforge.analysis.load_sql import is_sql_uri, load_campaign_runs, load_runs_sql
from rcpforge.cluster.gang import free_port
from rcpforge.trainers.contract import schema as ts


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    return uri, _fill(uri, folder)


def _fill(uri: str, folder) -> list[str]:
    """The same runs in any store: outcomes, a NaN metric, a metric with two steps, and
    runs the table must leave out."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("camp", artifact_location=(folder / "art").as_uri())
    client.create_experiment("other", artifact_location=(folder / "art2").as_uri())
    expected_ids = []
    for i, (recipe, bs, status) in enumerate([
        ("bf16", 16, "converged"), ("bf16", 16, "converged"), ("bf16", 64, "not_converged"),
        ("fp8", 16, "diverged"), ("fp8", 64, "converged"), ("fp8", 64, "failed"),
    ]):
        run = client.create_run(exp)
        rid = run.info.run_id
        tags = {ts.TAG_ROLE: "campaign", ts.TAG_RUN_KEY: f"k{i}", ts.TAG_RECIPE: recipe,
                ts.TAG_BATCH_SIZE: str(bs), ts.TAG_SEED: str(i % 2), ts.TAG_STATUS: status}
        if status == "failed":
            tags[ts.TAG_ERROR] = "boom"
        metrics = [Metric(ts.METRIC_TOKENS_TRAINED, 1000.0 * i, 0, 0), Metric(ts.METRIC_TOKENS_TRAINED, 2000.0 * i, 0, 5)]
        if status == "converged":
            metrics += [Metric(ts.METRIC_TOKENS_TO_TARGET, 512.0 * (i + 1), 0, 0),
                        Metric(ts.METRIC_SAMPLES_TO_TARGET, 64.0 * (i + 1), 0, 0)]
        if status == "diverged":
            metrics.append(Metric(ts.METRIC_WALL_S, float("nan"), 0, 0))
        else:
            metrics.append(Metric(ts.METRIC_WALL_S, 1.5 + i, 0, 0))
        client.log_batch(rid, metrics=metrics, params=[Param("lr", str(0.01 * (i + 1))), Param("warmup", "8")],
                         tags=[RunTag(k, v) for k, v in tags.items()])
        expected_ids.append(rid)
    # Not in the table: a deleted run, a run without a run key, a run of another role.
    gone = client.create_run(exp, tags={ts.TAG_ROLE: "campaign", ts.TAG_RUN_KEY: "gone", ts.TAG_RECIPE: "bf16",
                                         ts.TAG_BATCH_SIZE: "16", ts.TAG_SEED: "9"})
    client.delete_run(gone.info.run_id)
    client.create_run(exp, tags={ts.TAG_ROLE: "campaign"})
    client.create_run(exp, tags={ts.TAG_ROLE: "tuning", ts.TAG_RUN_KEY: "t", ts.TAG_RECIPE: "bf16",
                                 ts.TAG_BATCH_SIZE: "16", ts.TAG_SEED: "0"})
    return expected_ids


def _rows(table: pa.Table) -> list[dict]:
    rows = table.to_pylist()
    for r in rows:  # NaN != NaN: compare it as a marker
        for k, v in r.items():
            if isinstance(v, float) and math.isnan(v):
                r[k] = "nan"
    return rows


def test_sql_fast_path_equals_the_mlflow_api(store):
    uri, ids = store
    api, sql = load_runs(uri, "camp"), load_runs_sql(uri, "camp")
    assert sql.schema == api.schema
    assert _rows(sql) == _rows(api)
    assert sorted(sql["run_id"].to_pylist()) == sorted(ids)
    by_key = {r["run_key"]: r for r in sql.to_pylist()}
    assert by_key["k1"]["tokens_trained"] == 2000.0  # the latest step, not the first
    assert math.isnan(by_key["k3"]["wall_s"])
    assert by_key["k5"]["error"] == "boom" and by_key["k0"]["hparams"] == [("lr", "0.01"), ("warmup", "8")]


def test_dispatch_and_missing_campaign(store, tmp_path):
    uri, _ = store
    assert is_sql_uri(uri) and is_sql_uri("postgresql+psycopg2://u@h/db") and not is_sql_uri("http://h:5000")
    assert _rows(load_campaign_runs(uri, "camp")) == _rows(load_runs(uri, "camp"))
    with pytest.raises(NoSuchCampaign, match="nope"):
        load_runs_sql(uri, "nope")
    path = tmp_path / "runs.parquet"
    write_parquet(load_campaign_runs(uri, "camp"), path)
    assert _rows(pq.read_table(path)) == _rows(load_runs(uri, "camp"))


def test_http_tracking_server_goes_through_the_api_and_gives_the_same_table(store, tmp_path):
    """A real `mlflow server` on the same store: the http URI takes the MLflow API path."""
    import os
    import subprocess
    import sys
    import urllib.request

    uri, _ = store
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--default-artifact-root",
         str(tmp_path / "art"), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})  # no huey job runners
    try:
        for _ in range(240):  # ready in 6-13 s on these machines (docs/dev-clusters.md); poll, no timing assertion
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                assert server.poll() is None, "mlflow server exited"
                import time

                time.sleep(0.5)
        http = f"http://127.0.0.1:{port}"
        assert not is_sql_uri(http)
        assert _rows(load_campaign_runs(http, "camp")) == _rows(load_runs_sql(uri, "camp"))
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def postgres_uri():
    """A private PostgreSQL 15 cluster (skipped where PostgreSQL or psycopg2 is absent)."""
    import glob
    import os
    import shutil
    import subprocess
    import tempfile

    from tests.conftest import missing_service

    try:
        import psycopg2  # noqa: F401
    except ImportError:
        missing_service("psycopg2 is not installed (the test extra has psycopg2-binary)")
    # Debian keeps initdb and pg_ctl out of PATH, in /usr/lib/postgresql/<version>/bin:
    # found there as .ci/run and cluster/dev/mlflow_server.sh find them
    found = shutil.which("pg_ctl") or max(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                                          key=lambda p: int(p.split("/")[4]), default=None)
    if found is None:
        missing_service("PostgreSQL is not installed (apt-get install postgresql)")
    bin_dir = os.path.dirname(found)
    folder = tempfile.mkdtemp(prefix="rcpforge-pg-")
    as_postgres = ["su", "postgres", "-s", "/bin/sh", "-c"] if os.geteuid() == 0 else ["/bin/sh", "-c"]
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    port = free_port()
    data = f"{folder}/data"
    subprocess.run([*as_postgres, f"{bin_dir}/initdb -D {data} -A trust -U postgres >/dev/null"], check=True)
    subprocess.run([*as_postgres, f"{bin_dir}/pg_ctl -D {data} -w -l {folder}/log -o '-p {port} -k {folder} "
                    f"-c listen_addresses=127.0.0.1' start >/dev/null"], check=True)
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_postgres, f"{bin_dir}/pg_ctl -D {data} -m immediate stop >/dev/null"], check=False)
        shutil.rmtree(folder, ignore_errors=True)


def test_postgresql_fast_path_equals_the_mlflow_api(postgres_uri, tmp_path):
    ids = _fill(postgres_uri, tmp_path)
    assert is_sql_uri(postgres_uri)
    sql, api = load_runs_sql(postgres_uri, "camp"), load_runs(postgres_uri, "camp")
    assert _rows(sql) == _rows(api)
    assert sorted(sql["run_id"].to_pylist()) == sorted(ids)
    assert math.isnan({r["run_key"]: r for r in sql.to_pylist()}["k3"]["wall_s"])
