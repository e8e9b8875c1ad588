"""Trainer kinds: the settings model (torch-free, used to validate campaigns) and the
trainer class (imported only inside a worker, where the training happens).

A kind is a registered name (`tinylm`), or `module:Class` for a user's own Python
trainer whose class may define a pydantic `Settings` model.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from trainers.contract import Trainer
from trainers.contract.fields import known_fields, unknown_field

# kind -> (settings model, hyperparameters model, trainer class)
_BUILTIN: dict[str, tuple[str, str, str]] = {
    "tinylm": (
        "trainers.tinylm.settings:TinyLMSettings",
        "trainers.tinylm.settings:TinyLMHParams",
        "trainers.tinylm.train:TinyLMTrainer",
    ),
    "command": (
        "trainers.command.settings:CommandSettings",
        "trainers.command.settings:CommandHParams",
        "trainers.command.trainer:CommandTrainer",
    ),
}


class TrainerError(ValueError):
    pass


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise TrainerError(f"cannot import {path!r}: {err}") from None


def _model(kind: str, which: int, attr: str) -> type[BaseModel] | None:
    if kind in _BUILTIN:
        return _load(_BUILTIN[kind][which])
    if ":" in kind:
        return getattr(_load(kind), attr, None)
    raise TrainerError(
        f"unknown trainer kind {kind!r}; valid kinds: {', '.join(sorted(_BUILTIN))}, "
        "or 'package.module:Class' for your own trainer"
    )


def validate_trainer_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Validate `trainer:` of a campaign; returns it with defaults filled in, so that the
    run key covers every setting that decides the result."""
    kind = settings.get("kind")
    if not isinstance(kind, str):
        raise TrainerError("trainer.kind is missing; set it, for example `kind: tinylm`")
    model = _model(kind, 0, "Settings")
    rest = {k: v for k, v in settings.items() if k != "kind"}
    if model is None:
        return {"kind": kind, **rest}
    try:
        parsed = model.model_validate(rest)
    except ValidationError as err:
        raise TrainerError(_first_error(err, "trainer", model)) from None
    return {"kind": kind, **parsed.model_dump(mode="json")}


def _first_error(err: ValidationError, prefix: str, model: type[BaseModel]) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = unknown_field(first["loc"][-1], known_fields(model, first["loc"]))
    if not where and re.match(r"^[a-z][a-z0-9_]*: ", msg):  # a check across fields that names its field
        return f"{prefix}.{msg}"
    return f"{prefix}.{where}: {msg}" if where else f"{prefix}: {msg}"


