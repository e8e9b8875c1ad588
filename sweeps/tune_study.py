"""One Optuna study per (recipe, batch size): where it is stored, opening or resuming
it, and what it found.

The study lives in its own RDB storage (default: `rcpforge-optuna.db` beside the
campaign file; a PostgreSQL URL at scale), never in the MLflow database: both keep an
`alembic_version` table. It is created here, in the orchestrator, before any worker
opens it, since creating one study from several processes at once races."""

from __future__ import annotations

import itertools
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from rcpforge.sweeps.spec import Campaign
from rcpforge.sweeps.tracking_spec import beside
from rcpforge.trainers.contract.redact import redact, redact_uri
from rcpforge.sweeps.tune_optuna import make_pruner, make_sampler, sampler_settings
from rcpforge.sweeps.tune_spec import DEFAULT_STORAGE, TuneSpec

_SPACE_ATTR = "rcpforge.space"
_WHAT = {
    "rcpforge.fixed": "value of an unsearched hyperparameter or recipe option",
    _SPACE_ATTR: "search space or tune seeds",
    "rcpforge.target": "target",
    "rcpforge.budget": "budget",
    "rcpforge.trainer": "trainer settings",
}


class TuneError(ValueError):
    """Tuning cannot start; the message says why and what to do, on one line."""


def storage_url(campaign: Campaign) -> str:
    tune = campaign.tune
    url = (tune.storage if tune else None) or f"sqlite:///{(campaign.base_dir / DEFAULT_STORAGE).resolve()}"
    url = beside(url, campaign.base_dir)  # a relative SQLite path is beside the campaign file
    if url == campaign.tracking_uri:
        raise TuneError(
            f"tune.storage is the MLflow tracking store ({redact_uri(url)}); Optuna and MLflow cannot share "
            f"a database: give Optuna its own (default {DEFAULT_STORAGE} beside the campaign file)"
        )
    return url


@dataclass(frozen=True)
class Cell:
    recipe: str
    recipe_options: dict[str, Any]
    batch_size: int

    def study_name(self, campaign: str) -> str:
        return f"{campaign}.{self.recipe}.bs{self.batch_size}"


def _fingerprint(campaign: Campaign, cell: Cell) -> dict[str, str]:
    """What the objective depends on besides the searched hyperparameters: a study must
    not mix trials scored against another target, budget, model, recipe option or value
    of a hyperparameter it does not search."""
    tune = campaign.tune
    assert tune is not None
    fixed = {k: v for k, v in campaign.hparams[cell.batch_size].items() if k not in tune.space}
    return {
        "rcpforge.fixed": json.dumps({"hparams": fixed, "recipe_options": cell.recipe_options}, sort_keys=True),
        _SPACE_ATTR: json.dumps(tune.model_dump(mode="json", include={"space", "seeds"}), sort_keys=True),
        "rcpforge.target": campaign.target.model_dump_json(),
        "rcpforge.budget": campaign.budget.model_dump_json(),
        "rcpforge.trainer": json.dumps(redact(campaign.trainer), sort_keys=True),  # a study holds no secret
    }


def open_study(campaign: Campaign, cell: Cell, storage: str, cell_index: int) -> tuple[optuna.Study, list[FrozenTrial]]:
    """Create the cell's study or resume it. Trials left running by a tune process that
    was killed are marked failed (returned, so their MLflow runs can be closed too): one
    tune process per campaign at a time, so nobody else is running them."""
    tune = campaign.tune
    assert tune is not None
    optuna.logging.set_verbosity(logging.WARNING)
    name = cell.study_name(campaign.name)
    study = optuna.create_study(
        study_name=name, storage=storage, direction="minimize", load_if_exists=True,
        sampler=make_sampler(tune, cell_index), pruner=make_pruner(tune.pruner, campaign.budget.max_tokens, tune.seeds == 1),
    )
    wanted = _fingerprint(campaign, cell)
    if not study.user_attrs:
        for key, value in wanted.items():
            study.set_user_attr(key, value)
    else:
        changed = [_WHAT[k] for k in wanted if study.user_attrs.get(k) != wanted[k]]
        if changed:
            raise TuneError(
                f"study {name} in {redact_uri(storage)} was run with another {', '.join(changed)}; its trials "
                "would not compare: rename the campaign or set tune.storage to a new database"
            )
    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for trial in stale:
        study.tell(trial.number, state=TrialState.FAIL)
    if tune.sampler.kind == "grid":
        _enqueue_grid(study, tune)
    elif tune.start_from_campaign and not study.trials:
        start = _start_point(tune, campaign.hparams[cell.batch_size])
        if start:
            study.enqueue_trial(start, user_attrs={"rcpforge.start": True})
    return study, stale


