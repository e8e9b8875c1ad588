"""Trainer kinds: the settings model (torch-free, used to validate campaigns) and the
trainer class (imported only inside a worker, where the training happens).

A kind is a registered name (`tinylm`), or `module:Class` for a user's own Python
trainer whose class may define a pydantic `Settings` model. What a kind declares, and
the default of what it leaves out: `rcpforge.trainers.contract.Trainer` for the trainer class,
`rcpforge.trainers.settings.TrainerSettings` for the settings model's checks of a campaign.
"""

from __future__ import annotations

import importlib
import re
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, ValidationError

from rcpforge.trainers.contract import Trainer
from rcpforge.trainers.contract.fields import known_fields, unknown_field
from rcpforge.trainers.settings import TrainerSettings

# kind -> (settings model, hyperparameters model, trainer class)
_BUILTIN: dict[str, tuple[str, str, str]] = {
    "tinylm": (
        "rcpforge.trainers.tinylm.settings:TinyLMSettings",
        "rcpforge.trainers.tinylm.settings:TinyLMHParams",
        "rcpforge.trainers.tinylm.train:TinyLMTrainer",
    ),
    "command": (
        "rcpforge.trainers.command.settings:CommandSettings",
        "rcpforge.trainers.command.settings:CommandHParams",
        "rcpforge.trainers.command.trainer:CommandTrainer",
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


def _trainer_class(kind: str) -> type[Trainer]:
    """A `module:Class` kind's class. One that does not derive from Trainer is derived
    from it here: what it defines is its own, what it leaves out (`Settings`,
    `writes_mllog`, `disclosure`...) Trainer's default, as for a class that derives."""
    cls = _load(kind)
    if not isinstance(cls, type):
        raise TrainerError(f"{kind!r} is not a class; a trainer kind names the trainer's class")
    if issubclass(cls, Trainer):
        return cls
    return types.new_class(cls.__name__, (cls, Trainer), {}, lambda ns: ns.update(__module__=cls.__module__))


def _model(kind: str, which: int) -> type[BaseModel] | None:
    """The kind's settings (0) or hyperparameters (1) model; None: taken as written."""
    if kind in _BUILTIN:
        return _load(_BUILTIN[kind][which])
    if ":" in kind:
        cls = _trainer_class(kind)
        return cls.Settings if which == 0 else cls.HParams
    raise TrainerError(
        f"unknown trainer kind {kind!r}; valid kinds: {', '.join(sorted(_BUILTIN))}, "
        "or 'package.module:Class' for your own trainer"
    )


def _declared(kind: str) -> type[TrainerSettings]:
    """What declares the kind's checks: its settings model, or TrainerSettings (every
    default) for a kind whose settings model is none or does not derive from it."""
    model = _model(kind, 0)
    return model if model is not None and issubclass(model, TrainerSettings) else TrainerSettings


@contextmanager
def _as_trainer_error() -> Iterator[None]:
    """A kind's check raises ValueError; the campaign gets it as a TrainerError."""
    try:
        yield
    except ValueError as err:
        raise TrainerError(str(err)) from None


def validate_trainer_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Validate `trainer:` of a campaign; returns it with defaults filled in, so that the
    run key covers every setting that decides the result."""
    kind = settings.get("kind")
    if not isinstance(kind, str):
        raise TrainerError("trainer.kind is missing; set it, for example `kind: tinylm`")
    model = _model(kind, 0)
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
    model = _model(kind, 1)
    if model is None:
        return dict(hparams)
    try:
        return model.model_validate(hparams).model_dump(mode="json")
    except ValidationError as err:
        valid = ", ".join(model.model_fields)
        raise TrainerError(f"{_first_error(err, where, model)} (hyperparameters of {kind}: {valid})") from None


def required_hparams(kind: str) -> list[str]:
    """The hyperparameters every batch size must give the kind (none for a program's)."""
    model = _model(kind, 1)
    return [name for name, f in model.model_fields.items() if f.is_required()] if model is not None else []


def check_campaign_fit(settings: dict[str, Any], hparams_by_bs: dict[int, dict[str, Any]],
                       recipes: dict[str, dict[str, Any]] | None = None,
                       models: dict[str, dict[str, Any]] | None = None) -> None:
    """Checks that need the trainer settings, every batch size's hyperparameters and the
    recipes together (`TrainerSettings.check_campaign`: the `command` kind's placeholders,
    the tiny LM's layer placement), and the models' free settings (`check_models`)."""
    declared = _declared(settings["kind"])
    with _as_trainer_error():
        declared.check_campaign(settings, hparams_by_bs, recipes or {})
        declared.check_models(settings, models or {})


def free_model_settings(kind: str) -> bool:
    """Whether a model's settings that the trainer does not have are free ones that reach
    its program (a command trainer's placeholders), not an error."""
    return bool(_declared(kind).free_model_settings())


def settings_fields(kind: str) -> set[str]:
    """The names of the kind's own settings (none for a kind taken as written)."""
    model = _model(kind, 0)
    return set(model.model_fields) if model is not None else set()


def model_size(settings: dict[str, Any]) -> tuple[int | None, float | None]:
    """A model's parameters and training FLOPs per token from its validated trainer
    settings, where the kind can compute them (`TrainerSettings.model_size`)."""
    return _declared(settings["kind"]).model_size(settings)


def check_target_metric(settings: dict[str, Any], metric: str) -> None:
    """A target metric the trainer never reports fails the campaign when it loads, not
    every run in its workers (`TrainerSettings.reported_metrics`: the tiny LM's; a
    command trainer's program may log anything)."""
    names = _declared(settings["kind"]).reported_metrics(settings)
    if names is not None and metric not in names:
        raise TrainerError(
            f"target.metric: {metric!r} is not reported by the {settings['kind']} trainer with these settings; "
            f"it reports {', '.join(names)}: set target.metric to one of them"
        )


def check_local_host(settings: dict[str, Any]) -> None:
    """What the trainer needs of the machine its runs start on, checked before a local
    campaign launches (a Ray or Slurm worker checks it itself: the machine that loads
    the campaign may have no GPU); `TrainerSettings.check_local_host`."""
    declared = _declared(settings["kind"])
    with _as_trainer_error():
        declared.check_local_host(settings)


def check_world_size(settings: dict[str, Any], batch_sizes: list[int], world_size: int) -> None:
    """A run of `world_size` ranks that the trainer cannot split fails when the campaign
    loads (`TrainerSettings.check_world_size`: the tiny LM splits each batch over its ranks)."""
    if world_size > 1:
        declared = _declared(settings["kind"])
        with _as_trainer_error():
            declared.check_world_size(batch_sizes, world_size)


def launches_per_node(settings: dict[str, Any]) -> bool:
    """Whether the trainer's gang is one task per node that starts the node's ranks
    itself (a command trainer run through torchrun), not one task per rank."""
    return bool(_declared(settings["kind"]).launches_per_node(settings))


def recipe_labels(kind: str) -> bool:
    """Whether the trainer's recipes are labels of its own precision (a command
    trainer's program), any name with free-form options, rather than rcpforge's quantizers."""
    return bool(_declared(kind).recipe_labels())


def validate_recipe(kind: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
    """A campaign's recipe for this trainer kind: a label with free-form options where
    the trainer takes labels, else one of rcpforge's quantizer recipes with its options
    (defaults filled in)."""
    from rcpforge.trainers.recipes.resolve import validate_recipe_options

    declared = _declared(kind)
    try:
        own = declared.validate_recipe(name, options)
        return own if own is not None else validate_recipe_options(name, options)
    except ValueError as err:  # the recipe registry's RecipeError included
        message = str(err)
        raise TrainerError(message if message.startswith("recipes") else f"recipes: {message}") from None


def campaign_warnings(settings: dict[str, Any], benchmark: str) -> list[str]:
    """What in a valid campaign makes wrong numbers likely (a command trainer's unit
    against the checker's reading of its benchmark); `TrainerSettings.campaign_warnings`."""
    return list(_declared(settings["kind"]).campaign_warnings(settings, benchmark))


def builtin_trainer_module(kind: str) -> str | None:
    """The module of a built-in trainer kind's training code (None for a user's kind,
    whose code may change between campaigns and is imported afresh by each worker)."""
    return _BUILTIN[kind][2].split(":")[0] if kind in _BUILTIN else None


def get_trainer(kind: str) -> Trainer:
    if kind in _BUILTIN:
        return _load(_BUILTIN[kind][2])()
    if ":" in kind:
        return _trainer_class(kind)()
    raise TrainerError(f"unknown trainer kind {kind!r}")
