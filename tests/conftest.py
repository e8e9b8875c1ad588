from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# CI runs every property test on a fixed sequence of examples: a fuzz target either
# passes there every time or fails every time, never by the luck of a draw.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the real `rcpforge` command line in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=cwd or ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def finished(tmp_path_factory):
    """The tiny campaign (12 real runs), run once by the CLI and then run again; shared
    by every test that needs a finished campaign."""
    from sweeps.spec import load_campaign
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
