"""The two-node dev Slurm (`cluster/dev/slurm.sh start-two-node`, nodes n1 and n2 on this
machine, beside the one-node cluster) for the multi-node gang tests.

`two_node_slurm_conf` (session) starts it, or reuses it when it is up already (CI starts
it in .ci/run), and stops it at the end only if it started it. `two_node_slurm` points
this test's Slurm clients at it: SLURM_CONF in the environment, which the backend's
subprocesses (sbatch, squeue, sinfo, scancel) and its jobs inherit.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
_SCRIPT = _ROOT / "cluster" / "dev" / "slurm.sh"
# Where slurm.sh writes the two-node cluster's conf (its TWO_CONF).
TWO_NODE_CONF = Path("/etc/slurm-two-node/slurm.conf")
NODES = ("n1", "n2")


def _nodes_up(conf: Path, nodes: tuple[str, ...]) -> bool:
    """Every one of `nodes` of the cluster of `conf` answers and can take jobs."""
    if not conf.exists():
        return False
    try:
        proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=20,
                              env={**os.environ, "SLURM_CONF": str(conf)})
    except (OSError, subprocess.TimeoutExpired):
        return False
    usable = {line.split()[0] for line in proc.stdout.splitlines()
              if line.split()[1:] and line.split()[1].startswith(("idle", "mixed", "alloc"))}
    return proc.returncode == 0 and usable >= set(nodes)


def _dev_cluster(conf: Path, nodes: tuple[str, ...], command: str, hint: str) -> Iterator[Path]:
    """A session's use of one of slurm.sh's extra clusters: reused when up (CI starts them
    in .ci/run), else started by `slurm.sh <command>` and stopped at the end."""
    from tests.conftest import missing_service  # here: tests/conftest.py imports this module

    if shutil.which("sbatch") is None:
        missing_service(f"no Slurm here (sbatch not on PATH): start it with `{hint}`")
    started_here = not _nodes_up(conf, nodes)
    if started_here:
        proc = subprocess.run(["bash", str(_SCRIPT), command], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 or not _nodes_up(conf, nodes):
            missing_service(f"the dev Slurm of `{_SCRIPT} {command}` did not start ({hint}): "
                            f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    try:
        yield conf
    finally:
        if started_here:
            subprocess.run(["bash", str(_SCRIPT), command.replace("start", "stop")], capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def two_node_slurm_conf():
    yield from _dev_cluster(TWO_NODE_CONF, NODES, "start-two-node", "make slurm-two-node-up")


@pytest.fixture
def two_node_slurm(two_node_slurm_conf, monkeypatch) -> Path:
    monkeypatch.setenv("SLURM_CONF", str(two_node_slurm_conf))
    return two_node_slurm_conf


# The limits cluster (`cluster/dev/slurm.sh start-limits`): one node, l1, MaxArraySize=6 and
# a QOS of 8 submitted jobs per user enforced through the accounting database.
LIMITS_CONF = Path("/etc/slurm-limits/slurm.conf")
LIMITS_CTLD_PID = Path("/var/lib/rcpforge-slurm-limits/slurmctld.pid")  # slurm.sh's LIMITS_STATE
LIMITS_QOS = "rcpf-limited"
LIMITS_MAX_SUBMIT = 8


@pytest.fixture(scope="session")
def limits_slurm_conf():
    yield from _dev_cluster(LIMITS_CONF, ("l1",), "start-limits", "make slurm-limits-up")


@pytest.fixture
def limits_slurm(limits_slurm_conf, monkeypatch) -> Path:
    """This test's Slurm clients and jobs go to the limits cluster, its QOS at 8 submitted
    jobs per user (restored after the test, whatever it changed)."""
    monkeypatch.setenv("SLURM_CONF", str(limits_slurm_conf))
    set_qos(MaxSubmitJobsPerUser=LIMITS_MAX_SUBMIT, MaxJobsPerUser=-1)
    yield limits_slurm_conf
    set_qos(MaxSubmitJobsPerUser=LIMITS_MAX_SUBMIT, MaxJobsPerUser=-1)


def set_qos(**limits: int) -> None:
    """Set limits of the limits cluster's QOS (-1 lifts one); the controller applies them at once."""
    subprocess.run(["sacctmgr", "-i", "modify", "qos", LIMITS_QOS, "set", *(f"{k}={v}" for k, v in limits.items())],
                   capture_output=True, text=True, timeout=60, check=True)


def restart_limits_controller(down_s: float) -> None:
    """Stop the limits cluster's slurmctld, leave it down `down_s` seconds, start it again
    (its jobs are kept in its state folder) and wait until its node takes jobs."""
    from tests.cluster.helpers import wait_for  # here: tests/conftest.py imports this module

    pid = int(LIMITS_CTLD_PID.read_text())
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not _alive(pid), "slurmctld to stop", limit_s=60)
    time.sleep(down_s)
    env = {**os.environ, "SLURM_CONF": str(LIMITS_CONF)}
    subprocess.run(["slurmctld", "-f", str(LIMITS_CONF)], check=True, timeout=60, env=env)
    wait_for(lambda: subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env).stdout
             .strip().startswith(("idle", "mixed", "alloc")), "the node to take jobs again", limit_s=60)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextmanager
def limits_max_array(size: int, restart: bool = True) -> Iterator[None]:
    """The limits cluster's slurm.conf with MaxArraySize=`size` for a while, then as slurm.sh
    wrote it. `restart`: its controller restarted, which enforces the new value; else only
    `scontrol reconfigure`d, which reports the new value but keeps enforcing the one it
    started with (what an operator who did not restart it leaves)."""
    written = LIMITS_CONF.read_text()
    LIMITS_CONF.write_text(re.sub(r"(?m)^MaxArraySize=\d+$", f"MaxArraySize={size}", written))
    try:
        _apply(restart)
        yield
    finally:
        LIMITS_CONF.write_text(written)
        _apply(restart)


def _apply(restart: bool) -> None:
    if restart:
        restart_limits_controller(down_s=0)
    else:
        subprocess.run(["scontrol", "reconfigure"], check=True, timeout=60, capture_output=True,
                       env={**os.environ, "SLURM_CONF": str(LIMITS_CONF)})
