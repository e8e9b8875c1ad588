"""Optuna objects built from a `tune:` section: distributions, sampler, pruner.

Intermediate values reported to a trial are distances to the target (>= 0, lower is
better) at step = tokens trained, so every pruner minimizes as the study does."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from rcpforge.sweeps.tune_spec import PrunerSpec, SamplerSpec, TuneSpec

if TYPE_CHECKING:
    from optuna.study import Study


def distributions(tune: TuneSpec) -> dict[str, BaseDistribution]:
    out: dict[str, BaseDistribution] = {}
    for name, p in tune.space.items():
        if p.choices is not None:
            out[name] = CategoricalDistribution(p.choices)
        elif p.is_int:
            out[name] = IntDistribution(int(p.low), int(p.high), log=p.log, step=int(p.step or 1))
        else:
            out[name] = FloatDistribution(float(p.low), float(p.high), log=p.log, step=p.step)
    return out


def sampler_settings(tune: TuneSpec, cell_seed: int) -> dict[str, Any]:
    """Every setting of a cell's sampler that decides its trials, given to Optuna
    explicitly (none left to a default a new Optuna may change) and recorded with
    Optuna's version in the tune table (`tune_study.evidence`)."""
    spec: SamplerSpec = tune.sampler
    # grid: its points are enqueued as trials (`tune_study.enqueue_grid`), the rest drawn
    # at random: Optuna's GridSampler stops the study through `Study.stop`, which
    # ask-and-tell forbids.
    settings: dict[str, Any] = {"kind": spec.kind, "optuna_sampler": "RandomSampler", "seed": spec.seed + cell_seed}
    if spec.kind == "tpe":
        # constant_liar: trials running side by side on several workers are not all sent
        # to the same promising spot.
        settings.update(optuna_sampler="TPESampler", n_startup_trials=spec.startup_trials,
                        multivariate=spec.multivariate, constant_liar=True)
    return {**settings, "optuna": optuna.__version__}


def make_sampler(tune: TuneSpec, cell_seed: int) -> optuna.samplers.BaseSampler:
    settings = sampler_settings(tune, cell_seed)
    if settings["optuna_sampler"] == "RandomSampler":
        return optuna.samplers.RandomSampler(seed=settings["seed"])
    with warnings.catch_warnings():
        # Optuna 4 calls multivariate and constant_liar experimental; the settings are ours
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=settings["seed"], n_startup_trials=settings["n_startup_trials"],
                                          multivariate=settings["multivariate"],
                                          constant_liar=settings["constant_liar"])


class HopelessPruner(optuna.pruners.BasePruner):
    """Prunes a trial that cannot win or cannot reach the target within the budget.

    - It cannot win: with one seed per trial, once it has trained as many tokens as the
      best converged trial needed and is still short of the target, it can only finish
      behind that trial. This rule is exact.
    - It cannot reach the target in the budget: from `min_fraction` of the budget on,
      even the fastest progress the trial ever made (the best distance so far, over any
      `window` consecutive evals), kept up until `max_tokens`, would not close the
      distance. Loss curves can sit on a plateau and then drop, so this judges no earlier
      than `min_fraction` of the budget and uses the fastest rate, not the latest one."""

    def __init__(self, max_tokens: int, window: int = 3, min_fraction: float = 0.5, single_seed: bool = True):
        self.max_tokens = max_tokens
        self.window = window
        self.min_fraction = min_fraction
        self.single_seed = single_seed

    def prune(self, study: Study | None, trial: FrozenTrial) -> bool:
        steps = sorted(trial.intermediate_values)
        if not steps:
            return False
        best, running = [], float("inf")
        for s in steps:
            running = min(running, trial.intermediate_values[s])
            best.append(running)
        if best[-1] <= 0:
            return False
        if study is not None and self.single_seed and steps[-1] >= _best_converged(study):
            return True
        if steps[-1] < self.min_fraction * self.max_tokens or len(steps) <= self.window:
            return False
        rate = max((best[i - self.window] - best[i]) / (steps[i] - steps[i - self.window])
                   for i in range(self.window, len(steps)))
        return rate <= 0 or steps[-1] + best[-1] / rate > self.max_tokens


def _best_converged(study: Study) -> float:
    """Tokens-to-target of the best trial whose seeds all converged (inf if none)."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return min((t.value for t in done if t.user_attrs.get("converged")), default=float("inf"))


def make_pruner(spec: PrunerSpec, max_tokens: int, single_seed: bool = True) -> optuna.pruners.BasePruner:
    if spec.kind == "none":
        return optuna.pruners.NopPruner()
    if spec.kind == "median":
        return _MedianAfter(spec)
    return HopelessPruner(max_tokens, spec.window, spec.min_fraction, single_seed)


class _MedianAfter(optuna.pruners.BasePruner):
    """Optuna's median rule, silent for a trial's first `warmup_evals` evals (Optuna's own
    warm-up counts steps, which here are tokens)."""

    def __init__(self, spec: PrunerSpec):
        self._median = optuna.pruners.MedianPruner(n_startup_trials=spec.startup_trials, n_warmup_steps=0)
        self._warmup = spec.warmup_evals

    def prune(self, study: Study, trial: FrozenTrial) -> bool:
        if len(trial.intermediate_values) <= self._warmup:
            return False
        return self._median.prune(study, trial)
