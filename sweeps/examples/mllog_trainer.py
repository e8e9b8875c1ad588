"""An external trainer for the `command` kind: trains a logistic regression with
minibatch SGD on a seeded synthetic task and logs MLPerf `:::MLLOG` lines on stdout,
as an MLPerf reference implementation does (numpy only, a fraction of a second a run).

    python mllog_trainer.py --batch-size 32 --lr 0.5 --seed 0 --target 0.85 \\
        --max-samples 20000 --eval-every 512 --benchmark my_bench

It stops at the first eval whose accuracy reaches the target (run_stop success) or when
--max-samples are trained (run_stop aborted). Eval lines carry the samples trained in
both `epoch_num` and `samples_count`, so the RCP checker reads samples for any benchmark.
It logs every key the MLPerf 6.1 compliance rules require of every benchmark (the run's
lifecycle, its blocks and evals, and the precision and parallelism disclosure: numpy
computes in fp64 on one process); `rcpforge run --smoke command.yaml` shows each, and
rcpforge adds `config_filename`.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from mlperf_logging import mllog
from mlperf_logging.mllog import constants as c

FEATURES = 16
EVAL_SIZE = 2000


def make_task(rng: np.random.Generator):
    """A fixed linear task (the same for every seed) with label noise; the seed only
    draws the training stream, as a data-order seed does."""
    task = np.random.default_rng(1234)
    w_true = task.normal(size=FEATURES)
    x_eval = task.normal(size=(EVAL_SIZE, FEATURES))
    y_eval = (x_eval @ w_true + task.normal(scale=1.5, size=EVAL_SIZE) > 0).astype(float)

    def batch(n: int):
        x = rng.normal(size=(n, FEATURES))
        return x, (x @ w_true + rng.normal(scale=1.5, size=n) > 0).astype(float)

    return batch, x_eval, y_eval


def log_setup(logger, args: argparse.Namespace) -> None:
    """The run's submission, hyperparameters and disclosure lines, up to run_start."""
    logger.event(c.CACHE_CLEAR, True)
    logger.event(c.SUBMISSION_BENCHMARK, args.benchmark)
    logger.event(c.SUBMISSION_ORG, "rcpforge-example")
    logger.event(c.SUBMISSION_DIVISION, c.CLOSED)
    logger.event(c.SUBMISSION_PLATFORM, "cpu-numpy")
    logger.start(c.INIT_START)
    logger.event(c.SEED, args.seed)
    logger.event(c.GLOBAL_BATCH_SIZE, args.batch_size)
    logger.event(c.OPT_BASE_LR, args.lr)
    logger.event(c.GRADIENT_ACCUMULATION_STEPS, 1)
    logger.event(c.TRAIN_SAMPLES, args.max_samples)
    logger.event(c.EVAL_SAMPLES, EVAL_SIZE)
    for part in ("linear", "attn", "comm"):  # the 6.1 disclosure: no attention here, nothing lower than fp64
        logger.event(f"lowest_numerical_precision_in_{part}", "fp64")
    for split in ("tensor", "pipeline", "context", "expert"):
        logger.event(f"{split}_parallelism", 1)
    logger.event("micro_batch_size", args.batch_size)
    logger.end(c.INIT_STOP)
    logger.start(c.RUN_START)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--target", type=float, required=True)
    p.add_argument("--max-samples", type=int, required=True)
    p.add_argument("--eval-every", type=int, required=True)
    p.add_argument("--benchmark", default="mllog_example")
    p.add_argument("--prefix", default="", help="text before the MLLOG token, as multi-rank launchers print")
    args = p.parse_args(argv)

    logger = mllog.get_mllogger()
    if args.prefix:
        # The checker ignores text before the token; show that real launchers' prefixes work.
        for handler in logger.logger.handlers:
            handler.setFormatter(__import__("logging").Formatter(args.prefix + "%(message)s"))
    log_setup(logger, args)

    rng = np.random.default_rng(args.seed)
    batch, x_eval, y_eval = make_task(rng)
    w = np.zeros(FEATURES)
    samples, next_eval, status = 0, args.eval_every, c.ABORTED
    logger.start(c.BLOCK_START, metadata={c.SAMPLES_COUNT: 0})
    while samples < args.max_samples:
        x, y = batch(args.batch_size)
        p_hat = 1.0 / (1.0 + np.exp(-(x @ w)))
        w -= args.lr * x.T @ (p_hat - y) / args.batch_size
        samples += args.batch_size
        if samples < next_eval and samples < args.max_samples:
            continue
        next_eval = (samples // args.eval_every + 1) * args.eval_every
        logger.end(c.BLOCK_STOP, metadata={c.SAMPLES_COUNT: samples})
        logger.start(c.EVAL_START, metadata={c.SAMPLES_COUNT: samples})
        accuracy = float(np.mean((x_eval @ w > 0) == (y_eval > 0.5)))
        print(f"samples {samples} eval accuracy {accuracy:.4f}", flush=True)  # ordinary output, not MLLOG
        logger.event(c.EVAL_ACCURACY, accuracy, metadata={c.EPOCH_NUM: samples, c.SAMPLES_COUNT: samples})
        logger.end(c.EVAL_STOP, metadata={c.SAMPLES_COUNT: samples})
        if accuracy >= args.target:
            status = c.SUCCESS
            break
        if samples < args.max_samples:
            logger.start(c.BLOCK_START, metadata={c.SAMPLES_COUNT: samples})
    logger.end(c.RUN_STOP, metadata={c.STATUS: status})
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
