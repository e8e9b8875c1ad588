"""The `models:` section: a campaign's model axis, named variants of its `trainer:`.

    models:
      - {name: w64, d_model: 64, n_heads: 4}
      - name: w256
        d_model: 256
        n_heads: 8
        hparams: {32: {lr: 0.004, warmup_tokens: 100000}, 128: {...}}   # else the campaign's
        hparams_from: hparams.w256.bf16.yaml   # or a `rcpforge tune` table of its own
        # a command trainer's model: params: 1.2e9, flops_per_token: 7.4e9

Each model's settings go over the campaign's `trainer:` settings (a setting the model
gives replaces the campaign's, whole: `data:` too) and are validated as the trainer's. A
command trainer's model may also give free settings, which reach its program as the
placeholders {model_<setting>} (and RCPFORGE_MODEL_<SETTING>), beside {model}, its name.
A cell is then (model, recipe, batch size); docs/models.md says what changes with the axis.

Torch-free: campaigns are validated where torch is not installed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rcpforge.trainers.registry import (
    TrainerError,
    free_model_settings,
    model_size,
    settings_fields,
    validate_hparams,
    validate_trainer_settings,
)

# What a model entry says of itself, beside the trainer settings it varies.
OWN_KEYS = ("name", "hparams", "hparams_from", "params", "flops_per_token")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_FREE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class ModelChoice(BaseModel):
    """One model of the axis: as written (`settings`, the entry less its own keys), then,
    once the campaign has validated it, its trainer settings (`trainer`: the campaign's
    with the model's over them), its free settings and its hyperparameters per batch size."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(pattern=_NAME.pattern, max_length=64)
    settings: dict[str, Any] = Field(default_factory=dict)
    hparams: dict[int, dict[str, Any]] | None = None
    params: int | None = Field(None, gt=0)
    flops_per_token: float | None = Field(None, gt=0)
    trainer: dict[str, Any] = Field(default_factory=dict)
    free: dict[str, Any] = Field(default_factory=dict)

    @property
    def placeholders(self) -> dict[str, Any]:
        """The model's values a command trainer's program gets ({model_<name>})."""
        size = {"params": self.params, "flops_per_token": self.flops_per_token}
        return {**self.free, **{k: v for k, v in size.items() if v is not None}}


def model_forms(value: Any, base_dir: Path) -> Any:
    """The `models:` list as written into ModelChoice fields: each entry's own keys, its
    settings, and a tune table's hyperparameters (`hparams_from`) over its inline ones."""
    if value is None:
        return value
    if not isinstance(value, list) or not value:
        raise ValueError(f"models: a list of models, each {{name: ..., <setting>: value}}; got {value!r}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ValueError(f"models[{i}]: each model is a mapping {{name: ..., <setting>: value}}, got {item!r}")
        if not item.get("name"):
            example = f"w{item.get('d_model', 64)}"
            raise ValueError(f"models[{i}]: the model has no name; give it name: (e.g. name: {example}), which "
                             "names its runs, its cells and its RCP benchmark")
        entry = {k: item[k] for k in OWN_KEYS if k in item and k != "hparams_from"}
        entry["name"] = str(item["name"])
        if not _NAME.match(entry["name"]) or len(entry["name"]) > 64:
            raise ValueError(f"models[{i}].name: {entry['name']!r}: use letters, digits, '_', '.', '+', '-' "
                             "(at most 64, starting with a letter or digit): it names runs and RCP files")
        entry["settings"] = {k: v for k, v in item.items() if k not in OWN_KEYS}
        entry["params"] = _whole(entry.get("params"))
        if item.get("hparams_from"):
            entry["hparams"] = _with_table(item, base_dir)
        out.append(entry)
    names = [e["name"] for e in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"models: two models are named {', '.join(dupes)}; give each model its own name")
    return out


def _whole(value: Any) -> Any:
    """A parameter count as written, 1.2e9 included (YAML reads it as a float, or as text:
    PyYAML's floats need a '.' and a signed exponent), as a whole number where it is one."""
    try:
        number = float(value) if isinstance(value, (str, float)) else value
    except ValueError:
        return value  # the field's own validation names it
    return int(number) if isinstance(number, float) and number.is_integer() else number


def _with_table(item: dict[str, Any], base_dir: Path) -> dict[Any, dict[str, Any]]:
    from rcpforge.sweeps.tune_table import load_hparams_table

    try:
        table = load_hparams_table(base_dir, item["hparams_from"])
    except ValueError as err:
        raise ValueError(f"models.{item['name']}.{err}") from None
    inline = item.get("hparams") or {}
    merged = {int(bs) if str(bs).isdigit() else bs: dict(hp or {}) for bs, hp in inline.items()}
    for bs, hp in table.items():
        merged[bs] = {**merged.get(bs, {}), **hp}
    return merged


def resolve_model(model: ModelChoice, trainer: dict[str, Any], hparams: dict[int, dict[str, Any]],
                  batch_sizes: list[int]) -> ModelChoice:
    """The model validated against the campaign's validated `trainer` and `hparams` (its
    own hyperparameters, else the campaign's): its trainer settings, free settings, size
    and hyperparameters filled in. Raises ValueError naming models.<name>.<field>."""
    kind, where = trainer["kind"], f"models.{model.name}"
    if "kind" in model.settings:
        raise ValueError(f"{where}.kind: a model varies the settings of the campaign's trainer ({kind}); remove kind")
    free_kind = free_model_settings(kind)
    own = settings_fields(kind) if free_kind else set(model.settings)
    free = {k: v for k, v in model.settings.items() if k not in own}
    for key, value in free.items():
        if not _FREE.match(key) or value is None or not isinstance(value, (str, int, float, bool)):
            raise ValueError(f"{where}.{key}: a model's own setting of a {kind} trainer is a scalar (text, number, "
                             f"true/false) named with letters, digits and '_' (its placeholder {{model_{key}}})")
    try:
        merged = validate_trainer_settings({**trainer, **{k: v for k, v in model.settings.items() if k in own}})
    except TrainerError as err:
        raise ValueError(re.sub(r"^trainer\b", where, str(err))) from None
    params, flops = model_size(merged)
    for key, computed in (("params", params), ("flops_per_token", flops)):
        if computed is not None and getattr(model, key) is not None:
            raise ValueError(f"{where}.{key}: the {kind} trainer computes it from the model's shapes "
                             "(docs/models.md); remove it")
    by_bs = model.hparams if model.hparams is not None else hparams
    missing = [b for b in batch_sizes if b not in by_bs]
    if missing:
        whose = f"{where}.hparams" if model.hparams is not None else "hparams"
        raise ValueError(f"{whose}: no entry for batch size {', '.join(map(str, missing))} of model {model.name}; "
                         f"give every batch size its hyperparameters in {where}.hparams (or the campaign's hparams)")
    try:
        checked = {b: validate_hparams(kind, hp or {}, f"{where}.hparams.{b}") for b, hp in by_bs.items()}
    except TrainerError as err:
        raise ValueError(str(err)) from None
    return model.model_copy(update={
        "trainer": merged, "free": free, "hparams": checked,
        "params": params if params is not None else model.params,
        "flops_per_token": flops if flops is not None else model.flops_per_token,
    })
