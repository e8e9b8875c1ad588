"""What a backend runs for one trial: its seeds, one after the other, each through
`execute_run` as a tracked `role: tune` run.

The first seed reports its distance to the target to the Optuna trial at every eval
(step = tokens) and the study's pruner may stop it; later seeds are judged by the
`hopeless` rule on their own curve. Once a seed is pruned or fails, the seeds after it
are not trained: their MLflow runs are closed with that status."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from orchestrator.execute import execute_run
from orchestrator.tracking import RunLog
from sweeps.tune_objective import distance
from sweeps.tune_spec import PrunerSpec
from trainers.contract import EvalPoint, RunResult, RunSpec, RunStatus, StopRun, Target


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

    def __init__(self, job: dict[str, Any], target: Target):
        import optuna

        from sweeps.tune_optuna import make_pruner

        optuna.logging.set_verbosity(logging.WARNING)
        pruner = make_pruner(PrunerSpec.model_validate_json(job["pruner"]), job["max_tokens"], job["single_seed"])
        # The sampler is never asked here; a random one costs nothing to set up.
        study = optuna.load_study(study_name=job["study"], storage=_storage(job["storage"]),
                                  sampler=optuna.samplers.RandomSampler(), pruner=pruner)
        self.trial = optuna.trial.Trial(study, job["trial_id"])
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

    def __init__(self, job: dict[str, Any], target: Target):
        from sweeps.tune_optuna import HopelessPruner

        spec = PrunerSpec.model_validate_json(job["pruner"])
        # Only the budget half of the rule: "cannot win" compares whole trials.
        self.rule = (HopelessPruner(job["max_tokens"], spec.window, spec.min_fraction, single_seed=False)
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


def run_trial(job: dict[str, Any]) -> list[dict]:
    """`job`: storage, study, trial_id, pruner (JSON), max_tokens, single_seed, tracking_uri and runs,
    a list of {spec (JSON), run_id, output_dir}, seed by seed. Returns each seed's result."""
    results: list[dict] = []
    for i, run in enumerate(job["runs"]):
        spec = RunSpec.model_validate_json(run["spec"])
        stop = next((r for r in results if r["status"] in (RunStatus.pruned.value, RunStatus.failed.value)), None)
        if stop is not None:
            skipped = RunResult(status=RunStatus(stop["status"]),
                                error=f"not run: an earlier seed of this trial ended {stop['status']}")
            RunLog(job["tracking_uri"], run["run_id"], spec.target.metric, Path(run["output_dir"])).finish(skipped)
            results.append(skipped.model_dump(mode="json"))
            continue
        watch = _TrialWatch(job, spec.target) if i == 0 else _SeedWatch(job, spec.target)
        results.append(execute_run(run["spec"], job["tracking_uri"], run["run_id"], 1, run["output_dir"], watch=watch))
    return results
