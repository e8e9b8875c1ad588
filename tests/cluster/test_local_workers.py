"""The local backend's workers are forked from a fork server that has imported what runs
need: each starts with it imported, sees the orchestrator's environment and folder as they
are when its job is sent (not as they were when the server started), and dies the moment
the orchestrator does, although its parent is the server. Instant jobs, no training."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

from rcpforge.cluster.backend import Job
from rcpforge.cluster.local import LocalBackend
from tests.conftest import ROOT
from tests.helpers import backend_jobs
from tests.helpers.processes import alive

# A fresh orchestrator process: the fork server of this test process may have started
# already, with another test's preload.
_PRELOADED = """
import json, sys
from rcpforge.cluster.backend import Job
from rcpforge.cluster.local import LocalBackend, start_worker_server
from tests.helpers import backend_jobs
start_worker_server(["mlflow", "torch"])
with LocalBackend(1, gpus=[]) as backend:
    backend.submit(Job("t", backend_jobs.imported, (["mlflow", "torch", "optuna"],)))
    done = []
    while not done:
        done = backend.wait(timeout=1.0)
print(json.dumps(done[0].value))
"""

_SLEEPER = """
import sys, time
from rcpforge.cluster.backend import Job
from rcpforge.cluster.local import LocalBackend
from tests.helpers import backend_jobs
backend = LocalBackend(1, gpus=[])
backend.submit(Job("t", backend_jobs.note_pid_and_sleep, (sys.argv[1], 120.0)))
while True:
    backend.wait(timeout=1.0)
"""


def _python(code: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, **kwargs)


def test_a_worker_starts_with_the_servers_modules_imported():
    proc = _python(_PRELOADED, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert out.strip().splitlines()[-1] == '{"mlflow": true, "torch": true, "optuna": false}'


def test_a_worker_sees_the_orchestrators_environment_and_folder_when_its_job_is_sent(tmp_path, monkeypatch):
    mark = uuid.uuid4().hex
    with LocalBackend(1, gpus=[]) as backend:  # the server (and a worker) may predate both
        monkeypatch.setenv("RCPF_TEST_MARK", mark)
        monkeypatch.chdir(tmp_path)
        backend.submit(Job("t", backend_jobs.environment_and_folder, ("RCPF_TEST_MARK",)))
        done = []
        deadline = time.monotonic() + 120
        while not done and time.monotonic() < deadline:
            done = backend.wait(timeout=1.0)
    assert done and done[0].error is None, done
    assert done[0].value == (mark, str(tmp_path))


def test_a_worker_dies_with_the_orchestrator_though_its_parent_is_the_fork_server(tmp_path):
    orchestrator = _python(_SLEEPER, str(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("*.pid")) and time.monotonic() < deadline:
            assert orchestrator.poll() is None, orchestrator.stderr.read().decode()
            time.sleep(0.1)
        (note,) = tmp_path.glob("*.pid")
        worker = int(note.read_text())
        assert os.getppid() != worker and alive(worker)
        orchestrator.send_signal(signal.SIGKILL)
        orchestrator.wait(timeout=30)
        deadline = time.monotonic() + 10  # the job sleeps 120 s: only the lifeline ends it
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(worker), "the worker outlived the orchestrator"
    finally:
        orchestrator.kill()
