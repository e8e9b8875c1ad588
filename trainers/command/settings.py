"""Settings of the `command` trainer kind (torch-free: campaigns validate them).

    trainer:
      kind: command
      argv: ["{python}", train.py, --bs, "{batch_size}", --lr, "{lr}", --seed, "{seed}"]
      env: {OMP_NUM_THREADS: "1"}
      workdir: .                # relative to the campaign file's folder (the default)
      metric_key: eval_accuracy # the MLLOG key whose values are the eval curve
      unit: samples             # what the checker's value to converge counts
      max_wall_s: 3600          # wall-clock budget of one attempt (past it: a failed attempt)
      start: per_rank           # or per_node: once per node, for a program run by torchrun
      mllog_file: mllog.txt     # follow this file (relative: in the run's folder) instead of stdout

Placeholders `{name}` in argv, env values, workdir and mllog_file are replaced per run;
`{{` and `}}` are literal braces. A placeholder that names no field fails when the
campaign is loaded. Every placeholder is also an environment variable of the program
(`{batch_size}` is RCPFORGE_BATCH_SIZE); `PLACEHOLDERS` says what each one is.

Recipes of a command trainer are labels: the program implements its own precision, so
any name is allowed, with free-form scalar options that reach the program as
`{recipe_<option>}` and RCPFORGE_RECIPE_<OPTION>. The option `precision`, when given,
declares the label's lowest precision in linear layers in MLPerf's words (`fp8`,
`nvfp4`, ...): a run that discloses another one in its MLLOG gets a warning. A program
that discloses none gets it from the label: rcpforge appends the MLLOG disclosure keys the
label says (`precision` as lowest_numerical_precision_in_linear, and options named as
MLPerf's keys, `lowest_numerical_precision_in_attn: bfloat16`, `tensor_parallelism: 2`,
...) and `config_filename` where the program's file leaves them out.
"""

from __future__ import annotations

import re
import string
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer

from rcpforge.trainers.contract.run_key import keyed
from rcpforge.trainers.settings import TrainerSettings

# Placeholders every run has, besides its hyperparameters and its recipe's options (see
# `run_values`), with what each stands for: `rcpforge recipes` and docs/bring-your-own-code.md list them.
PLACEHOLDERS: dict[str, str] = {
    "python": "the Python interpreter rcpforge runs under",
    "recipe": "the run's recipe label",
    "recipe_<option>": "an option of the run's recipe ({recipe_block} for `block: 16`)",
    "model": "the run's model (its name in models:; empty in a campaign without models:)",
    "model_<setting>": "a setting of the run's model ({model_layers} for `layers: 32`; also params, flops_per_token)",
    "batch_size": "the global batch size, in samples",
    "seed": "the run's seed",
    "output_dir": "the run's own folder (absolute), the same on every attempt",
    "campaign_dir": "the campaign file's folder (absolute)",
    "benchmark": "the benchmark name of the MLLOG files (rcp.benchmark or the campaign's name)",
    "max_tokens": "the token budget (budget.max_tokens)",
    "eval_every_tokens": "the eval cadence in tokens (budget.eval_every_tokens)",
    "max_samples": "the budget in the program's samples: max_tokens / tokens_per_sample",
    "eval_every_samples": "the eval cadence in samples: eval_every_tokens / tokens_per_sample",
    "target_metric": "target.metric", "target_mode": "target.mode (min or max)", "target_value": "target.value",
    # the run's gang (launch:) and its rendezvous, as the backend set them for this task
    "world_size": "ranks of the run", "nodes": "nodes of the run", "processes_per_node": "ranks per node",
    "master_addr": "rank 0's address", "master_port": "the run's rendezvous port", "node_rank": "this node's index",
}
FIXED_FIELDS = tuple(name for name in PLACEHOLDERS if "<" not in name)
RECIPE_OPTION_PREFIX = "recipe_"
MODEL_SETTING_PREFIX = "model_"
# The values MLPerf allows for the lowest_numerical_precision_in_* disclosure keys
# (mlperf_logging 4.1.68, compliance_checker/training_6.1.0/common.yaml).
MLPERF_PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "fp8", "mxfp6", "nvfp4", "mxfp4", "bfloat16",
                     "Graphcore FLOAT 16.16", "int8", "uint8", "int4", "uint4")