def grid_points(tune: TuneSpec) -> list[dict[str, Any]]:
    values = tune.grid_values()
    return [dict(zip(values, combo)) for combo in itertools.product(*values.values())]


def _enqueue_grid(study: optuna.Study, tune: TuneSpec) -> None:
    """Queue every grid point that has no finished, running or queued trial (a failed
    one is queued again)."""
    keep = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)
    seen = {json.dumps(t.params or t.system_attrs.get("fixed_params", {}), sort_keys=True)
            for t in study.get_trials(deepcopy=False, states=keep)}
    for point in grid_points(tune):
        if json.dumps(point, sort_keys=True) not in seen:
            study.enqueue_trial(point)


def _start_point(tune: TuneSpec, base: dict[str, Any]) -> dict[str, Any]:
    """The campaign's own values of the searched hyperparameters, where they lie inside
    the space, as the first trial: tuning then never reports worse than the start."""
    start = {}
    for name, p in tune.space.items():
        value = base.get(name)
        if value is None:
            continue
        inside = value in p.choices if p.choices is not None else p.low <= value <= p.high
        if inside:
            start[name] = value
    return start


def finished(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


@dataclass
class CellSummary:
    cell: Cell
    study: str
    trials: int = 0
    converged: int = 0
    censored: int = 0
    pruned: int = 0
    failed: int = 0
    best_value: float | None = None
    best_converged: bool = False
    best_params: dict[str, Any] = field(default_factory=dict)
    best_trial: int | None = None
    top: list[dict[str, Any]] = field(default_factory=list)
    last_error: str | None = None  # the last line of the latest failed trial's error


def summarize(study: optuna.Study, cell: Cell) -> CellSummary:
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state is TrialState.COMPLETE]
    out = CellSummary(
        cell, study.study_name,
        trials=len(done) + sum(t.state is TrialState.PRUNED for t in trials),
        converged=sum(bool(t.user_attrs.get("converged")) for t in done),
        censored=sum(bool(t.user_attrs.get("censored")) for t in done),
        pruned=sum(t.state is TrialState.PRUNED for t in trials),
        failed=sum(t.state is TrialState.FAIL for t in trials),
    )
    failed = [t for t in trials if t.state is TrialState.FAIL and t.user_attrs.get("error")]
    if failed:
        out.last_error = failed[-1].user_attrs["error"].strip().splitlines()[-1]
    ranked = sorted(done, key=lambda t: (t.value, t.number))
    if ranked:
        best = ranked[0]
        out.best_value, out.best_trial = best.value, best.number
        out.best_converged = bool(best.user_attrs.get("converged"))
        out.best_params = dict(best.params)
    out.top = [
        {"trial": t.number, "value": t.value, "converged": bool(t.user_attrs.get("converged")),
         "params": dict(t.params), "statuses": t.user_attrs.get("statuses"),
         "mlflow_runs": t.user_attrs.get("mlflow_run_ids")}
        for t in ranked[:5]
    ]
    return out


def evidence(summary: CellSummary, storage: str, tune: TuneSpec, cell_seed: int = 0) -> dict[str, Any]:
    """The table's record of how a batch size's hyperparameters were found, with the
    sampler's settings and Optuna's version (`cell_seed`: the cell's, as `open_study`'s)."""
    return {
        "study": summary.study,
        "storage": redact_uri(storage),
        "best_trial": summary.best_trial,
        "best_value": summary.best_value,
        "converged": summary.best_converged,
        "seeds_per_trial": tune.seeds,
        "trials": {"finished": summary.trials, "converged": summary.converged, "censored": summary.censored,
                   "pruned": summary.pruned, "failed": summary.failed},
        "top": summary.top,
        "sampler": sampler_settings(tune, cell_seed),
    }
