"""Settings of the `command` trainer kind (torch-free: campaigns validate them).

    trainer:
      kind: command
      argv: ["{python}", train.py, --bs, "{batch_size}", --lr, "{lr}", --seed, "{seed}"]
      env: {OMP_NUM_THREADS: "1"}
      workdir: .                # relative to the campaign file's folder (the default)
      metric_key: eval_accuracy # the MLLOG key whose values are the eval curve
      unit: samples             # what the checker's value to converge counts
      max_wall_s: 3600          # wall-clock budget of one attempt
      start: per_rank           # or per_node: once per node, for a program run by torchrun

Placeholders `{name}` in argv, env values and workdir are replaced per run; `{{` and `}}`
are literal braces. A placeholder that names no field fails when the campaign is loaded.
"""

from __future__ import annotations

import re
import string
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer

# Placeholders every run has, besides its hyperparameters (see `run_values`).
FIXED_FIELDS = (
    "python", "recipe", "batch_size", "seed", "output_dir", "campaign_dir", "benchmark",
    "max_tokens", "eval_every_tokens", "target_metric", "target_mode", "target_value",
    # the run's gang (launch:) and its rendezvous, as the backend set them for this task
    "world_size", "nodes", "processes_per_node", "master_addr", "master_port", "node_rank",
)


def placeholders(text: str) -> list[str]:
    """The field names in `text`; ValueError for a malformed one."""
    names = []
    for _, name, spec, conversion in string.Formatter().parse(text):
        if name is None:
            continue
        if spec or conversion:
            raise ValueError(f"placeholder {{{name}}} in {text!r}: format specs and conversions are not supported")
        if not name:
            raise ValueError(f"empty placeholder {{}} in {text!r}; write {{{{}}}} for literal braces")
        names.append(name)
    return names


def substitute(text: str, values: dict[str, str]) -> str:
    out = []
    for literal, name, _, _ in string.Formatter().parse(text):
        out.append(literal)
        if name is not None:
            out.append(values[name])
    return "".join(out)


def env_name(field: str) -> str:
    """The environment variable that carries a field: RCPFORGE_BATCH_SIZE, RCPFORGE_LR."""
    return "RCPFORGE_" + re.sub(r"[^A-Za-z0-9]", "_", field).upper()


class CommandSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    metric_key: str = Field("eval_accuracy", min_length=1)
    unit: Literal["samples", "epochs"] = "samples"
    # Tokens of one sample: eval points are stepped by tokens (samples x this), and the
    # token budget applies to them.
    tokens_per_sample: int = Field(1, ge=1)
    max_wall_s: float = Field(3600.0, gt=0)
    # After run_stop, or when stopping it: how long the process has to exit before SIGKILL.
    stop_grace_s: float = Field(10.0, gt=0)
    # per_rank: the program runs once per rank of the run's gang, with RANK, WORLD_SIZE,
    # MASTER_ADDR... set (`init_process_group(init_method="env://")` just works);
    # per_node: once per node, for a program that starts the node's ranks itself
    # (`torchrun --nnodes {nodes} --nproc-per-node {processes_per_node} --node-rank
    # {node_rank} --master-addr {master_addr} --master-port {master_port} ...`).
    # Either way the MLLOG stream followed is the reporter's (rank 0's, or node 0's).
    start: Literal["per_rank", "per_node"] = "per_rank"

    @classmethod
    def launches_per_node(cls, settings: dict[str, Any]) -> bool:
        return settings.get("start") == "per_node"

    @model_serializer(mode="wrap")
    def _drop_defaults_added_later(self, handler):
        # Left out of the dump while it holds its default: the run keys of campaigns
        # written before it existed stay what they were.
        data = handler(self)
        if isinstance(data, dict) and data.get("start") == "per_rank":
            data.pop("start", None)
        return data

    @field_validator("argv", "env", "workdir")
    @classmethod
    def _placeholders_well_formed(cls, value: Any) -> Any:
        for text in _texts(value):
            placeholders(text)
        return value

    @classmethod
    def check_campaign(cls, settings: dict[str, Any], hparams_by_bs: dict[int, dict[str, Any]]) -> None:
        """Every placeholder names a fixed field or a hyperparameter of every batch size."""
        for where, text in _located_texts(settings):
            for name in placeholders(text):
                if name in FIXED_FIELDS:
                    continue
                missing = [bs for bs, hp in hparams_by_bs.items() if name not in hp]
                if len(missing) < len(hparams_by_bs):
                    if missing:
                        raise ValueError(
                            f"trainer.{where}: placeholder {{{name}}} is a hyperparameter of some batch sizes "
                            f"but not of {', '.join(map(str, missing))}; add it to hparams of every batch size"
                        )
                    continue
                known = sorted(set(FIXED_FIELDS) | {k for hp in hparams_by_bs.values() for k in hp})
                raise ValueError(
                    f"trainer.{where}: placeholder {{{name}}} names no field; valid placeholders: {', '.join(known)}"
                )


class CommandHParams(BaseModel):
    """Free-form hyperparameters: whatever the program takes (scalars only)."""

    model_config = ConfigDict(frozen=True, extra="allow")


def _texts(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return list(value.values())
    return list(value)


def _located_texts(settings: dict[str, Any]) -> list[tuple[str, str]]:
    found = [(f"argv[{i}]", t) for i, t in enumerate(settings.get("argv") or [])]
    found += [(f"env.{k}", t) for k, t in (settings.get("env") or {}).items()]
    if settings.get("workdir"):
        found.append(("workdir", settings["workdir"]))
    return found
