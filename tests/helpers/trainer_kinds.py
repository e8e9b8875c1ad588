"""Every trainer kind the registry knows, as a tiny fast configuration for the trainer
conformance suite (`tests/conformance/test_trainers.py`). A new kind gets every
conformance test by one entry in `KINDS`: a supplier that, given a folder to write
files in, returns that kind's `KindConfig`."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class KindConfig:
    """One kind's tiny campaign. Budgets hold whole training steps (the tiny LM trains
    batch_size x context tokens a step), so a run that spends one ends exactly on it."""

    trainer: dict[str, Any]
    hparams: dict[int, dict[str, Any]]  # per batch size, min and max; runs use the min
    converges: dict[str, Any]  # a target reached within `budget` in a few evals
    never: dict[str, Any]  # a target no run reaches
    budget: dict[str, Any]
    short_budget: dict[str, Any]  # for runs of `never`: the budget is spent quickly
    # Campaign overrides (trainer, hparams, target) that validate but fail at train time.
    failing: dict[str, Any]
    failing_says: str  # in the error of a run with `failing`


def tinylm(folder: Path) -> KindConfig:
    trainer = {
        "kind": "tinylm",
        "data": {"source": "markov", "vocab": 8, "branching": 2, "noise": 0.01, "data_seed": 7},
        "context": 8, "d_model": 32, "n_layers": 1, "n_heads": 2, "eval_tokens": 512,
    }
    missing = {**trainer, "data": {"source": "text", "path": str(folder / "no-such-corpus.txt")}}
    return KindConfig(
        trainer=trainer,
        hparams={16: {"lr": 0.01, "warmup_tokens": 4096}, 64: {"lr": 0.02, "warmup_tokens": 4096}},
        converges={"metric": "eval_excess_loss", "mode": "min", "value": 0.3},
        never={"metric": "eval_excess_loss", "mode": "min", "value": -1.0},
        budget={"max_tokens": 400_000, "eval_every_tokens": 2048},
        short_budget={"max_tokens": 16 * 8 * 64, "eval_every_tokens": 2048},
        failing={"trainer": missing, "target": {"metric": "eval_loss", "mode": "min", "value": 0.1}},
        failing_says="no-such-corpus.txt",
    )


TOKENS_PER_SAMPLE = 4  # not 1: tokens and samples must not be confused

# A stdlib program in the MLPerf way: it logs an eval every `eval_every_tokens`, stops at
# the first that reaches the target (run_stop success) or when the next batch would pass
# max_tokens (run_stop aborted). A nonzero `exit_code` hyperparameter crashes it after
# its first eval, before any run_stop.
_PROGRAM = textwrap.dedent('''
    import json, math, random, sys, time
    bs, lr, seed, exit_code = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    max_tokens, every, target, per_sample = int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7]), int(sys.argv[8])
    def log(key, value=None, **metadata):
        event = {"namespace": "", "time_ms": int(time.time() * 1000), "event_type": "POINT_IN_TIME", "key": key,
                 "value": value,
                 "metadata": metadata}
        print(":::MLLOG " + json.dumps(event), flush=True)
    log("submission_benchmark", sys.argv[9]); log("global_batch_size", bs); log("seed", seed)
    log("run_start")
    rng = random.Random(seed)
    samples, next_eval, status = 0, every, "aborted"
    while (samples + bs) * per_sample <= max_tokens:
        samples += bs
        if samples * per_sample < next_eval:
            continue
        next_eval = (samples * per_sample // every + 1) * every
        accuracy = 1.0 - math.exp(-lr * samples / 100.0) - 0.05 * rng.random()
        log("eval_accuracy", accuracy, epoch_num=samples, samples_count=samples)
        if exit_code:
            print("crashing as asked", flush=True)
            sys.exit(exit_code)
        if accuracy >= target:
            status = "success"
            break
    log("run_stop", status=status)
''')


def command(folder: Path) -> KindConfig:
    program = folder / "mllog_program.py"
    program.write_text(_PROGRAM)
    trainer = {
        "kind": "command",
        "argv": ["{python}", str(program), "{batch_size}", "{lr}", "{seed}", "{exit_code}", "{max_tokens}",
                 "{eval_every_tokens}", "{target_value}", str(TOKENS_PER_SAMPLE), "{benchmark}"],
        "metric_key": "eval_accuracy", "unit": "samples", "tokens_per_sample": TOKENS_PER_SAMPLE,
        "max_wall_s": 60, "stop_grace_s": 2,
    }
    return KindConfig(
        trainer=trainer,
        hparams={16: {"lr": 0.05, "exit_code": 0}, 64: {"lr": 0.05, "exit_code": 0}},
        converges={"metric": "eval_accuracy", "mode": "max", "value": 0.9},
        never={"metric": "eval_accuracy", "mode": "max", "value": 1.5},
        budget={"max_tokens": 400_000, "eval_every_tokens": 640},
        short_budget={"max_tokens": 16 * TOKENS_PER_SAMPLE * 100, "eval_every_tokens": 640},
        failing={"hparams": {16: {"lr": 0.05, "exit_code": 3}, 64: {"lr": 0.05, "exit_code": 3}}},
        failing_says="exit code 3",
    )


KINDS: dict[str, Callable[[Path], KindConfig]] = {"tinylm": tinylm, "command": command}
