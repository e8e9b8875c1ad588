"""A tiny-LM run stopped mid-way and started again resumes from its checkpoint and ends
exactly where an uninterrupted run ends (same eval values, same tokens-to-target)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.contract import EvalPoint, Reporter
from rcpforge.trainers.tinylm import checkpoint
from rcpforge.trainers.tinylm.distributed import DataParallel
from rcpforge.trainers.tinylm.settings import TinyLMSettings
from rcpforge.trainers.tinylm.train import TinyLMTrainer, _Run, evaluate
from tests.helpers.campaigns import tiny_campaign


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


PREMOVE = Path(__file__).resolve().parent / "golden" / "premove_checkpoint"


def test_a_checkpoint_written_before_the_one_package_move_resumes(tmp_path):
    """golden/premove_checkpoint: the nvfp4 run of `_spec(every=2)` killed after its 5th
    eval, checkpointed by the code of ba15017 (before the folders became rcpforge's
    subpackages), with the eval points of that code's uninterrupted run. It resumes after
    its 4th eval and goes on as that run did (a checkpoint names no module of rcpforge:
    model, optimizer and numeric states are tensors and plain containers)."""
    spec = _spec(every=2, recipe="nvfp4")
    assert spec.run_key == "7375d7f70746e16de72aa2fd"  # the run the checkpoint belongs to
    folder = tmp_path / "cut"
    folder.mkdir()
    shutil.copy(PREMOVE / checkpoint.FILENAME, folder / checkpoint.FILENAME)
    before = json.loads((PREMOVE / "whole_run_points.json").read_text())

    # The restored model evaluates as the saved one did, to the last digit on the CPU that
    # wrote it and on an AMD EPYC: an eval runs no stochastic rounding and no optimizer.
    cfg = TinyLMSettings.model_validate({k: v for k, v in spec.trainer.items() if k != "kind"})
    cpu = torch.device("cpu")
    restored = _Run(spec, Reporter.of(Recorder(folder)), cfg, cpu, DataParallel(1, cpu))
    restored.resume()
    assert restored.tokens == before[3]["tokens"]
    assert evaluate(restored.model, restored.data.eval)["eval_loss"] == pytest.approx(
        before[3]["metrics"]["eval_loss"], rel=1e-6)

    second = Recorder(folder)
    TinyLMTrainer().train(spec, second)
    assert (folder / checkpoint.STARTS).read_text().split()[-1] == f"tokens={before[3]['tokens']}"
    assert [p.tokens for p in second.points] == [p["tokens"] for p in before[4:]]
    # Training goes on as it did, equal on the CPU that wrote it. Another CPU's FP32
    # kernels move a step's last digits and NVFP4's rounding magnifies them: 1.1% apart at
    # the first eval after the restart and 3.6% at the fourth on an AMD EPYC. A run that
    # lost its state would start again from 1.68 (the first eval's loss).
    for got, then in zip(second.points, before[4:], strict=True):
        assert got.metrics["eval_loss"] == pytest.approx(then["metrics"]["eval_loss"], rel=0.08)
