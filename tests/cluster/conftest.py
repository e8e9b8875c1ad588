"""The backend tests' clusters (`slurm`, `ray_address`) are session fixtures of
`tests/conftest.py`, shared with the conformance suites. Here: the dev Slurm's accounting
database (`accounting`), and the stand-in `sbatch` of the tests that read what the Slurm
backend submits without a Slurm."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from tests.conftest import missing_service

# Stand-ins on PATH: `sbatch` copies the script it is given into its folder (0.sbatch,
# 1.sbatch, ...) and answers as sbatch does; submitit only asks that an `srun` exists.
_SBATCH = """#!/bin/sh
n=$(ls {kept} | wc -l)
cp "$1" {kept}/"$n.sbatch"
echo "Submitted batch job $((4200 + n))"
"""


@pytest.fixture
def sbatch(tmp_path, monkeypatch):
    """The folder the stand-in `sbatch` keeps each submitted script in."""
    tools, kept = tmp_path / "bin", tmp_path / "sbatch"
    tools.mkdir()
    kept.mkdir()
    (tools / "sbatch").write_text(_SBATCH.format(kept=shlex.quote(str(kept))))
    (tools / "srun").write_text("#!/bin/sh\nexit 1\n")
    for tool in tools.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    return kept


@pytest.fixture(scope="module")
def accounting(slurm) -> None:
    """The dev Slurm's accounting database answers; without one the test skips, unless
    RCPF_SLURM_ACCOUNTING=1 says it should be there (CI: then it fails)."""
    proc = subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True, text=True, timeout=30)
    if proc.returncode == 0:
        return
    reason = (f"no Slurm accounting (sacct: {proc.stderr.strip()[:200]}); "
              "start with RCPF_SLURM_ACCOUNTING=1 make slurm-up")
    if os.environ.get("RCPF_SLURM_ACCOUNTING") == "1":
        missing_service(reason)
    pytest.skip(reason)
