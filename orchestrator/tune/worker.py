"""What a backend runs for one trial: its seeds, one after the other, each through
`execute_run` (the campaign launcher's unit of work) as a tracked `role: tune` run.

The first seed reports its distance to the target to the Optuna trial at every eval
(step = tokens) and the study's pruner may stop it; later seeds are judged by the
`hopeless` rule on their own curve. Once a seed is pruned or fails, the seeds after it
are not trained: their MLflow runs are closed with that status."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from rcpforge.orchestrator.execute import RunAssignment, execute_run
from rcpforge.orchestrator.tracking import RunLog
from rcpforge.sweeps.tune_objective import distance
from rcpforge.sweeps.tune_spec import PrunerSpec
from rcpforge.trainers.contract import EvalPoint, RunResult, RunSpec, RunStatus, StopRun, Target


@dataclass(frozen=True)
class TrialJob:
    """One trial as a backend job: the Optuna trial its first seed reports to, and each
    seed's assignment, in order."""

    storage: str
    study: str
    trial_id: int
    pruner: str  # the PrunerSpec, as JSON
    max_tokens: int
    single_seed: bool
    runs: tuple[RunAssignment, ...]


_STORAGES: dict[str, object] = {}


def _storage(url: str):
    """One storage (one connection pool) per worker process and URL, reused by every
    trial the worker runs: opening one checks the schema, which costs more than a trial's
    reports."""
    if url not in _STORAGES:
        import optuna

        _STORAGES[url] = optuna.storages.get_storage(url)
    return _STORAGES[url]


class _TrialWatch:
    """Reports eval points to the Optuna trial and asks its pruner."""

    def __init__(self, job: TrialJob, target: Target):
        import optuna

        from rcpforge.sweeps.tune_optuna import make_pruner

        optuna.logging.set_verbosity(logging.WARNING)
        pruner = make_pruner(PrunerSpec.model_validate_json(job.pruner), job.max_tokens, job.single_seed)
        # The sampler is never asked here; a random one costs nothing to set up.
        study = optuna.load_study(study_name=job.study, storage=_storage(job.storage),
                                  sampler=optuna.samplers.RandomSampler(), pruner=pruner)
        self.trial = optuna.trial.Trial(study, job.trial_id)
        self.target = target

    def __call__(self, point: EvalPoint) -> None:
        d = distance(self.target, point.metrics.get(self.target.metric))
        self.trial.report(d, point.tokens)
        if self.trial.should_prune():
            raise StopRun(point, f"pruned at {point.tokens} tokens, distance to target {d:.4g}")


class _Curve:
    def __init__(self) -> None:
        self.intermediate_values: dict[int, float] = {}


class _SeedWatch:
    """The hopeless rule on one later seed's own curve (nothing is reported)."""

    def __init__(self, job: TrialJob, target: Target):
        from rcpforge.sweeps.tune_optuna import HopelessPruner

        spec = PrunerSpec.model_validate_json(job.pruner)
        # Only the budget half of the rule: "cannot win" compares whole trials.
        self.rule = (HopelessPruner(job.max_tokens, spec.window, spec.min_fraction, single_seed=False)
                     if spec.kind == "hopeless" else None)
        self.curve = _Curve()
        self.target = target

    def __call__(self, point: EvalPoint) -> None:
        if self.rule is None:
            return
        d = distance(self.target, point.metrics.get(self.target.metric))
        self.curve.intermediate_values[point.tokens] = d
        if self.rule.prune(None, self.curve):  # type: ignore[arg-type]
            raise StopRun(point, f"pruned at {point.tokens} tokens, distance to target {d:.4g}")


def run_trial(job: TrialJob) -> list[dict]:
    """Each seed's result, in order."""
    results: list[dict] = []
    for i, run in enumerate(job.runs):
        spec = RunSpec.model_validate_json(run.spec_json)
        stop = next((r for r in results if r["status"] in (RunStatus.pruned.value, RunStatus.failed.value)), None)
        if stop is not None:
            skipped = RunResult(status=RunStatus(stop["status"]),
                                error=f"not run: an earlier seed of this trial ended {stop['status']}")
            RunLog(run.tracking_uri, run.run_id, spec.target.metric, Path(run.output_dir),
                   retry_s=run.tracking_retry_s).finish(skipped)
            results.append(skipped.model_dump(mode="json"))
            continue
        watch = _TrialWatch(job, spec.target) if i == 0 else _SeedWatch(job, spec.target)
        results.append(execute_run(run, watch=watch))
    return results
