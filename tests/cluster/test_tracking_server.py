"""Ray and Slurm workers logging to the PostgreSQL-backed MLflow tracking server (the
`mlflow_server` fixture): a clean ledger, the records really in PostgreSQL, and no
schema change by anyone but the orchestrator, once, before the campaign's experiment
exists (so before any worker starts)."""

from __future__ import annotations

from collections import Counter

import pytest
from mlflow import MlflowClient

from rcpforge.sweeps.spec import load_campaign
from tests.cluster import pg_audit
from tests.cluster.helpers import assert_clean_ledger, paced_campaign
from tests.conftest import run_cli
from tests.helpers.campaigns import write_campaign

RUNS = 2  # one seed on each of the tiny campaign's two batch sizes


def _run(tmp_path, name: str, backend: dict, uri: str):
    # An instant program, no training: what is tested is where the workers' records go.
    data = {**paced_campaign(backend, evals=3, sleep=0.0), "name": name, "tracking": {"uri": uri}}
    path = write_campaign(tmp_path, data)
    proc = run_cli("run", str(path), "--backend", backend["kind"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"launched {RUNS} runs; {RUNS} converged" in proc.stdout, proc.stdout
    campaign = load_campaign(path)
    assert_clean_ledger(campaign, n_keys=RUNS, metric="eval_accuracy")
    return campaign


def _runs_in_postgres(backend_uri: str, experiment_name: str) -> int:
    rows = pg_audit.query(backend_uri, "SELECT count(*) FROM runs JOIN experiments USING (experiment_id) "
                                       "WHERE experiments.name = %s", (experiment_name,))
    return rows[0][0]


@pytest.fixture(scope="module")
def server_campaigns(request, mlflow_server, tmp_path_factory) -> dict[str, object]:
    """The campaign run on Ray and on Slurm against the server, both at once (each
    backend's time is mostly its workers and jobs starting), with the audit of schema
    changes installed before either starts."""
    from concurrent.futures import ThreadPoolExecutor

    backends = {"ray": {"kind": "ray", "num_cpus": 1, "address": request.getfixturevalue("ray_address")},
                "slurm": {"kind": "slurm", "time_min": 10, "array_parallelism": 2}}
    request.getfixturevalue("slurm")
    pg_audit.install(mlflow_server.backend_uri)
    with ThreadPoolExecutor(len(backends)) as pool:
        futures = {kind: pool.submit(_run, tmp_path_factory.mktemp(kind), f"pgserver_{kind}", backend,
                                     mlflow_server.url)
                   for kind, backend in backends.items()}
    return {kind: future.result() for kind, future in futures.items()}


@pytest.mark.parametrize("kind", ["ray", "slurm"])
def test_workers_log_to_the_postgresql_tracking_server(kind, server_campaigns, mlflow_server):
    campaign = server_campaigns[kind]
    assert campaign.tracking_uri.startswith("http://")
    assert _runs_in_postgres(mlflow_server.backend_uri, f"pgserver_{kind}") == RUNS
    # The server's database was migrated once when it started (mlflow_server.sh); over
    # HTTP neither the orchestrator nor a worker can change its schema, and none did.
    assert pg_audit.recorded(mlflow_server.backend_uri) == []


def test_on_a_fresh_database_only_the_orchestrator_creates_the_schema(mlflow_server, ray_address, tmp_path):
    """The tracking URI names the PostgreSQL database itself, so every worker opens it
    directly and could migrate it: the schema must exist, made once, before
    the campaign's experiment is created, which is before any run is launched."""
    with pg_audit.fresh_database(mlflow_server.backend_uri) as uri:
        campaign = _run(tmp_path, "pgfresh_ray", {"kind": "ray", "num_cpus": 1, "address": ray_address}, uri)
        ddl = pg_audit.recorded(uri)
        experiment = MlflowClient(tracking_uri=uri).get_experiment_by_name(campaign.name)
    created = Counter(d.object for d in ddl if d.tag == "CREATE TABLE")
    assert "public.runs" in created and "public.metrics" in created, created
    assert set(created.values()) == {1}, f"tables created more than once: {created}"
    # MLflow's own migration uses two sessions (create_all, then alembic); what matters
    # is that it all happened before the experiment, hence before any worker existed.
    late = [d for d in ddl if int(d.at.timestamp() * 1000) > experiment.creation_time]
    assert late == [], f"{len(late)} DDL commands after the experiment was created, first: {late[:3]}"