# Label options named as MLPerf's disclosure keys (trainers/contract/mllog/read.py's
# DISCLOSURE_KEYS), with the values the 6.1 rules allow.
LABEL_PRECISION_KEYS = tuple(f"lowest_numerical_precision_in_{p}" for p in ("linear", "attn", "comm"))
LABEL_PARALLELISM_KEYS = ("tensor_parallelism", "pipeline_parallelism", "context_parallelism",
                          "expert_parallelism", "micro_batch_size")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_OPTION = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def validate_recipe_label(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """A command trainer's recipe: any label safe in file names, run names and CLI
    arguments, with scalar options whose names can be placeholders."""
    if not _LABEL.match(name) or len(name) > 64:
        raise ValueError(
            f"recipes: label {name!r}: use letters, digits, '_', '.', '+', '-' (at most 64, starting with a "
            f"letter or digit): it names run folders and MLflow runs"
        )
    if not isinstance(options, dict):
        raise ValueError(f"recipes.{name}: options must be a mapping {{option: value}}, got {options!r}")
    for key, value in options.items():
        if not isinstance(key, str) or not _OPTION.match(key):
            raise ValueError(
                f"recipes.{name}.{key}: an option name is letters, digits and '_', starting with a letter "
                f"(it becomes the placeholder {{recipe_<option>}})"
            )
        if value is None or not isinstance(value, (str, int, float, bool)):
            raise ValueError(
                f"recipes.{name}.{key}: options of a command trainer's recipe are scalars (text, number, "
                f"true/false), got {value!r}"
            )
    for key in ("precision", *LABEL_PRECISION_KEYS):
        precision = options.get(key)
        if precision is not None and precision not in MLPERF_PRECISIONS:
            raise ValueError(
                f"recipes.{name}.{key}: {precision!r} is not an MLPerf precision name; "
                f"use one of {', '.join(MLPERF_PRECISIONS)}"
            )
    for key in LABEL_PARALLELISM_KEYS:
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"recipes.{name}.{key}: {value!r}: MLPerf's {key} is a whole number of at least 1")
    return dict(options)


def label_disclosure(options: dict[str, Any]) -> dict[str, Any]:
    """The MLPerf disclosure keys a recipe label says: `precision` is the lowest precision
    in linear layers; options named as the keys are those keys (they win over `precision`)."""
    said = {key: options[key] for key in (*LABEL_PRECISION_KEYS, *LABEL_PARALLELISM_KEYS) if key in options}
    if "precision" in options:
        said.setdefault("lowest_numerical_precision_in_linear", options["precision"])
    return said


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


# Settings added after the first command campaigns, with their defaults: they enter the
# run key only off them (trainers/contract/run_key.py: `keyed`).
ADDED_LATER: dict[str, Any] = {"start": "per_rank", "mllog_file": None}


