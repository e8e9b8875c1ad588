"""Optuna objects built from a `tune:` section: distributions, sampler, pruner.

Intermediate values reported to a trial are distances to the target (>= 0, lower is
better) at step = tokens trained, so every pruner minimizes as the study does."""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial

from sweeps.tune_spec import PrunerSpec, SamplerSpec, TuneSpec

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


def make_sampler(tune: TuneSpec, cell_seed: int) -> optuna.samplers.BaseSampler:
    spec: SamplerSpec = tune.sampler
    seed = spec.seed + cell_seed
    if spec.kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.kind == "grid":
        # The grid points are enqueued as trials (`tune_study.enqueue_grid`): Optuna's
        # GridSampler stops the study through `Study.stop`, which ask-and-tell forbids.
        return optuna.samplers.RandomSampler(seed=seed)
    # constant_liar: trials running side by side on several workers are not all sent to
    # the same promising spot.
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=spec.startup_trials, constant_liar=True)


class HopelessPruner(optuna.pruners.BasePruner):
    """Prunes a trial that cannot reach the target within the budget, judged from its
    best distance so far: if even a straight line through the progress of the last
    `window` evals (optimistic for a loss curve that flattens) does not reach distance 0
    by `max_tokens`, more training will not either. A trial with no progress over the
    window is pruned too."""

    def __init__(self, max_tokens: int, window: int = 3, warmup_evals: int = 3):
        self.max_tokens = max_tokens
        self.window = window
        self.warmup_evals = warmup_evals

    def prune(self, study: Study, trial: FrozenTrial) -> bool:
        steps = sorted(trial.intermediate_values)
        if len(steps) <= max(self.warmup_evals, self.window):
            return False
        best, running = [], float("inf")
        for s in steps:
            running = min(running, trial.intermediate_values[s])
            best.append(running)
        now, before = best[-1], best[-1 - self.window]
        if now <= 0:
            return False
        rate = (before - now) / (steps[-1] - steps[-1 - self.window])
        if rate <= 0:
            return True
        return steps[-1] + now / rate > self.max_tokens


def make_pruner(spec: PrunerSpec, max_tokens: int) -> optuna.pruners.BasePruner:
    if spec.kind == "none":
        return optuna.pruners.NopPruner()
    if spec.kind == "median":
        return _MedianAfter(spec)
    return HopelessPruner(max_tokens, spec.window, spec.warmup_evals)


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
