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


def test_a_second_store_for_the_same_runs_folder_is_refused_naming_both(tmp_path):
    """Two files of one campaign beside each other, tracking in two stores: the second
    would launch every run again into the first's folders. It is refused, one line naming
    both stores, and its store is not made."""
    data = paced_campaign({"kind": "local", "workers": 2}, evals=2, sleep=0.01)
    first_path = write_campaign(tmp_path, {**data, "tracking": {"uri": "sqlite:///first.db"}})
    first = run_cli("run", str(first_path))
    assert first.returncode == 0, first.stdout + first.stderr
    (tmp_path / "second.yaml").write_text(first_path.read_text().replace("first.db", "second.db"))
    second = run_cli("run", str(tmp_path / "second.yaml"))
    assert second.returncode == 2, second.stdout + second.stderr
    errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, second.stderr
    assert f"sqlite:///{tmp_path.resolve() / 'first.db'}" in errors[0] and "second.db" in errors[0], errors[0]
    assert not (tmp_path / "second.db").exists()
    # the campaign folder moved whole keeps its store: nothing refused, nothing launched again
    moved = tmp_path.parent / f"{tmp_path.name}-moved"
    tmp_path.rename(moved)
    again = run_cli("run", str(moved / first_path.name))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to launch" in again.stdout


def test_the_store_recorded_keeps_no_password_and_a_rotated_one_is_the_same_store(tmp_path):
    from rcpforge.orchestrator.store_owner import OWNER_FILE, claim_runs_folder

    folder = tmp_path / "rcpforge-runs" / "c"
    claim_runs_folder(folder, "postgresql://bob:old-secret@db:5432/mlflow")
    assert "old-secret" not in (folder / OWNER_FILE).read_text()
    claim_runs_folder(folder, "postgresql://bob:new-secret@db:5432/mlflow")  # the same store: no error
