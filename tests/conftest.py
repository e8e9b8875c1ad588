from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from rcpforge.cluster.gang import free_port
from tests.helpers.cli_server import CliServer
from tests.helpers.ray_cluster import two_node_ray  # noqa: F401 - the two-node Ray of tests/cluster/test_ray_gangs.py
from tests.helpers.skip_guard import (  # noqa: F401 - hooks: in CI a skip not on tests/allowed_skips.txt fails
    pytest_configure,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_terminal_summary,
)

# where the suite's time goes (RCPF_TEST_TIMING) and how it runs side by side (make test)
pytest_plugins = ["tests.helpers.timing", "tests.helpers.xdist_groups"]

# CI runs every property test on a fixed sequence of examples: a fuzz target either
# passes there every time or fails every time, never by the luck of a draw.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parents[1]


_cli_server: CliServer | None = None


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600,
            fresh: bool = False) -> subprocess.CompletedProcess:
    """Run the real `rcpforge` command line in its own process: forked from the suite's
    CLI server, whose libraries are already imported (tests/helpers/cli_server.py), or
    with `fresh` (or RCPF_TEST_CLI_FORK=0) a fresh interpreter."""
    global _cli_server
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    if not fresh and os.environ.get("RCPF_TEST_CLI_FORK", "1") != "0":
        if _cli_server is None or _cli_server.proc.poll() is not None:
            _cli_server = CliServer(ROOT)
        return _cli_server.run(args, env, cwd or ROOT, timeout)
    return subprocess.run(
        [sys.executable, "-m", "rcpforge.orchestrator.cli", *args],
        cwd=cwd or ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def finished(tmp_path_factory):
    """The tiny campaign (12 real runs), run once by the CLI and then run again; shared
    by every test that needs a finished campaign."""
    from rcpforge.sweeps.spec import load_campaign
    from tests.helpers.campaigns import tiny_campaign, write_campaign

    folder = tmp_path_factory.mktemp("campaign")
    path = write_campaign(folder, tiny_campaign())
    first = run_cli("run", str(path))
    assert first.returncode == 0, first.stderr
    second = run_cli("run", str(path))
    return path, load_campaign(path), first, second


def missing_service(reason: str) -> None:
    """A test needs a service that is not here: skip on a developer's machine, but fail in
    CI (CI=true), whose .ci/run installs and starts every service: a skip there would
    pass a test that never ran."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must provide it: see .ci/run)")
    pytest.skip(reason)


@dataclass(frozen=True)
class Server:
    url: str  # http://127.0.0.1:PORT
    backend_uri: str  # postgresql+psycopg2://user:PASSWORD@127.0.0.1:PORT/db

    @property
    def password(self) -> str:
        return self.backend_uri.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]


@pytest.fixture(scope="session")
def mlflow_server():
    """The PostgreSQL-backed MLflow tracking server, started once per session by
    `cluster/dev/mlflow_server.sh` (or reused: RCPF_TEST_TRACKING_URL and
    RCPF_TEST_BACKEND_URI name a running one) and stopped if this session started it.
    Shared by the reliability and the cluster tests; where it cannot start, CI fails
    and elsewhere the test skips, with the reason (`missing_service`)."""
    if os.environ.get("RCPF_TEST_TRACKING_URL") and os.environ.get("RCPF_TEST_BACKEND_URI"):
        yield Server(os.environ["RCPF_TEST_TRACKING_URL"], os.environ["RCPF_TEST_BACKEND_URI"])
        return
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        missing_service("psycopg2 is not installed (pip install -e '.[test]')")
    script = ROOT / "cluster" / "dev" / "mlflow_server.sh"
    folder = Path(tempfile.mkdtemp(prefix="rcpforge-mlflow-test-"))
    env = {**os.environ, "RCPF_MLFLOW_DIR": str(folder), "RCPF_MLFLOW_PORT": str(free_port()),
           "RCPF_PG_PORT": str(free_port()), "PYTHON": sys.executable}
    env.pop("RCPF_PG_PASSWORD", None)
    started = subprocess.run(["bash", str(script), "start"], env=env, capture_output=True, text=True, timeout=300)
    try:
        if started.returncode != 0:
            missing_service(f"mlflow_server.sh start failed: {started.stderr.strip()[-500:]}")
        yield Server(f"http://127.0.0.1:{env['RCPF_MLFLOW_PORT']}", (folder / "backend_uri").read_text().strip())
    finally:
        subprocess.run(["bash", str(script), "stop"], env=env, capture_output=True, timeout=120)
        subprocess.run(["rm", "-rf", str(folder)], check=False)


# --- real clusters: a Ray instance started by this test session (and stopped by it: only
# what it started), and the one-node dev Slurm of `cluster/dev/slurm.sh` (`make slurm-up`).
# Here, not under tests/cluster, because the backend tests and the conformance suites
# share them (one Ray per session: a second `ray.init` in one process fails).

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


# The two-node dev Slurm, for the multi-node gang tests (tests/cluster/test_slurm_gangs.py).
from tests.helpers.slurm_cluster import (  # noqa: E402, F401
    limits_slurm,
    limits_slurm_conf,
    two_node_slurm,
    two_node_slurm_conf,
)


@pytest.fixture(scope="session")
def round_v50(tmp_path_factory) -> Path:
    """The whole shared v5.0 round, unpacked once a session (about 0.5 s, 32 MB)."""
    from tests.helpers.round_data import unpack_round

    return unpack_round(tmp_path_factory.mktemp("round_v50"))


@pytest.fixture(scope="session")
def round_v50_subset(tmp_path_factory) -> Path:
    """A few submitters' results directories of the v5.0 round with their system files,
    as the repository carries them (tests/data/): every clone has them."""
    from tests.helpers.round_data import SUBSET_TAR, unpack_round

    return unpack_round(tmp_path_factory.mktemp("round_v50_subset"), SUBSET_TAR)
