"""Real clusters for the backend tests: a Ray instance started by this test session (and
stopped by it: only what it started), and the one-node dev Slurm of
`cluster/dev/slurm.sh` (`make slurm-up`), which the Slurm tests need running."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import missing_service

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def slurm_ready() -> str | None:
    """None when a Slurm controller answers here, else why not."""
    if shutil.which("sbatch") is None:
        return "no Slurm here (sbatch not on PATH): start the dev cluster with `make slurm-up`"
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"sinfo failed: {err}"
    if proc.returncode != 0 or not any(s.startswith(("idle", "mixed", "alloc")) for s in proc.stdout.split()):
        return f"Slurm has no usable node (sinfo: {proc.stdout.strip() or proc.stderr.strip()}); run `make slurm-up`"
    return None


@pytest.fixture(scope="session")
def slurm() -> None:
    reason = slurm_ready()
    if reason:
        missing_service(reason)


@pytest.fixture(scope="session")
def ray_address():
    """The GCS address of a 2-CPU Ray instance owned by this test process."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
