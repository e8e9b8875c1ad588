"""A real two-node Ray on this machine (two `ray start` processes, one CPU each), and a
driver that runs RayBackend jobs against it in a fresh process.

Why a separate driver process: one process joins one Ray cluster (`ray.init` once), and
this test process may already be connected to the session's one-node instance
(`ray_address`). Disconnecting that one would break the suites that share it, so the
backend under test runs in `python -m tests.helpers.ray_cluster`, which reads what to
submit as JSON on stdin and prints every completion as JSON.

The cluster is stopped by the processes it started (they carry its temp dir in their
command lines), never with `ray stop`, which would stop every Ray on the machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rcpforge.cluster.gang import free_port

ROOT = Path(__file__).resolve().parents[2]
# Ray's worker ports are 10002-19999 by default: a head port there fails to start.
HEAD_PORTS = range(6400, 9999)
DRIVER_TIMEOUT_S = 120


@dataclass(frozen=True)
class TwoNodeRay:
    address: str  # 127.0.0.1:PORT, the head's GCS
    node_ids: tuple[str, ...]
    client_address: str  # ray://127.0.0.1:PORT, the head's Ray Client server
    temp_dir: str  # the cluster's logs are under it (session_latest/logs)


def _env() -> dict[str, str]:
    return {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}


def _processes_of(temp_dir: str) -> list[int]:
    """The processes of the cluster under `temp_dir`: those with it in their command line,
    and those that renamed themselves (Ray's dashboard and runtime-env agents, its client
    server) but still hold a log file under it open."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if temp_dir.encode() in (entry / "cmdline").read_bytes() or _holds_file_under(entry, temp_dir):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _holds_file_under(proc: Path, folder: str) -> bool:
    try:
        fds = list((proc / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd).startswith(folder + "/"):
                return True
        except OSError:
            continue
    return False


def _stop(temp_dir: str) -> None:
    for sig, settle in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
        pids = _processes_of(temp_dir)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + settle
        while _processes_of(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
    left = _processes_of(temp_dir)
    # a process left behind keeps a core and 100 MB busy for the rest of the suite
    assert not left, f"the two-node Ray under {temp_dir} left processes running: {left}"


def drive(request: dict[str, Any]) -> dict[str, Any]:
    """Run `request` (see `main`) in a fresh driver process; its JSON answer."""
    proc = subprocess.run([sys.executable, "-m", "tests.helpers.ray_cluster"], input=json.dumps(request),
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def two_node_ray():
    ray_cli = str(Path(sys.executable).parent / "ray")
    # A short path: Ray's socket paths live under it and a Unix socket path is short.
    temp_dir = tempfile.mkdtemp(prefix="rcpf-ray2-", dir="/tmp")
    # Held until Ray binds them (cluster/gang.py free_port): a test session running beside
    # this one, scanning the same range, does not take them meanwhile.
    port = free_port(ports=HEAD_PORTS)
    client_port = free_port(ports=HEAD_PORTS)
    # No log monitor: the drivers do not take the workers' output (log_to_driver=False), and
    # each node's monitor would poll its log files for the rest of the session.
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats", "--include-log-monitor=false"]
    try:
        for args in (["--head", f"--port={port}", f"--ray-client-server-port={client_port}",
                      "--include-dashboard=false", f"--temp-dir={temp_dir}"],
                     [f"--address=127.0.0.1:{port}"]):
            started = subprocess.run([ray_cli, "start", *args, *common], env=_env(), capture_output=True,
                                     text=True, timeout=120)
            assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
        ready = drive({"address": f"127.0.0.1:{port}", "nodes": 2})
        yield TwoNodeRay(f"127.0.0.1:{port}", tuple(ready["node_ids"]), f"ray://127.0.0.1:{client_port}", temp_dir)
    finally:
        _stop(temp_dir)
        subprocess.run(["rm", "-rf", temp_dir], check=False)


def main() -> None:
    """The driver, reading JSON on stdin. {"address", "nodes": N}: waits for N live
    nodes, prints {"node_ids"}. {"address", "settings": {RayBackendSpec fields}, "gang":
    {the campaign's Gang fields}, "jobs": [{"task_id", "fn" (a name in
    tests/helpers/backend_jobs.py), "args", "gang"}]}: submits every job to a RayBackend,
    prints {"done": [{"task_id", "value", "error", "after_s"}], "groups": [the state of
    every placement group once all jobs are reported]}."""
    import ray

    from rcpforge.cluster.backend import Job
    from rcpforge.cluster.ray_backend import RayBackend
    from rcpforge.sweeps.backends import RayBackendSpec
    from rcpforge.trainers.contract.gang import Gang
    from tests.helpers import backend_jobs

    request = json.loads(sys.stdin.read())
    jobs = request.get("jobs", [])
    if not jobs:  # is the cluster up: its live nodes
        ray.init(address=request["address"], include_dashboard=False, configure_logging=False, log_to_driver=False)
        deadline = time.monotonic() + 60
        while len(nodes := [n["NodeID"] for n in ray.nodes() if n.get("Alive")]) < request["nodes"]:
            if time.monotonic() > deadline:
                raise SystemExit(f"the Ray cluster has {len(nodes)} live nodes after 60 s, not {request['nodes']}")
            time.sleep(0.3)
        ray.shutdown()
        print(json.dumps({"node_ids": nodes}))
        return
    # The backend joins the cluster itself (and leaves it on close), as a campaign's does.
    settings = RayBackendSpec(kind="ray", address=request["address"], **request.get("settings", {}))
    backend = RayBackend(settings, gang=Gang(**request.get("gang", {})))
    answer: dict[str, Any] = {"done": []}
    start = time.monotonic()
    for job in jobs:
        backend.submit(Job(job["task_id"], getattr(backend_jobs, job["fn"]), tuple(job.get("args", ())),
                           gang=Gang(**job.get("gang", {}))))
    while backend.in_flight() and time.monotonic() < start + DRIVER_TIMEOUT_S - 20:
        for done in backend.wait(timeout=1.0):
            answer["done"].append({"task_id": done.task_id, "value": done.value, "error": done.error,
                                   "after_s": time.monotonic() - start})
    answer["groups"] = [g["state"] for g in ray.util.placement_group_table().values()]
    backend.close()
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
