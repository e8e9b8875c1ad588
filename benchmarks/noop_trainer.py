"""A trainer that does no training: one eval point, converged at once. What is left of a
run's wall time is the orchestration: launch, tracking, collection."""

from __future__ import annotations

from rcpforge.trainers.contract import EvalPoint, Reporter, RunResult, RunSpec, RunStatus, Trainer


class NoopTrainer(Trainer):
    def train(self, spec: RunSpec, reporter: Reporter) -> RunResult:
        tokens = spec.budget.eval_every_tokens
        reporter.eval_point(EvalPoint(tokens=tokens, samples=tokens // 8, metrics={spec.target.metric: 0.0}))
        return RunResult(status=RunStatus.converged, tokens_to_target=tokens, samples_to_target=tokens // 8,
                         tokens_trained=tokens, final_metric=0.0)
