"""Job states from Slurm's accounting database (`RCPF_SLURM_ACCOUNTING=1
cluster/dev/slurm.sh start`: slurmdbd on MariaDB): real jobs, real `sacct`. Without
accounting the test skips, unless RCPF_SLURM_ACCOUNTING=1 says it should be there (CI
then fails, see missing_service): the `accounting` fixture of tests/cluster/conftest.py."""

from __future__ import annotations

import os
import subprocess

from rcpforge.cluster.slurm_states import job_states, sacct_states
from tests.cluster.helpers import wait_for


def _sbatch(tmp_path, command: str) -> str:
    proc = subprocess.run(["sbatch", "--parsable", "-o", str(tmp_path / "%j.out"), "-t", "2", "--wrap", command],
                          capture_output=True, text=True, timeout=30, check=True)
    return proc.stdout.strip().split(";")[0]


def test_sacct_has_the_real_end_states_of_jobs(accounting, tmp_path, monkeypatch):
    failed, done = _sbatch(tmp_path, "exit 3"), _sbatch(tmp_path, "true")
    # what squeue no longer lists is read from sacct alone: ask it directly
    states = wait_for(lambda: (s := sacct_states([failed, done])) and s.get(failed) == "FAILED"
                      and s.get(done) == "COMPLETED" and s, "sacct reports both jobs ended", limit_s=120)
    assert states == {failed: "FAILED", done: "COMPLETED"}
    assert job_states([failed, done]) == states  # squeue and sacct agree where both answer
    # Once squeue has forgotten the jobs (after MinJobAge), their states come from sacct:
    # an squeue that lists nothing stands in for that wait.
    forgetful = tmp_path / "bin"
    forgetful.mkdir()
    (forgetful / "squeue").write_text("#!/bin/sh\nexit 0\n")
    (forgetful / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{forgetful}:{os.environ['PATH']}")
    assert job_states([failed, done]) == states


def test_a_job_unknown_to_slurm_has_no_state(accounting):
    assert sacct_states(["999999999"]) == {}
    assert job_states(["999999999"]) == {}
