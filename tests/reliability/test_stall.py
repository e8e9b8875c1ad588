"""A run that hangs without reporting an eval point is stopped after the stall timeout,
recorded `failed` with the reason, and its worker goes on with the next run."""

from __future__ import annotations

from mlflow import MlflowClient

from orchestrator.cli.app import EXIT_NO_OUTCOME
from sweeps.spec import load_campaign
from tests.helpers.campaigns import tiny_campaign, write_campaign
from trainers.contract.schema import TAG_ERROR, TAG_STATUS


def test_a_hanging_run_is_stopped_and_recorded_failed(tmp_path, cli):
    data = tiny_campaign(recipes=["bf16"], seeds=2)
    data["trainer"] = dict(data["trainer"], kind="tests.helpers.faulty:FaultyTrainer", hang_seeds=[1])
    data["backend"] = {"kind": "local", "workers": 2, "max_attempts": 1, "stall_timeout_s": 15}
    path = write_campaign(tmp_path, data)
    proc = cli("run", str(path))
    assert proc.returncode == EXIT_NO_OUTCOME, proc.stderr
    campaign = load_campaign(path)
    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name(campaign.name).experiment_id])
    by_seed: dict[int, list] = {}
    for run in runs:
        by_seed.setdefault(int(run.data.tags["rcpforge.seed"]), []).append(run)
    assert all(r.data.tags[TAG_STATUS] == "converged" for r in by_seed[0])
    for run in by_seed[1]:
        assert run.data.tags[TAG_STATUS] == "failed"
        assert "stalled: no eval point for 15 s" in run.data.tags[TAG_ERROR]
        assert run.info.status == "FAILED"


class _SlowStore:
    """A run log whose writes wait on an unavailable tracking store for `wait_s`."""

    def __init__(self, wait_s: float):
        self.wait_s = wait_s
        self.points = []

    def eval_point(self, point) -> None:
        import time

        time.sleep(self.wait_s)
        self.points.append(point)


def test_waiting_on_the_tracking_store_is_not_a_stall(tmp_path):
    """Retries of an unavailable store (up to tracking.retry_s) may outlast the stall
    timeout; that wait is not the trainer's stall, and the guard is armed again after."""
    import time

    import pytest

    from orchestrator.execute import RunContext
    from orchestrator.stall import Stalled, StallGuard
    from trainers.contract import EvalPoint

    log = _SlowStore(wait_s=0.6)
    with StallGuard(0.2) as guard:
        context = RunContext(log, tmp_path, "b", tmp_path, stall=guard)
        context.eval_point(EvalPoint(tokens=1, samples=1, metrics={"eval_loss": 1.0}))
        assert len(log.points) == 1  # three stall timeouts passed inside the write: no Stalled
        with pytest.raises(Stalled):
            time.sleep(2)  # the trainer itself hangs after the point: that is a stall
