"""Run folders on a full disk (a 12 KiB tmpfs mounted on `rcpforge-runs/`): a run that
cannot write its result.txt is recorded failed with the reason, the campaign goes on,
and no half-written result file is left."""

from __future__ import annotations

import os
import subprocess

import pytest
from mlflow import MlflowClient

from rcpforge.orchestrator.cli.app import EXIT_NO_OUTCOME
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_ERROR, TAG_STATUS
from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.reliability.conftest import unavailable


@pytest.fixture
def small_disk(tmp_path):
    folder = tmp_path / "camp" / "rcpforge-runs"
    folder.mkdir(parents=True)
    if os.geteuid() != 0:
        unavailable("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12k", "tmpfs", str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        unavailable(f"mount -t tmpfs refused: {mounted.stderr.strip()}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def test_runs_that_cannot_write_their_files_fail_cleanly(small_disk, cli):
    data = tiny_campaign(recipes=["bf16"], seeds=2)
    data["backend"] = {"kind": "local", "workers": 2, "max_attempts": 1}
    path = write_campaign(small_disk.parent, data)
    proc = cli("run", str(path))
    assert proc.returncode == EXIT_NO_OUTCOME, proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr

    campaign = load_campaign(path)
    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name(campaign.name).experiment_id])
    assert len(runs) == 4  # every run has a record: the campaign went on past the failures
    failed = [r for r in runs if r.data.tags[TAG_STATUS] == "failed"]
    assert failed, "12 KiB holds at most two result files: some run must have failed"
    for run in failed:
        assert "No space left on device" in run.data.tags[TAG_ERROR]
        assert "tokens_to_target" not in run.data.metrics
    assert not list(small_disk.rglob("*.partial"))
    for result in small_disk.rglob("result.txt"):  # any result file left is whole
        assert '"key": "run_stop"' in result.read_text().splitlines()[-1]
