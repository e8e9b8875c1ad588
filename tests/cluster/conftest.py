"""The backend tests' clusters (`slurm`, `ray_address`) are session fixtures of
`tests/conftest.py`, shared with the conformance suites. Here: the stand-in `sbatch` of
the tests that read what the Slurm backend submits without a Slurm."""

from __future__ import annotations

import os
import shlex

import pytest

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
