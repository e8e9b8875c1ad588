"""The `tune:` section of a campaign file: what `rcpforge tune` searches and how.

    tune:
      space:                                  # per hyperparameter of the trainer
        lr: {low: 0.0001, high: 0.1, log: true}
        warmup_tokens: {low: 0, high: 32768, step: 4096}   # ints -> an integer range
        beta2: {choices: [0.95, 0.99]}
      trials: 16                              # finished trials per (recipe, batch size)
      seeds: 1                                # runs per trial; the objective is their mean
      sampler: {kind: tpe, seed: 0}           # tpe (default), random, grid
      pruner: {kind: hopeless}                # hopeless (default), median, none
      start_from_campaign: true               # trial 0 = the campaign's own hparams
      storage: null                           # default: rcpforge-optuna.db beside the file

Hyperparameters outside `space` keep the campaign's values for that batch size. This
module is free of optuna, so a campaign validates fast; `tune_study.py` builds the
Optuna objects.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rcpforge.trainers.registry import TrainerError, validate_hparams

DEFAULT_STORAGE = "rcpforge-optuna.db"
# Tune runs use their own seeds: tuning on the seeds the campaign later measures would
# select hyperparameters for those very seeds and bias the RCP low.
TUNE_SEED_OFFSET = 10_000

Scalar = float | int | str | bool


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ParamSpace(_Strict):
    """One hyperparameter: a range (`low`, `high`, optional `log` or `step`) or a list of
    `choices`. A range whose bounds are both integers samples integers."""

    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = Field(None, gt=0)
    choices: list[Scalar] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ParamSpace:
        if self.choices is not None:
            if self.low is not None or self.high is not None or self.log or self.step is not None:
                raise ValueError("give either choices or a range (low, high, log, step), not both")
            if not self.choices:
                raise ValueError("choices is empty; list at least one value")
            return self
        if self.low is None or self.high is None:
            raise ValueError("a range needs both low and high (or give choices: [...])")
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high}); swap them")
        if self.log and self.low <= 0:
            raise ValueError(f"log: true needs low > 0, got low = {self.low}")
        if self.log and self.step is not None:
            raise ValueError("log: true and step cannot be combined; drop one")
        return self

    @property
    def is_int(self) -> bool:
        return self.choices is None and all(
            isinstance(v, int) and not isinstance(v, bool) for v in (self.low, self.high, self.step or 1)
        )

    def corners(self) -> list[Scalar]:
        """Values that must all be valid hyperparameters of the trainer."""
        return list(self.choices) if self.choices is not None else [self.low, self.high]


class SamplerSpec(_Strict):
    kind: Literal["tpe", "random", "grid"] = "tpe"
    seed: int = Field(0, ge=0)
    # TPE samples at random for this many trials before it models the objective.
    startup_trials: int = Field(4, ge=1)
    # TPE models the hyperparameters jointly (True) or one by one. Set here, not left to
    # Optuna: Optuna 5 turned its default from one by one to jointly, and the same study
    # gave other trials on Optuna 4 and 5. True is what Optuna 5's default gave.
    multivariate: bool = True


class PrunerSpec(_Strict):
    """`hopeless`: stop a trial that cannot win (one seed per trial: it has trained as
    many tokens as the best converged trial needed, short of the target) or cannot reach
    the target within the budget (judged from `min_fraction` of the budget on: even its
    fastest progress over `window` evals would not get there). `median`: Optuna's median
    rule against earlier trials at the same number of tokens, after `warmup_evals` evals
    and `startup_trials` finished trials. `none`: every trial runs to its end."""

    kind: Literal["hopeless", "median", "none"] = "hopeless"
    window: int = Field(3, ge=1)
    min_fraction: float = Field(0.5, gt=0.0, le=1.0)
    warmup_evals: int = Field(3, ge=0)
    startup_trials: int = Field(2, ge=0)


class TuneSpec(_Strict):
    space: dict[str, ParamSpace] = Field(min_length=1)
    trials: int = Field(12, ge=1, le=100_000)
    seeds: int = Field(1, ge=1, le=1000)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    pruner: PrunerSpec = Field(default_factory=PrunerSpec)
    start_from_campaign: bool = True
    storage: str | None = None

    @model_validator(mode="after")
    def _grid_needs_finite_values(self) -> TuneSpec:
        if self.sampler.kind == "grid":
            loose = [n for n, p in self.space.items() if p.choices is None and (p.step is None or p.log)]
            if loose:
                raise ValueError(
                    f"sampler grid needs choices or a range with step for every hyperparameter; "
                    f"{', '.join(sorted(loose))} has neither"
                )
        return self

    def check_against(self, trainer_kind: str, hparams: dict[int, dict[str, Any]]) -> None:
        """Every value the space can give must be a valid hyperparameter of the trainer
        at every batch size, so a bad space fails before any trial runs."""
        for bs, base in hparams.items():
            for name, param in self.space.items():
                for value in param.corners():
                    try:
                        validate_hparams(trainer_kind, {**base, name: value}, "tune.space")
                    except TrainerError as err:
                        raise ValueError(f"{err}; the search space gives {name} = {value!r} (batch size {bs})") from None

    def grid_values(self) -> dict[str, list[Scalar]]:
        """Every value of each hyperparameter, for the grid sampler."""
        out: dict[str, list[Scalar]] = {}
        for name, p in self.space.items():
            if p.choices is not None:
                out[name] = list(p.choices)
                continue
            n = int(round((p.high - p.low) / p.step))
            values = [p.low + i * p.step for i in range(n + 1) if p.low + i * p.step <= p.high + 1e-12]
            out[name] = [int(v) for v in values] if p.is_int else [float(v) for v in values]
        return out