def validate_hparams(kind: str, hparams: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate one batch size's hyperparameters against what the trainer reads."""
    model = _model(kind, 1, "HParams")
    if model is None:
        return dict(hparams)
    try:
        return model.model_validate(hparams).model_dump(mode="json")
    except ValidationError as err:
        valid = ", ".join(model.model_fields)
        raise TrainerError(f"{_first_error(err, where, model)} (hyperparameters of {kind}: {valid})") from None


def check_campaign_fit(settings: dict[str, Any], hparams_by_bs: dict[int, dict[str, Any]],
                       recipes: dict[str, dict[str, Any]] | None = None) -> None:
    """Checks that need the trainer settings, every batch size's hyperparameters and the
    recipes together (the `command` kind's placeholders); a settings model opts in with a
    `check_campaign(settings, hparams_by_bs, recipes)` classmethod that raises ValueError."""
    _settings_check(settings, "check_campaign", settings, hparams_by_bs, recipes or {})


def _settings_check(settings: dict[str, Any], hook: str, *args: Any) -> None:
    """Call the settings model's opt-in check `hook(*args)`, if it has one; its
    ValueError becomes the campaign's TrainerError."""
    check = getattr(_model(settings["kind"], 0, "Settings"), hook, None)
    if check is None:
        return
    try:
        check(*args)
    except ValueError as err:
        raise TrainerError(str(err)) from None


def check_target_metric(settings: dict[str, Any], metric: str) -> None:
    """A target metric the trainer never reports fails the campaign when it loads, not
    every run in its workers; a settings model opts in with a
    `reported_metrics(settings)` classmethod (the tiny LM's; a command trainer's program
    may log anything)."""
    model = _model(settings["kind"], 0, "Settings")
    reported = getattr(model, "reported_metrics", None)
    if reported is None:
        return
    names = reported(settings)
    if metric not in names:
        raise TrainerError(
            f"target.metric: {metric!r} is not reported by the {settings['kind']} trainer with these settings; "
            f"it reports {', '.join(names)}: set target.metric to one of them"
        )


def check_local_host(settings: dict[str, Any]) -> None:
    """What the trainer needs of the machine its runs start on, checked before a local
    campaign launches (a Ray or Slurm worker checks it itself: the machine that loads
    the campaign may have no GPU); a settings model opts in with a
    `check_local_host(settings)` classmethod that raises ValueError."""
    _settings_check(settings, "check_local_host", settings)


def check_world_size(settings: dict[str, Any], batch_sizes: list[int], world_size: int) -> None:
    """A run of `world_size` ranks that the trainer cannot split fails when the campaign
    loads; a settings model opts in with a `check_world_size(batch_sizes, world_size)`
    classmethod that raises ValueError (the tiny LM splits each batch over its ranks)."""
    if world_size > 1:
        _settings_check(settings, "check_world_size", batch_sizes, world_size)


def launches_per_node(settings: dict[str, Any]) -> bool:
    """Whether the trainer's gang is one task per node that starts the node's ranks
    itself (a command trainer run through torchrun), not one task per rank."""
    model = _model(settings["kind"], 0, "Settings")
    per_node = getattr(model, "launches_per_node", None)
    return bool(per_node(settings)) if per_node is not None else False


def writes_mllog(trainer: Trainer) -> bool:
    """Whether the trainer writes its run's MLLOG result file itself (`Trainer.writes_mllog`;
    a user's trainer class that does not say is taken as not writing one)."""
    return bool(getattr(trainer, "writes_mllog", False))


def precision_disclosure(trainer: Trainer, spec: Any) -> dict[str, Any]:
    """MLPerf's disclosure keys of a run (`lowest_numerical_precision_in_linear`, the
    parallelism...) for the result file rcpforge writes around the trainer; a trainer
    opts in with a `disclosure(spec)` method (the tiny LM, from its recipe)."""
    disclose = getattr(trainer, "disclosure", None)
    return dict(disclose(spec)) if disclose is not None else {}


def recipe_labels(kind: str) -> bool:
    """Whether the trainer's recipes are labels of its own precision (a command
    trainer's program), any name with free-form options, rather than rcpforge's quantizers."""
    labels = getattr(_model(kind, 0, "Settings"), "recipe_labels", None)
    return bool(labels()) if labels is not None else False


def validate_recipe(kind: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
    """A campaign's recipe for this trainer kind: a label with free-form options where
    the trainer takes labels, else one of rcpforge's quantizer recipes with its options
    (defaults filled in)."""
    from trainers.recipes.config import RecipeError
    from trainers.recipes.resolve import validate_recipe_options

    check = getattr(_model(kind, 0, "Settings"), "validate_recipe", None)
    try:
        return check(name, options) if check is not None else validate_recipe_options(name, options)
    except (RecipeError, ValueError) as err:
        message = str(err)
        raise TrainerError(message if message.startswith("recipes") else f"recipes: {message}") from None


def campaign_warnings(settings: dict[str, Any], benchmark: str) -> list[str]:
    """What in a valid campaign makes wrong numbers likely (a command trainer's unit
    against the checker's reading of its benchmark); a settings model opts in with a
    `campaign_warnings(settings, benchmark)` classmethod."""
    warn = getattr(_model(settings["kind"], 0, "Settings"), "campaign_warnings", None)
    return list(warn(settings, benchmark)) if warn is not None else []


def get_trainer(kind: str) -> Trainer:
    if kind in _BUILTIN:
        return _load(_BUILTIN[kind][2])()
    if ":" in kind:
        return _load(kind)()
    raise TrainerError(f"unknown trainer kind {kind!r}")
