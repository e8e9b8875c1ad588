"""`rcpforge tune`: search hyperparameters per (recipe, batch size) on tokens-to-target.

The orchestrator process owns each cell's Optuna study and drives it ask-and-tell: it
asks a trial, creates the MLflow runs of the trial's seeds (`role: tune`, so campaign
analysis never counts them), hands the trial to the campaign's backend as one job
(`worker.run_trial`, which runs each seed's `RunAssignment` through `execute_run`,
as the campaign's launcher does), and tells the
study the censored objective when the job is done. Up to `workers` trials are in
flight at once. Everything a trial leaves is in the study's storage and in MLflow, so
a killed tune loses at most the trials in flight, and running it again continues.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

import optuna
from optuna.trial import TrialState

from rcpforge.cluster.backend import Backend, Job
from rcpforge.orchestrator.backends import check_backend, running_backend
from rcpforge.orchestrator.campaign import campaign_lock
from rcpforge.orchestrator.execute import assignment_for
from rcpforge.orchestrator.tracking import Tracking, campaign_tags
from rcpforge.orchestrator.tune.worker import TrialJob, run_trial
from rcpforge.sweeps.secrets import launch_secrets
from rcpforge.sweeps.spec import Campaign
from rcpforge.sweeps.tune_objective import score
from rcpforge.sweeps.tune_spec import TUNE_SEED_OFFSET, TuneSpec
from rcpforge.sweeps.tune_study import (
    Cell, CellSummary, TuneError, evidence, finished, grid_points, open_study, storage_url, summarize,
)
from rcpforge.sweeps.tune_table import table_path, write_hparams_table
from rcpforge.trainers.contract import RunResult, RunSpec, RunStatus
from rcpforge.trainers.contract.schema import TAG_TUNE_STUDY, TAG_TUNE_TRIAL

MAX_FAILURES_IN_A_ROW = 3

# (cell, trial number, outcome: "start", "converged", "censored", "pruned" or "failed", value)
TuneEvent = Callable[[Cell, int, str, "float | None"], None]


def tune_lock(campaign: Campaign):
    """One tune process per campaign: it alone may declare running trials stale."""
    return campaign_lock(campaign, "tune", TuneError)


def select_cells(campaign: Campaign, recipes: list[str] | None, batch_sizes: list[int] | None) -> list[Cell]:
    if campaign.tune is None:
        raise TuneError(f"campaign {campaign.name} has no `tune:` section; add one with at least `space:`")
    if campaign.launch.world_size > 1:
        # A trial runs its seeds one after another in one job, and a pruner stops only
        # the reporting rank: a gang's other ranks would be left in a collective.
        raise TuneError(
            f"launch: rcpforge tune runs one-process trials, and this campaign's runs are gangs of "
            f"{campaign.launch.world_size}; tune a copy of the campaign without `launch:` (or with "
            "processes_per_node: 1 and nodes: 1) and use its hparams table here"
        )
    known = {r.name: r for r in campaign.recipes}
    for name in recipes or []:
        if name not in known:
            raise TuneError(f"--recipe {name} is not among the campaign's recipes: {', '.join(known)}")
    for bs in batch_sizes or []:
        if bs not in campaign.batch_sizes:
            raise TuneError(f"--batch-size {bs} is not among the campaign's batch sizes: {campaign.batch_sizes}")
    return [
        Cell(r.name, r.options, bs)
        for r in campaign.recipes if not recipes or r.name in recipes
        for bs in campaign.batch_sizes if not batch_sizes or bs in batch_sizes
    ]


@dataclass
class _Trial:
    trial: optuna.trial.Trial
    run_ids: list[str]


class _CellRun:
    """Drives one cell's study until it has `trials` finished (complete or pruned)."""

    def __init__(self, campaign: Campaign, cell: Cell, index: int, tracking: Tracking, experiment_id: str,
                 backend: Backend, workers: int, trials: int, on_event: TuneEvent):
        self.campaign, self.cell, self.tracking, self.experiment_id = campaign, cell, tracking, experiment_id
        self.tune: TuneSpec = campaign.tune  # type: ignore[assignment]
        self.backend, self.workers, self.on_event = backend, workers, on_event
        self.storage = storage_url(campaign)
        self.study, stale = open_study(campaign, cell, self.storage, index)
        for t in stale:
            self._close_runs(t.user_attrs.get("mlflow_run_ids", []), "the tune process stopped mid-trial")
        if self.tune.sampler.kind == "grid":
            trials = min(trials, len(grid_points(self.tune)))
        self.target = trials
        self.in_flight: dict[str, _Trial] = {}
        # A trainer that fails every time must not be retried forever: the cell stops
        # after this many failed trials in a row.
        self.failures_left = MAX_FAILURES_IN_A_ROW
        self.secret_env: dict[str, str] = {}  # trainer.env's secrets (sweeps/secrets.py), for each trial's job

    def run(self) -> CellSummary:
        while True:
            while (len(self.in_flight) < self.workers and self.failures_left > 0
                   and finished(self.study) + len(self.in_flight) < self.target):
                self._launch()
            if not self.in_flight:
                return summarize(self.study, self.cell)
            for done in self.backend.wait(timeout=1.0):
                entry = self.in_flight.pop(done.task_id)
                if done.error is not None:
                    self._close_runs(entry.run_ids, done.error)
                    self._fail(entry, done.error)
                else:
                    self._tell(entry, [RunResult.model_validate(r) for r in done.value])

    def _specs(self, params: dict) -> list[RunSpec]:
        hparams = {**self.campaign.hparams[self.cell.batch_size], **params}
        return [
            RunSpec(campaign=self.campaign.name, role="tune", recipe=self.cell.recipe,
                    recipe_options=self.cell.recipe_options, batch_size=self.cell.batch_size,
                    seed=TUNE_SEED_OFFSET + i, hparams=hparams, target=self.campaign.target,
                    budget=self.campaign.budget, trainer=self.campaign.trainer, world_size=1)
            for i in range(self.tune.seeds)
        ]

    def _launch(self) -> None:
        from rcpforge.sweeps.tune_optuna import distributions

        trial = self.study.ask(distributions(self.tune))
        specs = self._specs(trial.params)
        tags = {TAG_TUNE_STUDY: self.study.study_name, TAG_TUNE_TRIAL: str(trial.number)}
        run_ids = [
            self.tracking.create_run(self.experiment_id, s, tags, run_name=f"tune-t{trial.number}-{s.run_name}")
            for s in specs
        ]
        trial.set_user_attr("mlflow_run_ids", run_ids)
        folder = self.campaign.runs_folder / "tune" / self.study.study_name
        job = TrialJob(
            storage=self.storage, study=self.study.study_name, trial_id=trial._trial_id,
            pruner=self.tune.pruner.model_dump_json(), max_tokens=self.campaign.budget.max_tokens,
            single_seed=self.tune.seeds == 1,
            runs=tuple(assignment_for(self.campaign, s, rid, 1, folder / f"t{trial.number}-s{s.seed}")
                       for s, rid in zip(specs, run_ids)),
        )
        task_id = re.sub(r"[^A-Za-z0-9_-]", "_", f"{self.study.study_name}-t{trial.number}")
        self.in_flight[task_id] = _Trial(trial, run_ids)
        self.backend.submit(Job(task_id, run_trial, (job,), secret_env=self.secret_env))
        self.on_event(self.cell, trial.number, "start", None)

    def _tell(self, entry: _Trial, results: list[RunResult]) -> None:
        trial = entry.trial
        trial.set_user_attr("statuses", [r.status.value for r in results])
        trial.set_user_attr("tokens_to_target", [r.tokens_to_target for r in results])
        failed = next((r for r in results if r.status is RunStatus.failed), None)
        if failed is not None:
            self._fail(entry, failed.error or "a seed failed")
        elif any(r.status is RunStatus.pruned for r in results):
            self.study.tell(trial, state=TrialState.PRUNED)
            self.failures_left = MAX_FAILURES_IN_A_ROW
            self.on_event(self.cell, trial.number, "pruned", None)
        else:
            s = score(results, self.campaign.target, self.campaign.budget.max_tokens)
            trial.set_user_attr("converged", s.converged)
            trial.set_user_attr("censored", s.censored)
            trial.set_user_attr("mean_distance", s.mean_distance)
            self.study.tell(trial, s.value)
            self.failures_left = MAX_FAILURES_IN_A_ROW
            self.on_event(self.cell, trial.number, "converged" if s.converged else "censored", s.value)

    def _fail(self, entry: _Trial, error: str) -> None:
        entry.trial.set_user_attr("error", error[-2000:])
        self.study.tell(entry.trial, state=TrialState.FAIL)
        self.failures_left -= 1
        self.on_event(self.cell, entry.trial.number, "failed", None)

    def _close_runs(self, run_ids: list[str], error: str) -> None:
        """Mark failed the runs of a trial that never finished them (the worker died)."""
        for rid in run_ids:
            status = self.tracking.status_of(rid)
            if status in (RunStatus.pending.value, RunStatus.running.value):
                self.tracking.mark_failed(rid, error)


