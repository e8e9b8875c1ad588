"""The suite's CLI fork server (tests/helpers/cli_server.py) gives what a fresh
`python -m rcpforge.orchestrator.cli` gives: the same output and exit status, the
caller's environment and folder, the folder first on the import path, fresh random
seeds; so the tests that run commands through it prove what a real command does."""

from __future__ import annotations

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


def test_a_command_past_its_timeout_is_killed():
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli("status", "/nonexistent/campaign.yaml", timeout=0.001)
