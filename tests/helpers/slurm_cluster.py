"""The two-node dev Slurm (`cluster/dev/slurm.sh start-two-node`, nodes n1 and n2 on this
machine, beside the one-node cluster) for the multi-node gang tests.

`two_node_slurm_conf` (session) starts it, or reuses it when it is up already (CI starts
it in .ci/run), and stops it at the end only if it started it. `two_node_slurm` points
this test's Slurm clients at it: SLURM_CONF in the environment, which the backend's
subprocesses (sbatch, squeue, sinfo, scancel) and its jobs inherit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
_SCRIPT = _ROOT / "cluster" / "dev" / "slurm.sh"
# Where slurm.sh writes the two-node cluster's conf (its TWO_CONF).
TWO_NODE_CONF = Path("/etc/slurm-two-node/slurm.conf")
NODES = ("n1", "n2")


def _nodes_up() -> bool:
    """Both nodes of the two-node cluster answer and can take jobs."""
    if not TWO_NODE_CONF.exists():
        return False
    try:
        proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=20,
                              env={**os.environ, "SLURM_CONF": str(TWO_NODE_CONF)})
    except (OSError, subprocess.TimeoutExpired):
        return False
    usable = {line.split()[0] for line in proc.stdout.splitlines()
              if line.split()[1:] and line.split()[1].startswith(("idle", "mixed", "alloc"))}
    return proc.returncode == 0 and usable >= set(NODES)


@pytest.fixture(scope="session")
def two_node_slurm_conf():
    from tests.conftest import missing_service  # here: tests/conftest.py imports this module

    if shutil.which("sbatch") is None:
        missing_service("no Slurm here (sbatch not on PATH): start it with `make slurm-two-node-up`")
    started_here = not _nodes_up()
    if started_here:
        proc = subprocess.run(["bash", str(_SCRIPT), "start-two-node"], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 or not _nodes_up():
            missing_service(f"the two-node dev Slurm did not start ({_SCRIPT} start-two-node): "
                            f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    try:
        yield TWO_NODE_CONF
    finally:
        if started_here:
            subprocess.run(["bash", str(_SCRIPT), "stop-two-node"], capture_output=True, timeout=120)


@pytest.fixture
def two_node_slurm(two_node_slurm_conf, monkeypatch) -> Path:
    monkeypatch.setenv("SLURM_CONF", str(two_node_slurm_conf))
    return two_node_slurm_conf
