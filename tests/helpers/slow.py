"""The real tiny LM, slowed down after each eval point, so fault tests can strike a
run mid-flight (a sleep changes when things happen, never the values). Each start
writes the worker's pid to `pid` in the run's folder, so a test can kill that very
process."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import Field

from rcpforge.trainers.contract import EvalPoint, Reporter, RunResult, RunSpec, Trainer
from rcpforge.trainers.tinylm.settings import TinyLMHParams, TinyLMSettings


class SlowSettings(TinyLMSettings):
    sleep_per_eval: float = Field(0.3, ge=0.0)


class _SlowReporter(Reporter):
    def __init__(self, inner: Reporter, sleep: float):
        self.inner, self.sleep, self.output_dir = inner, sleep, inner.output_dir
        # a gang rank's shared run folder (its checkpoints), when it has one
        self.run_dir = Reporter.of(inner).run_dir

    def eval_point(self, point: EvalPoint) -> None:
        self.inner.eval_point(point)
        time.sleep(self.sleep)


class SlowTrainer(Trainer):
    Settings = SlowSettings
    HParams = TinyLMHParams

    def train(self, spec: RunSpec, reporter: Reporter) -> RunResult:
        from rcpforge.trainers.tinylm.train import TinyLMTrainer

        folder = Path(reporter.output_dir)
        (folder / "pid").write_text(str(os.getpid()))
        settings = {k: v for k, v in spec.trainer.items() if k != "sleep_per_eval"}
        inner = spec.model_copy(update={"trainer": {**settings, "kind": "tinylm"}})
        return TinyLMTrainer().train(inner, _SlowReporter(reporter, spec.trainer["sleep_per_eval"]))
