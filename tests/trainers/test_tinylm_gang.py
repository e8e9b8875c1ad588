"""The tiny LM in data parallel over 2 real gloo ranks (a real local gang): a run stopped
mid-way by its checkpoint-and-resume path ends exactly as the uninterrupted run does, every
rank's numerics included (delayed scaling's reduced amax history, per-rank stochastic
rounding)."""

from __future__ import annotations

import pytest

from rcpforge.cluster.backend import Job
from rcpforge.cluster.local import LocalBackend
from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.contract.gang import Gang
from tests.helpers import gang_training
from tests.helpers.campaigns import tiny_campaign

PAIR = Gang(1, 2)


def _run(backend: LocalBackend, spec_json: str, folder, stop_after: int | None = None) -> dict:
    folder.mkdir(exist_ok=True)
    backend.submit(Job("run", gang_training.train_rank, (spec_json, str(folder), stop_after), gang=PAIR))
    done = []
    while not done:
        done = backend.wait(timeout=60)
    assert done[0].error is None, done[0].error
    return done[0].value


@pytest.mark.parametrize("recipe", ["fp8_delayed", "nvfp4"])
def test_a_resumed_two_rank_run_ends_as_the_uninterrupted_one(tmp_path, recipe):
    trainer = dict(tiny_campaign()["trainer"], checkpoint_every_evals=1)
    campaign = parse_campaign(tiny_campaign(trainer=trainer, recipes=[recipe], seeds=1,
                                            launch={"processes_per_node": 2}), tmp_path)
    spec = next(s for s in expand(campaign) if s.batch_size == 16)
    assert spec.world_size == 2
    with LocalBackend(1, gang=PAIR, gpus=[]) as backend:
        whole = _run(backend, spec.model_dump_json(), tmp_path / "whole")
        assert whole["status"] == "converged"
        assert _run(backend, spec.model_dump_json(), tmp_path / "resumed", stop_after=2)["stopped"]
        assert (tmp_path / "resumed" / "checkpoint.pt").is_file()  # rank 0 wrote the gang's checkpoint
        resumed = _run(backend, spec.model_dump_json(), tmp_path / "resumed")
    starts = (tmp_path / "resumed" / "starts.log").read_text().split()
    assert starts[0] == "start" and starts[-1] != "tokens=0"  # the second start resumed mid-run
    for field in ("status", "tokens_to_target", "tokens_trained", "final_metric"):
        assert resumed[field] == whole[field], field
