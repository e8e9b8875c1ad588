"""The suite's CLI fork server (tests/helpers/cli_server.py) gives what a fresh
`python -m rcpforge.orchestrator.cli` gives: the same output and exit status, the
caller's environment and folder, the folder first on the import path, fresh random
seeds; so the tests that run commands through it prove what a real command does."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import ROOT, run_cli
from tests.helpers.cli_server import CliServer

PROBE = """
import os, random, sys
import numpy
print(os.environ.get("RCPF_TEST_PROBE"), os.getcwd(), random.random(), numpy.random.random())
print("to stderr", file=sys.stderr)
sys.exit(3)
"""


@pytest.mark.parametrize("args", [("--help",), ("nosuch",), ("status", "/nonexistent/campaign.yaml")])
def test_a_forked_command_answers_as_a_fresh_process(args):
    forked, fresh = run_cli(*args), run_cli(*args, fresh=True)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_a_forked_command_has_the_callers_environment_folder_and_import_path_and_fresh_seeds(tmp_path):
    server = CliServer(ROOT)
    try:
        # the module is made, and the variable set, after the server started
        (tmp_path / "users_probe.py").write_text(PROBE)
        env = {**os.environ, "RCPF_TEST_PROBE": "callers"}
        first, second = (server.run((), env, tmp_path, timeout=60, module="users_probe") for _ in range(2))
    finally:
        server.stop()
    assert first.returncode == 3 and first.stderr == "to stderr\n"
    value, folder, *draws = first.stdout.split()
    assert (value, folder) == ("callers", str(tmp_path))
    again = second.stdout.split()[2:]
    assert draws[0] != again[0] and draws[1] != again[1]  # each command draws its own seeds, numpy's too

USERS_JOB = """
import os

def where():
    return os.environ.get("RCPF_TEST_PROBE"), os.getcwd(), os.getppid()
"""

LOCAL_RUN = """
import json, os
from rcpforge.cluster.backend import Job
from rcpforge.cluster.local import LocalBackend
import users_job
if __name__ == "__main__":  # a worker imports this module again, as multiprocessing does
    with LocalBackend(1, gpus=[]) as backend:
        backend.submit(Job("t", users_job.where, ()))
        done = []
        while not done:
            done = backend.wait(timeout=1.0)
    print(json.dumps([os.getpid(), done[0].value, done[0].error]))
"""


def test_a_forked_commands_local_workers_share_one_fork_server_and_see_the_commands_world(tmp_path):
    server = CliServer(ROOT)
    try:
        answers = []
        for n in range(2):
            folder = tmp_path / str(n)
            folder.mkdir()
            (folder / "users_job.py").write_text(USERS_JOB)  # the user's module, made after the server started
            (folder / "users_local_run.py").write_text(LOCAL_RUN)
            env = {**os.environ, "RCPF_TEST_PROBE": f"command {n}"}
            answer = server.run((), env, folder, timeout=120, module="users_local_run")
            assert answer.returncode == 0, answer.stderr
            answers.append((folder, json.loads(answer.stdout.splitlines()[-1])))
    finally:
        server.stop()
    parents = set()
    for n, (folder, (command_pid, value, error)) in enumerate(answers):
        assert error is None
        probe, cwd, parent = value
        assert (probe, cwd) == (f"command {n}", str(folder))  # the command's environment and folder
        assert parent != command_pid  # forked from a fork server, not from the command
        parents.add(parent)
    assert len(parents) == 1  # one fork server for both commands: the server's


def test_a_command_past_its_timeout_is_killed():
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli("status", "/nonexistent/campaign.yaml", timeout=0.001)
