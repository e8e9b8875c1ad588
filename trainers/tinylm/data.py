"""Data for the tiny LM: a synthetic Markov language with a known optimum, bytes of a
text file, or bytes of a corpus a package ships (trainers/tinylm/corpus.py). Training
batches derive from (data seed, run seed); the eval set depends on the data settings
only, so every run of a campaign is scored on the same tokens."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rcpforge.trainers.tinylm import corpus
from rcpforge.trainers.tinylm.settings import CorpusData, MarkovData, TextData
from rcpforge.trainers.tinylm.size import BYTE_VOCAB

_TRAIN_STREAM, _EVAL_STREAM, _SOURCE_STREAM = 0, 1, 2


@dataclass(frozen=True)
class EvalSet:
    tokens: np.ndarray  # (n_seqs, context + 1) int64
    # Mean loss (nats per predicted token) of the true source on these tokens; None when
    # the source is unknown (text files).
    source_loss: float | None


class MarkovSource:
    """Order-2 Markov chain; each sequence starts from two uniform symbols."""

    def __init__(self, cfg: MarkovData):
        self.vocab = cfg.vocab
        rng = np.random.default_rng([cfg.data_seed, _SOURCE_STREAM])
        n_ctx = cfg.vocab * cfg.vocab
        probs = np.zeros((n_ctx, cfg.vocab))
        for c in range(n_ctx):
            successors = rng.choice(cfg.vocab, size=cfg.branching, replace=False)
            probs[c, successors] = rng.dirichlet(np.ones(cfg.branching))
        self.probs = (1.0 - cfg.noise) * probs + cfg.noise / cfg.vocab
        self.cdf = np.cumsum(self.probs, axis=1)
        self.cdf[:, -1] = 1.0

    def sample(self, rng: np.random.Generator, n: int, length: int) -> np.ndarray:
        seqs = np.empty((n, length), dtype=np.int64)
        seqs[:, :2] = rng.integers(0, self.vocab, size=(n, 2))
        for t in range(2, length):
            ctx = seqs[:, t - 2] * self.vocab + seqs[:, t - 1]
            u = rng.random(n)[:, None]
            seqs[:, t] = (self.cdf[ctx] < u).sum(axis=1)
        return seqs

    def loss_of(self, seqs: np.ndarray) -> float:
        """Mean -log p(next token) under the true source, over predicted positions 1.."""
        first = np.full(seqs.shape[0], np.log(self.vocab))  # token 1 is uniform
        ctx = seqs[:, :-2] * self.vocab + seqs[:, 1:-1]
        rest = -np.log(self.probs[ctx, seqs[:, 2:]])
        return float((first.sum() + rest.sum()) / (seqs.shape[0] * (seqs.shape[1] - 1)))


def spread_windows(stream: np.ndarray, n: int, width: int) -> np.ndarray:
    """`n` windows of `width` tokens spread evenly over `stream`, the first at its start
    and the last at its end (fewer where it cannot hold `n` without overlap): an eval set
    that samples every part of a held-out stream, whatever its size."""
    n = max(1, min(n, len(stream) // width))
    starts = (np.arange(n) * (len(stream) - width)) // max(1, n - 1)
    return stream[starts[:, None] + np.arange(width)]


class Batches:
    """An endless, seeded stream of training sequences and one fixed eval set."""

    def __init__(self, data: MarkovData | TextData | CorpusData, context: int, eval_tokens: int, seed: int,
                 base_dir: Path | None = None):
        """`base_dir`: where a relative text path resolves (the campaign file's folder),
        not the worker's working folder, which differs by backend."""
        self.context = context
        n_eval = max(1, eval_tokens // context)
        self._source: MarkovSource | None = None
        if isinstance(data, MarkovData):
            self._source = MarkovSource(data)
            self.vocab = data.vocab
            self._rng = np.random.default_rng([data.data_seed, _TRAIN_STREAM, seed])
            eval_rng = np.random.default_rng([data.data_seed, _EVAL_STREAM])
            seqs = self._source.sample(eval_rng, n_eval, context + 1)
            self.eval = EvalSet(seqs, self._source.loss_of(seqs))
            return
        self.vocab = BYTE_VOCAB
        # the byte sources' training order depends on the run's seed only
        self._rng = np.random.default_rng([0, _TRAIN_STREAM, seed])
        if isinstance(data, TextData):
            self._text_file(data, n_eval, base_dir)
        else:
            train, held_out = (np.frombuffer(part, dtype=np.uint8).astype(np.int64) for part in corpus.split())
            self._train = train
            self.eval = EvalSet(spread_windows(held_out, n_eval, context + 1), None)

    def _text_file(self, data: TextData, n_eval: int, base_dir: Path | None) -> None:
        """The file's first bytes train, its last `eval_fraction` is held out; the eval set
        is the held-out part's first sequences."""
        context = self.context
        path = Path(data.path)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        raw = np.frombuffer(path.read_bytes(), dtype=np.uint8).astype(np.int64)
        split = int(len(raw) * (1.0 - data.eval_fraction))
        self._train, held_out = raw[:split], raw[split:]
        if len(self._train) <= context + 1 or len(held_out) <= context + 1:
            raise ValueError(
                f"text file {data.path} has {len(raw)} bytes: too short for context {context}"
            )
        n_eval = min(n_eval, len(held_out) // (context + 1))
        self.eval = EvalSet(held_out[: n_eval * (context + 1)].reshape(n_eval, context + 1), None)

    def next(self, batch_size: int) -> np.ndarray:
        if self._source is not None:
            return self._source.sample(self._rng, batch_size, self.context + 1)
        starts = self._rng.integers(0, len(self._train) - self.context - 1, size=batch_size)
        return self._train[starts[:, None] + np.arange(self.context + 1)]
