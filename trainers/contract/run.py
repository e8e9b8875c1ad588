"""The run contract's plain types, shared by every part of rcpforge.

A `RunSpec` is everything that decides the result of one training run; its `run_key`
is a stable hash of exactly that, so a campaign does each run once and only once.
A trainer turns a RunSpec into a `RunResult`, reporting `EvalPoint`s as they happen.

This module must stay free of torch and mlflow: the CLI, the campaign validator and
the analysis import it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rcpforge.trainers.contract.revisions import recipe_revision, trainer_revision
from rcpforge.trainers.contract.run_key import FIRST_REVISION, digest, keyed, revision_entries


def _switch_target(options: dict[str, Any]) -> str | None:
    """The recipe a run's schedule switches to (`switch_to: {name: options}`, normalized;
    trainers/recipes/switch.py), or its base: whose numerics revision the run key carries."""
    raw = options.get("switch_to")
    if not isinstance(raw, dict) or len(raw) != 1:
        return None
    (target, target_options), = raw.items()
    base = target_options.get("base") if isinstance(target_options, dict) else None
    return base if isinstance(base, str) else str(target)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Target(_Frozen):
    """The eval metric a run must reach. MLPerf semantics: the first eval that meets
    it ends the run; there is no interpolation between evals."""

    metric: str = Field(min_length=1)
    mode: Literal["min", "max"]
    value: float

    def reached(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        return value <= self.value if self.mode == "min" else value >= self.value


class Budget(_Frozen):
    max_tokens: int = Field(gt=0)
    eval_every_tokens: int = Field(gt=0)

    @model_validator(mode="after")
    def _eval_within_budget(self) -> Budget:
        if self.eval_every_tokens > self.max_tokens:
            raise ValueError(
                f"eval_every_tokens ({self.eval_every_tokens}) is larger than max_tokens "
                f"({self.max_tokens}): no eval would ever run; lower eval_every_tokens"
            )
        return self


class RunStatus(str, Enum):
    pending = "pending"
    running = "running"
    converged = "converged"
    not_converged = "not_converged"
    diverged = "diverged"
    failed = "failed"
    preempted = "preempted"
    # Stopped early by a tuning pruner (a reporter raised `StopRun`). Only `role: tune`
    # runs end so; it is not an outcome: it never enters the campaign's statistics.
    pruned = "pruned"

    @property
    def is_outcome(self) -> bool:
        """Only outcomes are counted in statistics and never re-run."""
        return self in OUTCOMES


OUTCOMES = frozenset({RunStatus.converged, RunStatus.not_converged, RunStatus.diverged})

# RunSpec fields added after run keys existed, with their defaults: a one-process run's
# key stays what it was before runs could be gangs, a run of a campaign without a model
# axis what it was before campaigns had one.
RUNSPEC_ADDED_LATER: dict[str, Any] = {"world_size": 1, "model": "", "model_settings": {}}
# What a run records of its model's size without it deciding the result: left out of the
# run key, so a corrected count or FLOPs convention never re-runs a model's runs.
MODEL_SIZE_FIELDS = frozenset({"model_params", "model_flops_per_token"})


class RunSpec(_Frozen):
    campaign: str
    role: Literal["campaign", "tune"] = "campaign"
    recipe: str
    recipe_options: dict[str, Any] = Field(default_factory=dict)
    batch_size: int = Field(gt=0)
    seed: int = Field(ge=0)
    hparams: dict[str, float | int | str | bool]
    target: Target
    budget: Budget
    trainer: dict[str, Any]
    # Ranks of the run's gang (the campaign's `launch:`): it decides the result.
    world_size: int = Field(1, ge=1)
    # The campaign's model (`models:`, sweeps/models_spec.py): its name ("" without the
    # axis); its settings are in `trainer` where they are the trainer's own (the tiny LM's
    # d_model), and in `model_settings` where they are free ones (a command trainer's
    # placeholders {model_<setting>}).
    model: str = ""
    model_settings: dict[str, Any] = Field(default_factory=dict)
    # Its parameter count and training FLOPs per token (None: unknown), recorded as tags.
    model_params: int | None = None
    model_flops_per_token: float | None = None

    @property
    def trainer_kind(self) -> str:
        return str(self.trainer["kind"])

    @property
    def run_name(self) -> str:
        cell = f"{self.recipe}-bs{self.batch_size}-s{self.seed}"
        return f"{self.model}-{cell}" if self.model else cell

    @property
    def run_key(self) -> str:
        """Hash of all that decides the result (trainers/contract/run_key.py says what
        enters). The campaign name and the role are left out: they say where a run is
        filed, not what it computes."""
        decisive = keyed(self.model_dump(mode="json", exclude={"campaign", "role", *MODEL_SIZE_FIELDS}),
                         RUNSPEC_ADDED_LATER)
        # a variant of a named recipe under the campaign's own name (`base:`, a `grid:`
        # variant) has that recipe's numerics revision
        base = self.recipe_options.get("base")
        target = _switch_target(self.recipe_options)  # the recipe a schedule switches to
        decisive.update(revision_entries(
            recipe=recipe_revision(base if isinstance(base, str) else self.recipe),
            switch=recipe_revision(target) if target is not None else FIRST_REVISION,
            trainer=trainer_revision(self.trainer),  # the trainer's numerics on its device
        ))
        return digest(decisive)


    @property
    def config_key(self) -> str:
        """The run key of this configuration at seed 0: every seed's run has the same."""
        return self.model_copy(update={"seed": 0}).run_key


