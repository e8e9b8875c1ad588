"""The PostgreSQL-backed MLflow tracking server, started once per session by
`cluster/dev/mlflow_server.sh` (or reused: RCPF_TEST_TRACKING_URL and
RCPF_TEST_BACKEND_URI name a running one) and stopped if this session started it.

Where it cannot start: under CI (the CI variable set) the tests fail with the reason,
never skip silently; elsewhere they skip with the reason."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "cluster" / "dev" / "mlflow_server.sh"


@dataclass(frozen=True)
class Server:
    url: str  # http://127.0.0.1:PORT
    backend_uri: str  # postgresql+psycopg2://user:PASSWORD@127.0.0.1:PORT/db

    @property
    def password(self) -> str:
        return self.backend_uri.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]


def unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"required service unavailable under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def mlflow_server():
    if os.environ.get("RCPF_TEST_TRACKING_URL") and os.environ.get("RCPF_TEST_BACKEND_URI"):
        yield Server(os.environ["RCPF_TEST_TRACKING_URL"], os.environ["RCPF_TEST_BACKEND_URI"])
        return
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        unavailable("psycopg2 is not installed (pip install -e '.[test]')")
    folder = Path(tempfile.mkdtemp(prefix="rcpforge-mlflow-test-"))
    env = {**os.environ, "RCPF_MLFLOW_DIR": str(folder), "RCPF_MLFLOW_PORT": str(_free_port()),
           "RCPF_PG_PORT": str(_free_port()), "PYTHON": sys.executable}
    env.pop("RCPF_PG_PASSWORD", None)
    started = subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=300)
    try:
        if started.returncode != 0:
            unavailable(f"mlflow_server.sh start failed: {started.stderr.strip()[-500:]}")
        yield Server(f"http://127.0.0.1:{env['RCPF_MLFLOW_PORT']}", (folder / "backend_uri").read_text().strip())
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        subprocess.run(["rm", "-rf", str(folder)], check=False)
