from __future__ import annotations

import math

import pytest
import torch

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.contract import EvalPoint, Reporter, RunStatus
from rcpforge.trainers.tinylm.data import Batches, MarkovSource
from rcpforge.trainers.tinylm.settings import MarkovData
from rcpforge.trainers.tinylm.train import TinyLMTrainer
from tests.helpers.campaigns import TINY, tiny_campaign


class Recorder(Reporter):
    def __init__(self, output_dir=None):
        self.output_dir = output_dir
        self.points: list[EvalPoint] = []

    def eval_point(self, point: EvalPoint) -> None:
        self.points.append(point)


def _spec(**overrides):
    recipe = overrides.pop("recipe", "bf16")
    seed = overrides.pop("seed", 0)
    specs = expand(parse_campaign(tiny_campaign(**overrides)))
    return next(s for s in specs if s.recipe == recipe and s.seed == seed and s.batch_size == 16)


def _train(spec):
    rec = Recorder()
    return TinyLMTrainer().train(spec, rec), rec.points


@pytest.mark.parametrize("recipe", ["bf16", "fp8_tensorwise"])
def test_same_spec_gives_the_same_tokens_to_target(recipe):
    spec = _spec(recipe=recipe)
    first, curve1 = _train(spec)
    second, curve2 = _train(spec)
    assert first.status is RunStatus.converged
    assert first.tokens_to_target == second.tokens_to_target
    assert [p.metrics for p in curve1] == [p.metrics for p in curve2]
    other, curve3 = _train(_spec(recipe=recipe, seed=1))
    assert [p.metrics for p in curve3] != [p.metrics for p in curve1]


def test_stops_at_the_first_eval_that_meets_the_target():
    spec = _spec()
    result, points = _train(spec)
    assert result.status is RunStatus.converged
    values = [p.metrics[spec.target.metric] for p in points]
    assert values[-1] <= spec.target.value
    assert all(v > spec.target.value for v in values[:-1])
    assert result.tokens_to_target == points[-1].tokens
    assert result.samples_to_target == points[-1].tokens // spec.trainer["context"]
    # evals happen at the cadence, in tokens
    every = spec.budget.eval_every_tokens
    assert all(p.tokens % every < spec.batch_size * spec.trainer["context"] for p in points)


def test_unreachable_target_spends_the_budget():
    spec = _spec(target={"metric": "eval_excess_loss", "mode": "min", "value": -1.0},
                 budget={"max_tokens": 20_000, "eval_every_tokens": 4096})
    result, points = _train(spec)
    assert result.status is RunStatus.not_converged
    assert result.tokens_to_target is None
    assert result.tokens_trained >= 20_000 and points[-1].tokens == result.tokens_trained


def test_huge_learning_rate_is_recorded_as_diverged():
    data = tiny_campaign(budget={"max_tokens": 100_000, "eval_every_tokens": 4096})
    data["hparams"][16] = {"lr": 1e6, "warmup_tokens": 0}
    data["trainer"]["diverge_loss"] = 3.0
    spec = next(s for s in expand(parse_campaign(data)) if s.batch_size == 16)
    result, _ = _train(spec)
    assert result.status is RunStatus.diverged
    assert result.error


def test_markov_source_loss_is_its_entropy_on_its_own_samples():
    import numpy as np

    source = MarkovSource(MarkovData(vocab=8, branching=2, data_seed=3))
    seqs = source.sample(np.random.default_rng(0), 4000, 9)
    # no model can beat the source on average: a uniform guess is worse
    assert source.loss_of(seqs) < math.log(8)
    # empirical frequencies of successors match the source's probabilities
    ctx = seqs[:, 0] * 8 + seqs[:, 1]
    c = int(np.bincount(ctx).argmax())
    follow = seqs[ctx == c, 2]
    freq = np.bincount(follow, minlength=8) / len(follow)
    assert np.abs(freq - source.probs[c]).max() < 0.05


def test_eval_set_does_not_depend_on_the_run_seed():
    data = MarkovData(vocab=8, branching=2, data_seed=3)
    a, b = Batches(data, 8, 1024, seed=0), Batches(data, 8, 1024, seed=1)
    assert (a.eval.tokens == b.eval.tokens).all()
    assert not (a.next(4) == b.next(4)).all()


def test_device_setting_keeps_cpu_run_keys_and_fails_clearly_without_cuda():
    cpu = _spec()
    assert "device" not in cpu.trainer  # run keys of CPU campaigns are what they were
    cuda = _spec(trainer={**TINY["trainer"], "device": "cuda"})
    assert cuda.trainer["device"] == "cuda" and cuda.run_key != cpu.run_key
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the no-CUDA error cannot happen here")
    with pytest.raises(RuntimeError, match="trainer.device is 'cuda'.*set trainer.device: cpu"):
        _train(cuda)


def test_a_relative_text_path_resolves_beside_the_campaign_not_in_the_workers_folder(tmp_path, monkeypatch):
    """A worker's working folder differs by backend (a Slurm job's, a Ray worker's): the
    corpus named `corpus.txt` in the campaign is the one beside the campaign file."""
    campaign_dir = tmp_path / "campaign"
    campaign_dir.mkdir()
    (campaign_dir / "corpus.txt").write_bytes(bytes(range(256)) * 40)
    elsewhere = tmp_path / "worker"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    trainer = dict(TINY["trainer"], data={"source": "text", "path": "corpus.txt"})
    spec = _spec(trainer=trainer, target={"metric": "eval_loss", "mode": "min", "value": 100.0},
                 budget={"max_tokens": 8192, "eval_every_tokens": 1024})  # at least the warmup (8192)
    rec = Recorder()
    rec.campaign_dir = campaign_dir
    result = TinyLMTrainer().train(spec, rec)
    assert result.status is RunStatus.converged and len(rec.points) == 1


def test_a_run_says_its_tokens_a_step_when_it_starts(capsys):
    spec = _spec(budget={"max_tokens": 256, "eval_every_tokens": 128},
                 hparams={16: {"lr": 0.01, "warmup_tokens": 128}, 64: {"lr": 0.02, "warmup_tokens": 128}})
    _train(spec)
    first = capsys.readouterr().out.splitlines()[0]
    # batch 16 x context 8 (the tiny campaign)
    assert first == ("rcpforge tinylm: bf16-bs16-s0: 16 sequences x 8 tokens = 128 tokens a step, "
                     "an eval every 128 tokens, at most 256")