def tune_campaign(
    campaign: Campaign,
    cells: list[Cell],
    *,
    trials: int | None = None,
    workers: int | None = None,
    on_event: TuneEvent | None = None,
) -> list[CellSummary]:
    """Tune every cell in turn; write `hparams.<recipe>.yaml` beside the campaign after
    each cell. Returns each cell's summary (over all its trials, earlier runs included)."""
    tune = campaign.tune
    if tune is None:
        raise TuneError(f"campaign {campaign.name} has no `tune:` section")
    storage = storage_url(campaign)
    workers = workers or getattr(campaign.backend, "workers", 1)
    summaries = []
    check_backend(campaign)
    secret_env = launch_secrets(campaign, os.environ)[""]  # a missing variable: before any trial
    with tune_lock(campaign):
        tracking = Tracking(campaign.tracking_uri, campaign.tracking.retry_s,
                            campaign_tags(campaign.benchmark, campaign.submission_runs, campaign.reference))
        experiment_id = tracking.open_experiment(campaign.name, campaign.artifact_dir)
        with running_backend(campaign, workers) as backend:
            every = [(r.name, bs) for r in campaign.recipes for bs in campaign.batch_sizes]
            for cell in cells:
                # The sampler's seed depends on the cell, not on which cells this call tunes.
                index = every.index((cell.recipe, cell.batch_size))
                run = _CellRun(campaign, cell, index, tracking, experiment_id, backend, workers,
                               trials or tune.trials, on_event or (lambda *_: None))
                run.secret_env = secret_env
                summary = run.run()
                summaries.append(summary)
                if summary.best_trial is not None:
                    best = {**campaign.hparams[cell.batch_size], **summary.best_params}
                    write_hparams_table(table_path(campaign.base_dir, cell.recipe), campaign.name, cell.recipe,
                                        {cell.batch_size: (best, evidence(summary, storage, tune, index))})
    return summaries