class FromEnv(BaseModel):
    """An `env` entry given by reference (`HF_TOKEN: {from_env: HF_TOKEN}`): its value is
    the variable of the shell `rcpforge run` starts in, read as runs launch and carried
    to each task beside its RunSpec (sweeps/secrets.py), never recorded nor in a run key."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    from_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


class CommandSettings(TrainerSettings):
    model_config = ConfigDict(frozen=True, extra="forbid")
    argv: list[str] = Field(min_length=1)
    # A value, or where it comes from: credentials by reference ({from_env: NAME}); a
    # literal named like a credential (trainers/contract/redact.py) is recorded as ***.
    env: dict[str, str | FromEnv] = Field(default_factory=dict)
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
    # The program's MLLOG lines are read from this file (placeholders allowed; relative to
    # the run's folder) as it grows, not from its output: for a program that logs through
    # `mllog.config(filename=...)` only. None: from stdout and stderr.
    mllog_file: str | None = None

    @classmethod
    def recipe_labels(cls) -> bool:
        """Recipes are labels of the program's own precision, not rcpforge's quantizers."""
        return True

    @classmethod
    def validate_recipe(cls, name: str, options: dict[str, Any]) -> dict[str, Any]:
        return validate_recipe_label(name, options)

    @classmethod
    def launches_per_node(cls, settings: dict[str, Any]) -> bool:
        return settings.get("start") == "per_node"

    @model_serializer(mode="wrap")
    def _drop_defaults_added_later(self, handler):
        # Left out of the dump (the run key's trainer) while they hold their defaults:
        # the run keys of campaigns written before they existed stay what they were.
        data = handler(self)
        return keyed(data, ADDED_LATER) if isinstance(data, dict) else data

    @field_validator("env", mode="before")
    @classmethod
    def _entries(cls, env: Any) -> Any:
        """An entry is a text, or {from_env: NAME} and nothing else: one line naming it, not
        pydantic's two errors, one per form the entry could have taken."""
        for name, value in (env.items() if isinstance(env, dict) else ()):
            if isinstance(value, dict) and not (set(value) == {"from_env"} and isinstance(value["from_env"], str)
                                                and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value["from_env"])):
                raise ValueError(f"entry {name}: {value!r} is neither a value nor a reference; give a text, or "
                                 f"{{from_env: NAME}} naming an environment variable (letters, digits and _, "
                                 f"not starting with a digit), e.g. {name}: {{from_env: {name}}}")
        return env

    @field_validator("argv", "env", "workdir", "mllog_file")
    @classmethod
    def _placeholders_well_formed(cls, value: Any) -> Any:
        for text in _texts(value):
            placeholders(text)
        return value

    @classmethod
    def free_model_settings(cls) -> bool:
        """A model's settings other than these reach the program as {model_<setting>}."""
        return True

    @classmethod
    def check_models(cls, settings: dict[str, Any], models: dict[str, dict[str, Any]]) -> None:
        _check_model_placeholders(settings, models)

    @classmethod
    def campaign_warnings(cls, settings: dict[str, Any], benchmark: str) -> list[str]:
        """The unit the checker reads for the campaign's benchmark against `unit`: the
        first eval line of a run fails where they disagree, so say it before any run."""
        from rcpforge.trainers.contract.mllog.read import SAMPLES_BENCHMARKS

        unit = settings.get("unit", "samples")
        if unit == "samples" and benchmark not in SAMPLES_BENCHMARKS:
            return [
                f"benchmark {benchmark!r} is read by the checker from each eval's epoch_num (samples_count only "
                f"for {', '.join(sorted(SAMPLES_BENCHMARKS))}); with trainer.unit: samples the program must log "
                f"epoch_num = samples so far in its eval lines, or set rcp.benchmark to the checker's name of "
                f"the benchmark it trains (and log it as submission_benchmark: the placeholder {{benchmark}})"
            ]
        if unit == "epochs" and benchmark in SAMPLES_BENCHMARKS:
            return [
                f"benchmark {benchmark!r} is read by the checker from samples_count, but trainer.unit is epochs: "
                f"set trainer.unit: samples, or rcp.benchmark to a benchmark counted in epochs"
            ]
        return []

    @classmethod
    def check_campaign(cls, settings: dict[str, Any], hparams_by_bs: dict[int, dict[str, Any]],
                       recipes: dict[str, dict[str, Any]] | None = None) -> None:
        """Every placeholder names a fixed field, an option of every recipe, or a
        hyperparameter of every batch size."""
        recipes = recipes or {}
        _refuse_placeholder_clashes(hparams_by_bs, recipes)
        for where, text in _located_texts(settings):
            for name in placeholders(text):
                if name in FIXED_FIELDS or name.startswith(MODEL_SETTING_PREFIX):  # models: `check_models`
                    continue
                if name.startswith(RECIPE_OPTION_PREFIX) and recipes:
                    option = name[len(RECIPE_OPTION_PREFIX):]
                    having = [r for r, opts in recipes.items() if option in opts]
                    if len(having) == len(recipes):
                        continue
                    if having:
                        lacking = ", ".join(r for r in recipes if r not in having)
                        raise ValueError(
                            f"trainer.{where}: placeholder {{{name}}} is option {option!r} of recipe "
                            f"{', '.join(having)} but not of {lacking}; give every recipe the option, or read "
                            f"{env_name(name)} from the environment (set only where the recipe has it)"
                        )
                missing = [bs for bs, hp in hparams_by_bs.items() if name not in hp]
                if len(missing) < len(hparams_by_bs):
                    if missing:
                        raise ValueError(
                            f"trainer.{where}: placeholder {{{name}}} is a hyperparameter of some batch sizes "
                            f"but not of {', '.join(map(str, missing))}; add it to hparams of every batch size"
                        )
                    continue
                known = sorted(set(FIXED_FIELDS) | {k for hp in hparams_by_bs.values() for k in hp}
                               | {RECIPE_OPTION_PREFIX + o for opts in recipes.values() for o in opts})
                raise ValueError(
                    f"trainer.{where}: placeholder {{{name}}} names no field; valid placeholders: {', '.join(known)}"
                )


