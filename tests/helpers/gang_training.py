"""A tiny-LM rank, trained directly (no tracking store) inside a gang task of a real
backend: what the data-parallel tests need to stop a run at an exact eval and resume it."""

from __future__ import annotations

from pathlib import Path

from rcpforge.trainers.contract import EvalPoint, Reporter, RunSpec


class _Stopped(Exception):
    pass


class _Reporter(Reporter):
    """Every rank gets one; all of them stop at the same eval, as a whole gang preempted."""

    def __init__(self, folder: Path, stop_after: int | None):
        self.output_dir = self.run_dir = folder
        self.stop_after, self.evals = stop_after, 0

    def eval_point(self, point: EvalPoint) -> None:
        self.evals += 1
        if self.stop_after is not None and self.evals > self.stop_after:
            raise _Stopped(f"stopped after {self.stop_after} evals")


def train_rank(spec_json: str, folder: str, stop_after: int | None = None) -> dict:
    from rcpforge.trainers.tinylm.train import TinyLMTrainer

    spec = RunSpec.model_validate_json(spec_json)
    try:
        return TinyLMTrainer().train(spec, _Reporter(Path(folder), stop_after)).model_dump(mode="json")
    except _Stopped as stop:
        return {"stopped": str(stop)}
