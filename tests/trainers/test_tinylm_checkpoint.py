"""A tiny-LM run stopped mid-way and started again resumes from its checkpoint and ends
exactly where an uninterrupted run ends (same eval values, same tokens-to-target)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sweeps.expand import expand
from sweeps.spec import parse_campaign
from tests.helpers.campaigns import tiny_campaign
from trainers.contract import EvalPoint
from trainers.tinylm import checkpoint
from trainers.tinylm.train import TinyLMTrainer


class Stop(Exception):
    pass


class Recorder:
    def __init__(self, folder: Path, stop_after: int | None = None):
        self.output_dir, self.points, self.stop_after = folder, [], stop_after

    def eval_point(self, point: EvalPoint) -> None:
        self.points.append(point)
        if self.stop_after is not None and len(self.points) >= self.stop_after:
            raise Stop  # the job is killed right after this eval


def cut_and_resumed(spec, tmp_path: Path, stop_after: int) -> tuple[list[EvalPoint], dict, list[EvalPoint]]:
    """An uninterrupted run of `spec`, and one killed right after its `stop_after`-th eval
    and started again: the whole run's eval points, the checkpoint the second start
    found, and the second start's eval points."""
    whole = Recorder(tmp_path / "whole")
    whole.output_dir.mkdir()
    TinyLMTrainer().train(spec, whole)
    folder = tmp_path / "cut"
    folder.mkdir()
    with pytest.raises(Stop):
        TinyLMTrainer().train(spec, Recorder(folder, stop_after=stop_after))
    saved = torch.load(folder / checkpoint.FILENAME, weights_only=False)
    second = Recorder(folder)
    TinyLMTrainer().train(spec, second)
    return whole.points, saved, second.points


def _spec(every: int | None, recipe: str = "fp8_tensorwise"):
    data = tiny_campaign(recipes=[recipe], seeds=1)
    data["trainer"] = dict(data["trainer"], checkpoint_every_evals=every)
    return expand(parse_campaign(data))[0]


# nvfp4 draws stochastic-rounding numbers and fp8_delayed keeps amax histories: state
# outside the model and optimizer that the checkpoint must carry too; bf16 runs the CPU's
# own BF16 GEMMs (trainers/precision/reference.py).
@pytest.mark.parametrize("recipe", ["bf16", "fp8_tensorwise", "nvfp4", "fp8_delayed"])
def test_resume_from_checkpoint_matches_an_uninterrupted_run(tmp_path, recipe):
    spec = _spec(every=2, recipe=recipe)
    whole = Recorder(tmp_path / "whole")
    whole.output_dir.mkdir()
    reference = TinyLMTrainer().train(spec, whole)
    assert reference.status.value == "converged" and len(whole.points) >= 6

    folder = tmp_path / "cut"
    folder.mkdir()
    first = Recorder(folder, stop_after=5)
    with pytest.raises(Stop):
        TinyLMTrainer().train(spec, first)
    assert (folder / checkpoint.FILENAME).exists()
    second = Recorder(folder)
    resumed = TinyLMTrainer().train(spec, second)

    # checkpoints at evals 2 and 4: the second start begins after the 4th eval point
    starts = (folder / checkpoint.STARTS).read_text().split()
    assert starts[-1] == f"tokens={whole.points[3].tokens}"
    assert second.points[0].tokens == whole.points[4].tokens
    assert [p.metrics for p in second.points] == [p.metrics for p in whole.points[4:]]
    assert resumed.tokens_to_target == reference.tokens_to_target
    assert not (folder / checkpoint.FILENAME).exists()  # an outcome leaves no checkpoint


def test_unset_checkpointing_keeps_the_run_key():
    # The setting is left out of the spec unless set: old ledgers keep their keys.
    assert "checkpoint_every_evals" not in _spec(every=None).trainer
    assert _spec(every=None).run_key != _spec(every=3).run_key
