"""The same campaign file run from two folders is one campaign: its relative SQLite store is
beside the file (as its default store, argv and workdir are), so the second launch finds
every run done and launches none (issue 52). An instant command program, no training."""

from __future__ import annotations

from rcpforge.sweeps.spec import load_campaign
from tests.cluster.helpers import paced_campaign, runs_of
from tests.conftest import run_cli
from tests.helpers.campaigns import write_campaign


def test_a_campaign_run_from_another_folder_then_from_its_own_trains_each_run_once(tmp_path):
    folder, elsewhere = tmp_path / "camp", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    data = {**paced_campaign({"kind": "local", "workers": 2}, evals=2, sleep=0.01), "tracking": {"uri": "sqlite:///my-store.db"}}
    path = write_campaign(folder, data)
    first = run_cli("run", "../camp/campaign.yaml", cwd=elsewhere)
    assert first.returncode == 0, first.stdout + first.stderr
    store = folder.resolve() / "my-store.db"
    assert store.exists() and not (elsewhere / "my-store.db").exists()
    assert f"tracking store: sqlite:///{store}" in first.stdout  # resolved, not as written
    status = run_cli("status", "../camp/campaign.yaml", cwd=elsewhere)
    assert status.returncode == 0 and "no such store" not in status.stdout + status.stderr
    again = run_cli("run", "campaign.yaml", cwd=folder)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to launch" in again.stdout
    _, runs = runs_of(load_campaign(path))
    assert len(runs) == 2 and all(r.data.tags["rcpforge.attempts"] == "1" for r in runs)
