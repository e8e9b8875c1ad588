"""A trainer that fails on purpose for chosen seeds (for testing failure handling with
real worker processes); other seeds converge at once: two eval points, the second on
the target (an instant trainer: these tests are about the orchestrator, not training).
It takes the tiny LM's settings, so the campaigns stay the tiny ones."""

from __future__ import annotations

import os
import time
from pydantic import Field

from rcpforge.trainers.contract import EvalPoint, Reporter, RunResult, RunSpec, RunStatus, Trainer
from rcpforge.trainers.tinylm.settings import TinyLMHParams, TinyLMSettings


class FaultySettings(TinyLMSettings):
    raise_seeds: list[int] = Field(default_factory=list)
    exit_seeds: list[int] = Field(default_factory=list)
    hang_seeds: list[int] = Field(default_factory=list)
    # each run, as it starts, appends "<seed> <worker pid>" to this file: which worker ran what, in order
    starts_file: str | None = None


class FaultyTrainer(Trainer):
    Settings = FaultySettings
    HParams = TinyLMHParams

    def train(self, spec: RunSpec, reporter: Reporter) -> RunResult:
        settings = dict(spec.trainer)
        if settings.get("starts_file"):
            with open(settings["starts_file"], "a") as starts:
                starts.write(f"{spec.seed} {os.getpid()}\n")
        if spec.seed in settings["raise_seeds"]:
            raise RuntimeError(f"injected failure for seed {spec.seed}")
        if spec.seed in settings["exit_seeds"]:
            os._exit(3)  # the worker process dies without reporting
        if spec.seed in settings["hang_seeds"]:
            time.sleep(3600)  # hangs without reporting an eval point
        every = spec.budget.eval_every_tokens
        reached = spec.target.value - 0.01 if spec.target.mode == "min" else spec.target.value + 0.01
        for tokens, value in ((every, reached + (0.5 if spec.target.mode == "min" else -0.5)), (2 * every, reached)):
            reporter.eval_point(EvalPoint(tokens=tokens, samples=tokens // 8, metrics={spec.target.metric: value}))
        return RunResult(status=RunStatus.converged, tokens_to_target=2 * every, samples_to_target=2 * every // 8,
                         tokens_trained=2 * every, final_metric=reached, wall_s=0.0)
