"""`backend.address: ray://host:port` through Ray Client, against the real two-node Ray's
client server (tests/helpers/ray_cluster.py): one-process runs (Ray tasks) and 2-rank
gangs across the two nodes (placement groups and actors) both finish through
`rcpforge run`. The job-level runtime environment cannot go through Ray Client, so each
task and actor carries it (cluster/ray_backend.py `_connect`): without that, the client
server fails to start, or the workers cannot import the job."""

from __future__ import annotations

from pathlib import Path

import pytest

from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_WORLD_SIZE
from tests.cluster.helpers import assert_clean_ledger, ddp_command_campaign, paced_campaign, runs_of
from tests.conftest import run_cli
from tests.helpers.campaigns import write_campaign


def _client_server_log(cluster) -> str:
    """The end of the head's Ray Client server logs: why a connection was refused."""
    logs = Path(cluster.temp_dir) / "session_latest" / "logs"
    return "".join(f"\n--- {f.name}\n" + f.read_text(errors="replace")[-3000:]
                   for f in sorted(logs.glob("ray_client_server*")))


def _client_backend(address: str) -> dict:
    return {"kind": "ray", "address": address, "num_cpus": 1, "placement_strategy": "STRICT_SPREAD",
            "max_retries": 0}


def test_one_process_runs_and_gangs_run_through_ray_client(two_node_ray, tmp_path):
    backend = _client_backend(two_node_ray.client_address)
    for name, data in (("tasks", paced_campaign(backend, evals=2, sleep=0.1)),
                       ("gangs", ddp_command_campaign(backend, {"nodes": 2, "processes_per_node": 1}))):
        data["name"] = f"client-{name}"
        path = write_campaign(tmp_path / name, data)
        proc = run_cli("run", str(path))
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0 and "Traceback" not in output, output[-3000:] + _client_server_log(two_node_ray)
        campaign = load_campaign(path)
        tokens = assert_clean_ledger(campaign, 2, metric="eval_accuracy")
        assert all(t is not None for t in tokens.values()), (name, tokens)
        _, runs = runs_of(campaign)
        assert {r.data.tags[TAG_WORLD_SIZE] for r in runs} == ({"1"} if name == "tasks" else {"2"}), name


def test_a_refused_ray_client_connection_is_tried_again(monkeypatch):
    """Ray's head sometimes loses the server process it starts for a client at once (the
    refusal seen in CI); a new connection gets a new one. Logic only: ray.init stubbed."""
    import ray

    from rcpforge.cluster import ray_backend
    from rcpforge.cluster.backend import BackendError

    refusal = ConnectionAbortedError("Initialization failure from server:\nTraceback ...\nRuntimeError: Starting "
                                     "Ray client server failed. See ray_client_server_23000.err for detailed logs.")
    calls: list[dict] = []

    def init(**kwargs):
        calls.append(kwargs)
        if len(calls) <= failures:
            raise refusal

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(ray_backend, "check_reachable", lambda address: None)
    monkeypatch.setattr(ray_backend, "_CLIENT_RETRY_S", 0.0)
    failures = 2
    owned, options = ray_backend._connect("ray://head:10001", None)
    assert owned and len(calls) == 3 and "runtime_env" in options and "runtime_env" not in calls[-1]
    calls.clear()
    failures = ray_backend._CLIENT_TRIES
    with pytest.raises(BackendError, match="Initialization failure from server: RuntimeError: Starting Ray client"):
        ray_backend._connect("ray://head:10001", None)
    assert len(calls) == ray_backend._CLIENT_TRIES
    calls.clear()
    with pytest.raises(BackendError):  # a GCS address is not Ray Client's: one try
        ray_backend._connect("head:6379", None)
    assert len(calls) == 1
