"""A trainer that fails on purpose for chosen seeds (for testing failure handling with
real worker processes); other seeds train the real tiny LM."""

from __future__ import annotations

import os
import time
from pydantic import Field

from trainers.contract import Reporter, RunResult, RunSpec
from trainers.tinylm.settings import TinyLMHParams, TinyLMSettings


class FaultySettings(TinyLMSettings):
    raise_seeds: list[int] = Field(default_factory=list)
    exit_seeds: list[int] = Field(default_factory=list)
    hang_seeds: list[int] = Field(default_factory=list)


class FaultyTrainer:
    Settings = FaultySettings
    HParams = TinyLMHParams

    def train(self, spec: RunSpec, reporter: Reporter) -> RunResult:
        from trainers.tinylm.train import TinyLMTrainer

        settings = dict(spec.trainer)
        if spec.seed in settings["raise_seeds"]:
            raise RuntimeError(f"injected failure for seed {spec.seed}")
        if spec.seed in settings["exit_seeds"]:
            os._exit(3)  # the worker process dies without reporting
        if spec.seed in settings["hang_seeds"]:
            time.sleep(3600)  # hangs without reporting an eval point
        for key in ("raise_seeds", "exit_seeds", "hang_seeds"):
            settings.pop(key)
        return TinyLMTrainer().train(spec.model_copy(update={"trainer": settings}), reporter)
