"""Trainer kinds: the settings model (torch-free, used to validate campaigns) and the
trainer class (imported only inside a worker, where the training happens).

A kind is a registered name (`tinylm`), or `module:Class` for a user's own Python
trainer whose class may define a pydantic `Settings` model.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import BaseModel, ValidationError

from trainers.contract import Trainer

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
        raise TrainerError(_first_error(err, "trainer")) from None
    return {"kind": kind, **parsed.model_dump(mode="json")}


def _first_error(err: ValidationError, prefix: str) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{prefix}.{where}: {first['msg']}" if where else f"{prefix}: {first['msg']}"


def validate_hparams(kind: str, hparams: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate one batch size's hyperparameters against what the trainer reads."""
    model = _model(kind, 1, "HParams")
    if model is None:
        return dict(hparams)
    try:
        return model.model_validate(hparams).model_dump(mode="json")
    except ValidationError as err:
        valid = ", ".join(model.model_fields)
        raise TrainerError(f"{_first_error(err, where)} (hyperparameters of {kind}: {valid})") from None


def check_campaign_fit(settings: dict[str, Any], hparams_by_bs: dict[int, dict[str, Any]]) -> None:
    """Checks that need the trainer settings and every batch size's hyperparameters
    together (the `command` kind's placeholders); a settings model opts in with a
    `check_campaign(settings, hparams_by_bs)` classmethod that raises ValueError."""
    _settings_check(settings, "check_campaign", settings, hparams_by_bs)


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


def get_trainer(kind: str) -> Trainer:
    if kind in _BUILTIN:
        return _load(_BUILTIN[kind][2])()
    if ":" in kind:
        return _load(kind)()
    raise TrainerError(f"unknown trainer kind {kind!r}")
