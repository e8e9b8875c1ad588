"""The MLflow tracking server (PostgreSQL-backed) killed mid-campaign, kept down past
several retries, then started again on the same port and store: workers and the
orchestrator wait it out (tracking.retry_s), the campaign finishes without help, with
one MLflow run and one outcome per run key, no point written twice, and the same
analysis table as the campaign run undisturbed. A store that stays down past the window
ends `rcpforge run` with one line that names it and says what to do, and a rerun
resumes the campaign."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from rcpforge.analysis.load import load_runs
from rcpforge.analysis.rcp_table import rcp_table
from rcpforge.cluster.gang import free_port
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_ATTEMPTS, TAG_STATUS
from tests.cluster.helpers import assert_clean_ledger, paced_campaign, runs_of, start_cli, wait_for
from tests.conftest import run_cli
from tests.helpers.campaigns import tiny_campaign, write_campaign

OUTAGE_S = 3.0  # plus the restart (6-13 s): longer than the first retries (0.5, 1, 2, 4 s)


def _healthy(url: str) -> bool:
    try:
        return urllib.request.urlopen(f"{url}/health", timeout=1).status == 200
    except OSError:
        return False


class _Server:
    """An `mlflow server` of this test's own on the session's PostgreSQL store, in its
    own process group (it runs uvicorn as a child), so that a kill stops all of it."""

    def __init__(self, backend_uri: str, artifacts: Path, port: int):
        self.backend_uri, self.artifacts, self.port = backend_uri, artifacts, port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend_uri,
             "--default-artifact-root", str(self.artifacts), "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},  # no huey job runners
        )
        wait_for(lambda: _healthy(self.url) or self._exited(), f"mlflow server healthy on {self.url}", every_s=0.25)
        assert self.proc.poll() is None, f"mlflow server on {self.url} exited with {self.proc.returncode}"

    def _exited(self) -> bool:
        return self.proc.poll() is not None

    def kill(self) -> None:
        """SIGKILL to the whole group (uvicorn too, even if `mlflow server` itself already
        ended), once per start."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self.proc = None
        wait_for(lambda: not _healthy(self.url), f"mlflow server on {self.url} stopped", every_s=0.1)


def _table_rows(table: pa.Table, drop: tuple[str, ...] = ()) -> list[dict]:
    return table.drop_columns([c for c in drop if c in table.column_names]).to_pylist()


def _analysis(uri: str, name: str, benchmark: str, submission_runs: int) -> tuple[list[dict], list[dict]]:
    """The bf16 runs table (less what differs between two campaigns with the same seeds:
    MLflow run ids, run keys, wall times) and its RCP table."""
    runs = load_runs(uri, name)
    runs = runs.filter(pc.equal(runs["recipe"], "bf16"))
    table = rcp_table(runs, benchmark, submission_runs)
    return _table_rows(runs, drop=("run_id", "run_key", "wall_s")), _table_rows(table)


def _running(campaign) -> set[tuple[str, str]]:
    """(MLflow run, attempt) of every run whose status reads running."""
    return {(r.info.run_id, r.data.tags.get(TAG_ATTEMPTS)) for r in runs_of(campaign)[1]
            if r.data.tags.get(TAG_STATUS) == "running"}


def _kill_mid_run(server: _Server, campaign, proc: subprocess.Popen) -> None:
    """Kill the server once an attempt of this orchestrator runs (runs that a stopped
    orchestrator left reading `running` do not count)."""
    stale = _running(campaign)
    wait_for(lambda: _running(campaign) - stale, "a run in flight", proc)
    server.kill()


def test_server_stopped_mid_campaign_then_restarted(tmp_path, mlflow_server):
    """Two outages of one campaign, one server process of this test's own on the
    session's PostgreSQL store. First, longer than `tracking.retry_s`: the campaign
    stops with one line naming the server, and a rerun resumes it. Then shorter: the
    campaign waits it out and finishes without help."""
    name = f"outage-{uuid.uuid4().hex[:8]}"  # its own experiment in the shared database
    server = _Server(mlflow_server.backend_uri, tmp_path / "server-artifacts", free_port())
    folder = tmp_path / "outage"

    def campaign_file(retry_s: float) -> Path:
        # tracking settings are not part of a run's key: the same runs either way
        return write_campaign(folder, _paced(name, {"uri": server.url, "retry_s": retry_s}))

    campaign = load_campaign(campaign_file(2))
    proc = None
    server.start()
    try:
        # 1. down past the window: the run in flight gives up, then the orchestrator
        proc = start_cli("run", str(campaign_file(2)))
        _kill_mid_run(server, campaign, proc)
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 2 and "Traceback" not in out, out[-3000:]
        last = out.strip().splitlines()[-1]
        assert last.startswith("error: ") and f"tracking store {server.url} unavailable for 2 s" in last, out[-3000:]

        # 2. back, and the rerun meets an outage shorter than its window
        server.start()
        proc = start_cli("run", str(campaign_file(120)))
        _kill_mid_run(server, campaign, proc)
        time.sleep(OUTAGE_S)
        assert proc.poll() is None, "the campaign ended while the tracking server was down"
        server.start()
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]
        # the outage was felt by the runs in flight, and waited out
        assert f"tracking store unavailable: {server.url}" in out and "retrying" in out, out[-3000:]
        tokens = assert_clean_ledger(campaign, n_keys=6, metric="eval_accuracy")
    finally:
        if proc is not None and proc.poll() is None:  # a failed test leaves no orchestrator behind
            proc.kill()
            proc.communicate(timeout=60)
        server.kill()

    # the same runs undisturbed (on SQLite): the same results and the same analysis table
    quiet_path = write_campaign(tmp_path / "quiet", _paced(name, {}))
    proc = run_cli("run", str(quiet_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    quiet = load_campaign(quiet_path)
    undisturbed = _analysis(quiet.tracking_uri, quiet.name, quiet.benchmark, quiet.submission_runs)
    restored = _analysis(mlflow_server.backend_uri, campaign.name, campaign.benchmark, campaign.submission_runs)
    assert restored == undisturbed
    assert sorted(tokens.values()) == sorted(row["tokens_to_target"] for row in undisturbed[0])
    assert all(row["olympic_mean"] is not None for row in restored[1])  # the tables hold RCP numbers


def _paced(name: str, tracking: dict) -> dict:
    """Three seeds at each batch size of the instant paced program (a second a run, the
    outage's window to strike one in flight), in a store of `tracking`'s."""
    data = paced_campaign({"kind": "local", "workers": 2}, evals=5, sleep=0.2, seeds=3)
    return data | {"name": name, "tracking": tracking} if tracking else data | {"name": name}


def test_a_server_down_past_the_retry_window_ends_the_run_with_one_clear_line(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: a stopped server
    path = write_campaign(tmp_path, tiny_campaign(name="down", recipes=["bf16"], seeds=1,
                                                  tracking={"uri": url, "retry_s": 2}))
    proc = run_cli("run", str(path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    *waiting, last = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr, proc.stderr
    # while it waits it says so; then it stops with one line naming the store and the fix
    assert waiting and all("tracking store unavailable" in line and "retrying" in line for line in waiting)
    assert last.startswith("error: ") and f"tracking store {url} unavailable for 2 s (tracking.retry_s)" in last
    assert "start it again" in last and "rcpforge run" in last
