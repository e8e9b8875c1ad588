"""A run that hangs without reporting an eval point is stopped after the stall timeout,
recorded `failed` with the reason, and its worker goes on with the next run."""

from __future__ import annotations

from mlflow import MlflowClient

from rcpforge.orchestrator.cli.app import EXIT_NO_OUTCOME
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_BATCH_SIZE, TAG_ERROR, TAG_SEED, TAG_STATUS
from tests.helpers.campaigns import tiny_campaign, write_campaign

STALL_S = 5


def test_a_hanging_run_is_stopped_and_recorded_failed(tmp_path, cli):
    """One worker; seed 0 hangs (at each batch size), seed 1 does not. Every run is of the
    instant trainer, so a good run reports its points at once on any machine: the stall
    timeout need not allow for training, and only a hanging run can reach it."""
    starts = tmp_path / "starts"
    data = tiny_campaign(recipes=["bf16"], seeds=2)
    data["trainer"] = dict(data["trainer"], kind="tests.helpers.faulty:FaultyTrainer", hang_seeds=[0],
                           starts_file=str(starts))
    data["backend"] = {"kind": "local", "workers": 1, "max_attempts": 1, "stall_timeout_s": STALL_S}
    path = write_campaign(tmp_path, data)
    proc = cli("run", str(path))
    assert proc.returncode == EXIT_NO_OUTCOME, proc.stderr
    campaign = load_campaign(path)
    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name(campaign.name).experiment_id])
    by_key = {(int(r.data.tags[TAG_SEED]), int(r.data.tags[TAG_BATCH_SIZE])): r for r in runs}
    assert len(runs) == 4 and sorted(by_key) == [(0, 16), (0, 64), (1, 16), (1, 64)]  # one attempt each
    for (seed, _), run in by_key.items():
        if seed == 0:
            assert run.data.tags[TAG_STATUS] == "failed" and run.info.status == "FAILED"
            assert f"stalled: no eval point for {STALL_S} s" in run.data.tags[TAG_ERROR]
        else:
            assert run.data.tags[TAG_STATUS] == "converged"
    # the one worker process started a hanging run and, once it was stopped, went on with
    # the next runs: a good run started after a hanging one, in the same process
    started = [line.split() for line in starts.read_text().splitlines()]
    assert len(started) == 4 and len({pid for _, pid in started}) == 1, started
    seeds = [seed for seed, _ in started]
    assert "1" in seeds[seeds.index("0") + 1:], started


class _SlowStore:
    """A run log whose write waits on an unavailable tracking store: it notes the stall
    timer as the write sees it (seconds left, 0 when disarmed)."""

    def __init__(self):
        self.timer_during_write: list[float] = []

    def eval_point(self, point) -> None:
        import signal

        self.timer_during_write.append(signal.getitimer(signal.ITIMER_REAL)[0])


def test_waiting_on_the_tracking_store_is_not_a_stall(tmp_path):
    """Retries of an unavailable store (up to tracking.retry_s) may outlast the stall
    timeout; that wait is not the trainer's stall, and the guard is armed again after.
    Shown by the timer's state, not by outwaiting it: disarmed through the write however
    long it takes, armed again with the whole timeout after (the timeout is long next to
    what runs between these lines on a loaded machine)."""
    import signal
    import time

    import pytest

    from rcpforge.orchestrator.execute import RunContext
    from rcpforge.orchestrator.stall import Stalled, StallGuard
    from rcpforge.trainers.contract import EvalPoint

    timeout_s = 1.0
    log = _SlowStore()
    with StallGuard(timeout_s) as guard:
        context = RunContext(log, tmp_path, "b", tmp_path, stall=guard)
        context.eval_point(EvalPoint(tokens=1, samples=1, metrics={"eval_loss": 1.0}))
        assert log.timer_during_write == [0.0]  # no stall can fire while the store is waited on
        assert signal.getitimer(signal.ITIMER_REAL)[0] > timeout_s / 2  # re-armed: the point is progress
        with pytest.raises(Stalled):
            time.sleep(60)  # the trainer itself hangs after the point: that is a stall