class EvalPoint(_Frozen):
    tokens: int
    samples: int
    metrics: dict[str, float]


class ErrorKind(str, Enum):
    """What kind of failure a failed attempt is (its `rcpforge.error_kind` tag). Only a
    `configuration` error changes what the orchestrator does: every run of the campaign
    would fail so, so it is not retried and the campaign stops launching; the rest are
    retried while attempts are left."""

    # The campaign or its program cannot give what the checker reads, whatever the run:
    # the unit rule, argv[0] that cannot be started, a file argv names that is missing.
    configuration = "configuration"
    # Ended before its first MLLOG line: retried, unless the first attempt of another run
    # ended the same way (then both are `configuration`: orchestrator/failfast.py).
    startup = "startup"
    # Anything else (a crash mid-run, a killed worker, a lost node, a stall): retried.
    transient = "transient"
    # In flight when the campaign stopped on a configuration error: stopped, not failed
    # by itself; launched again (with its attempts) by the next `rcpforge run`.
    cancelled = "cancelled"


class RunResult(_Frozen):
    status: RunStatus
    tokens_to_target: int | None = None
    samples_to_target: int | None = None
    tokens_trained: int = 0
    final_metric: float | None = None
    wall_s: float = 0.0
    error: str | None = None
    # A failed result's kind (None: `transient`); never part of a run key.
    error_kind: ErrorKind | None = None


class Reporter(ABC):
    """What a trainer gets besides its RunSpec. All a trainer may read from it is
    declared here, each extra with its default.

    `eval_point` receives eval points as they happen (the orchestrator logs them to
    MLflow; extra entries in `metrics`, such as numeric telemetry, are logged beside the
    eval curve). `output_dir` is this run's own folder, the same on every attempt: result
    files (MLLOG `result.txt`) and checkpoints go there. The extras: `campaign_dir`,
    where relative paths of the campaign resolve (None: the working folder);
    `benchmark`, the MLLOG benchmark name (None: the campaign's name); `run_dir`, the
    run's folder where a gang's ranks share files (their checkpoints) when `output_dir`
    is one rank's own (None: `output_dir`); `idle()`, which a trainer that waits on
    something else calls, so pending points get written (by default nothing is pending).

    The executor's reporters derive from it. An object that does not (a bare reporter of
    a test or another tool, with `output_dir` and `eval_point` only) is taken through
    `Reporter.of`, with the defaults for the rest."""

    output_dir: Path
    campaign_dir: Path | None = None
    benchmark: str | None = None
    run_dir: Path | None = None

    @abstractmethod
    def eval_point(self, point: EvalPoint) -> None: ...

    def idle(self) -> None:  # noqa: B027 - a default, not abstract: a reporter may have nothing pending
        """The trainer has nothing to do for now: a chance to write pending points."""

    @staticmethod
    def of(reporter: Any) -> Reporter:
        """`reporter` as a Reporter: itself when it derives from Reporter, else wrapped,
        with every extra at its default."""
        return reporter if isinstance(reporter, Reporter) else _BareReporter(reporter)


class _BareReporter(Reporter):
    """An object with only `output_dir` and `eval_point`, as a Reporter."""

    def __init__(self, inner: Any):
        self.inner, self.output_dir = inner, inner.output_dir

    def eval_point(self, point: EvalPoint) -> None:
        self.inner.eval_point(point)


class StopRun(BaseException):
    """A reporter may raise this from `eval_point` to stop the run after that eval (a
    tuning pruner does, for a trial that cannot win). Trainers let it propagate; the
    executor turns it into a result with status `pruned`. Campaign reporters never
    raise it, so campaign runs are unaffected. A BaseException, like KeyboardInterrupt,
    so that a trainer's own `except Exception` cleanup does not swallow it."""

    def __init__(self, point: EvalPoint, reason: str):
        super().__init__(reason)
        self.point = point
        self.reason = reason


class Trainer(ABC):
    """Turns a RunSpec into a RunResult, reporting eval points as they happen: the class
    of a trainer kind, which derives from it and overrides what it needs.

    `Settings` and `HParams`: the pydantic models of a `module:Class` kind's `trainer:`
    settings and per-batch-size hyperparameters (None: taken as written); a registered
    kind names its models in the registry. `writes_mllog`: True when the trainer writes
    the run's MLLOG `result.txt` into `reporter.output_dir` itself (the command trainer
    keeps its program's lines); else the executor writes it around the trainer, with the
    MLPerf disclosure keys of `disclosure(spec)` (the parallelism, the lowest precision).
    A user's class that does not derive from Trainer gets these defaults for what it
    leaves out (the registry derives it)."""

    Settings: ClassVar[type[BaseModel] | None] = None
    HParams: ClassVar[type[BaseModel] | None] = None
    writes_mllog: ClassVar[bool] = False

    @abstractmethod
    def train(self, spec: RunSpec, reporter: Reporter) -> RunResult: ...

    def disclosure(self, spec: RunSpec) -> dict[str, Any]:
        """MLPerf's disclosure keys of the run (the 6.1 rules want one of each): the header
        of the result file the executor writes; for a trainer that writes its own, those
        its file leaves out, appended by the executor. The executor adds `config_filename`."""
        return {}