def _check_model_placeholders(settings: dict[str, Any], models: dict[str, dict[str, Any]]) -> None:
    """Every {model_<setting>} placeholder is a setting of every model of the campaign."""
    for where, text in _located_texts(settings):
        for name in placeholders(text):
            if not name.startswith(MODEL_SETTING_PREFIX):
                continue
            setting = name[len(MODEL_SETTING_PREFIX):]
            if not models:
                raise ValueError(f"trainer.{where}: placeholder {{{name}}} is a model's setting, but the campaign "
                                 "has no models: section; add one (docs/models.md) or remove the placeholder")
            lacking = [m for m, values in models.items() if setting not in values]
            if lacking:
                raise ValueError(f"trainer.{where}: placeholder {{{name}}} is not a setting of model "
                                 f"{', '.join(lacking)}; give every model {setting}: (or read {env_name(name)} "
                                 "from the environment, set only where the model has it)")


def _refuse_placeholder_clashes(hparams_by_bs: dict[int, dict[str, Any]], recipes: dict[str, dict[str, Any]]) -> None:
    """A hyperparameter named like a built-in placeholder, or like a recipe option's
    `recipe_<option>`: the program would get one value and the run would record the other,
    so the campaign is refused, whether or not its argv names the placeholder yet."""
    options = {RECIPE_OPTION_PREFIX + o: r for r, opts in recipes.items() for o in opts}
    for bs, hp in hparams_by_bs.items():
        for name in hp:
            if name in FIXED_FIELDS:
                raise ValueError(
                    f"hparams.{bs}.{name}: a hyperparameter named like the built-in placeholder {{{name}}} "
                    f"({PLACEHOLDERS[name]}), which would win in the program's argv and environment while the run "
                    f"records this value; rename the hyperparameter (e.g. my_{name}) and its {{placeholder}} in argv"
                )
            if name in options:
                raise ValueError(
                    f"hparams.{bs}.{name}: a hyperparameter named like the placeholder {{{name}}} of recipe "
                    f"{options[name]}'s option {name[len(RECIPE_OPTION_PREFIX):]!r}; rename the hyperparameter"
                )


class CommandHParams(BaseModel):
    """Free-form hyperparameters: whatever the program takes (scalars only)."""

    model_config = ConfigDict(frozen=True, extra="allow")


def _texts(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):  # env: an entry by reference has no text of its own
        return [v for v in value.values() if isinstance(v, str)]
    return list(value)


def _located_texts(settings: dict[str, Any]) -> list[tuple[str, str]]:
    found = [(f"argv[{i}]", t) for i, t in enumerate(settings.get("argv") or [])]
    found += [(f"env.{k}", t) for k, t in (settings.get("env") or {}).items() if isinstance(t, str)]
    for name in ("workdir", "mllog_file"):
        if settings.get(name):
            found.append((name, settings[name]))
    return found
