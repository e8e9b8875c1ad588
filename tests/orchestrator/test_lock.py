from __future__ import annotations

from rcpforge.orchestrator.campaign import campaign_lock
from rcpforge.sweeps.spec import load_campaign
from tests.helpers.campaigns import tiny_campaign, write_campaign


def test_a_second_orchestrator_of_the_same_campaign_is_refused(tmp_path, cli):
    path = write_campaign(tmp_path, tiny_campaign())
    with campaign_lock(load_campaign(path)):
        proc = cli("run", str(path))
    assert proc.returncode == 2
    assert "already being run by another rcpforge process" in proc.stderr
    assert not (tmp_path / "rcpforge-mlflow.db").exists()  # refused before touching the store
