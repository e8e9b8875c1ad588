"""The campaign file: YAML, validated by pydantic, with errors that name the field.

    name: quickstart
    trainer: {kind: tinylm, d_model: 64}
    target: {metric: eval_excess_loss, mode: min, value: 0.4}
    budget: {max_tokens: 2000000, eval_every_tokens: 16384}
    recipes: [bf16, fp8_tensorwise]          # or {recipe_name: {option: value}}; a recipe
                                             # written by its operands (trainers/recipes/written.py);
                                             # {nvfp4: {grid: {hadamard: [true, false]}}} (sweeps/recipe_grid.py)
    batch_sizes: [32, 128]                   # min first, max last
    seeds: 4                                 # or {default: 4, nvfp4: 8}
    adaptive: {margin: 1.02, max_seeds: 20}  # instead of seeds: as many as the question needs
                                             # (sweeps/adaptive_spec.py)
    hparams: {32: {lr: 0.01, warmup_tokens: 100000}, 128: {...}}
    backend: {kind: local, workers: 2}       # or {kind: ray, ...}, {kind: slurm, ...}
    launch: {nodes: 1, processes_per_node: 2} # each run as a gang of ranks (sweeps/launch.py)
    tracking: {uri: sqlite:///...}           # default: rcpforge-mlflow.db beside this file
                                             # retry_s: 600 (seconds to wait out a store outage)
    tune: {space: {lr: {low: 0.001, high: 0.1, log: true}}, trials: 12}   # sweeps/tune_spec.py
    hparams_from: hparams.bf16.yaml          # a table written by `rcpforge tune`
    models: [{name: w64, d_model: 64}, ...]  # a model axis: cells per model (sweeps/models_spec.py)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rcpforge.sweeps.adaptive_spec import AdaptiveSpec
from rcpforge.sweeps.backends import BackendSpec, LocalBackendSpec, default_kind
from rcpforge.sweeps.campaign_checks import (
    check_launch_against_backend,
    check_schedule_within_budget,
    check_warmup_within_budget,
)
from rcpforge.sweeps.cost_spec import PricedCost
from rcpforge.sweeps.launch import LaunchSpec
from rcpforge.sweeps.models_spec import ModelChoice, model_forms, resolve_model
from rcpforge.sweeps.rcp_spec import RcpSpec
from rcpforge.sweeps.recipe_grid import expand_grid
from rcpforge.sweeps.secrets import take_out_literals
from rcpforge.sweeps.tracking_spec import DEFAULT_DB, TrackingSpec, beside
from rcpforge.trainers.contract import Budget, RunSpec, Target
from rcpforge.trainers.contract.fields import validation_message
from rcpforge.trainers.contract.gang import Gang
from rcpforge.trainers.contract.submission import SUBMISSION_RUNS, model_benchmark, name_as_benchmark
from rcpforge.sweeps.tune_spec import TuneSpec
from rcpforge.trainers.registry import (
    TrainerError,
    check_campaign_fit,
    campaign_warnings,
    check_target_metric,
    check_world_size,
    launches_per_node,
    required_hparams,
    validate_hparams,
    validate_recipe,
    validate_trainer_settings,
)


class CampaignError(ValueError):
    """A campaign that cannot be used; the message names the file, the field and the fix,
    on one line: control characters from the file are shown escaped."""

    def __init__(self, message: str):
        super().__init__("".join(c if c.isprintable() else repr(c)[1:-1] for c in message))


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RecipeChoice(_Strict):
    name: str
    options: dict[str, Any] = Field(default_factory=dict)
    # the campaign entry whose `grid:` made this recipe (sweeps/recipe_grid.py), if any
    grid_of: str | None = Field(None, exclude=True)


class Campaign(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)
    trainer: dict[str, Any]
    target: Target
    budget: Budget
    recipes: list[RecipeChoice] = Field(min_length=1)
    batch_sizes: list[int] = Field(min_length=2)
    seeds: dict[str, int] | None = None
    adaptive: AdaptiveSpec | None = None
    hparams: dict[int, dict[str, Any]]
    backend: BackendSpec = Field(default_factory=LocalBackendSpec)
    launch: LaunchSpec = Field(default_factory=LaunchSpec)
    cost: PricedCost = None  # prices of the compute (sweeps/cost_spec.py); after launch, which it reads
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    rcp: RcpSpec = Field(default_factory=RcpSpec)
    tune: TuneSpec | None = None
    # A hyperparameter table written by `rcpforge tune` (`hparams.<recipe>.yaml`): its
    # values override `hparams` per batch size; `hparams` may then be left out.
    hparams_from: str | None = None
    # The model axis (sweeps/models_spec.py): None, one model, the campaign's `trainer:`.
    models: list[ModelChoice] | None = Field(None, min_length=1)
    # Where the campaign file lives: relative paths and the default store resolve here.
    base_dir: Path = Field(default=Path("."), exclude=True)
    # The campaign file's name, MLPerf's `config_filename` in every run's MLLOG ("" for a
    # campaign not read from a file: its name stands in).
    config_file: str = Field(default="", exclude=True)
    # trainer.env's credential-named literals, taken out of `trainer` and `models` (there: ***)
    # by model ("": the campaign's trainer); never dumped, so never recorded (sweeps/secrets.py).
    secret_literals: dict[str, dict[str, str]] = Field(default_factory=dict, exclude=True, repr=False)

    @field_validator("backend", mode="before")
    @classmethod
    def _backend_kind(cls, value: Any) -> Any:
        return default_kind(value)

    @model_validator(mode="before")
    @classmethod
    def _load_hparams_from(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("hparams_from"):
            return data
        from rcpforge.sweeps.tune_table import load_hparams_table

        table = load_hparams_table(Path(data.get("base_dir", ".")), data["hparams_from"])
        inline = data.get("hparams") or {}
        if not isinstance(inline, dict):
            return data  # the field's own validation names the problem
        merged = {int(bs) if str(bs).isdigit() else bs: dict(hp or {}) for bs, hp in inline.items()}
        for bs, hp in table.items():
            merged[bs] = {**merged.get(bs, {}), **hp}
        return {**data, "hparams": merged}

    @model_validator(mode="before")
    @classmethod
    def _model_forms(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("models") is None:
            return data
        models = model_forms(data["models"], Path(data.get("base_dir", ".")))
        # models that all have their own hyperparameters need none of the campaign's
        return {"hparams": {}, **data, "models": models}

    @field_validator("recipes", mode="before")
    @classmethod
    def _recipe_forms(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        out = []
        for item in value:
            if isinstance(item, str):
                out.append({"name": item})
            elif isinstance(item, dict) and len(item) == 1:
                (name, options), = item.items()
                if not isinstance(options or {}, dict) or "grid" not in (options or {}):
                    out.append({"name": name, "options": options or {}})
                    continue
                out += [{"name": n, "options": o, "grid_of": str(name)} for n, o in expand_grid(str(name), options)]
            else:
                raise ValueError(f"each recipe is a name or {{name: {{options}}}}, got {item!r}")
        return out

    @field_validator("recipes")
    @classmethod
    def _recipes_known(cls, value: list[RecipeChoice]) -> list[RecipeChoice]:
        names = [r.name for r in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            generated = any(r.grid_of for r in value if r.name in dupes)
            raise ValueError(
                f"recipe listed twice: {', '.join(dupes)}"
                + ("; a grid: variant's name is generated from its values (sweeps/recipe_grid.py), so drop the "
                   "duplicate value or rename the recipe it clashes with" if generated else "")
            )
        return value  # what a name and its options mean depends on the trainer: `_cross_checks`

    @field_validator("batch_sizes")
    @classmethod
    def _batch_sizes_ordered(cls, value: list[int]) -> list[int]:
        if any(b <= 0 for b in value):
            raise ValueError(f"batch sizes must be positive, got {value}")
        if any(a >= b for a, b in zip(value, value[1:])):
            raise ValueError(
                f"must be strictly increasing, min first and max last; got {value}, "
                f"write {sorted(set(value))}"
            )
        return value

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds_forms(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"default": value}
        if isinstance(value, dict) and "default" not in value:
            raise ValueError("a per-recipe seeds mapping needs a 'default' entry, e.g. {default: 4, nvfp4: 8}")
        return value

    @field_validator("seeds")
    @classmethod
    def _seeds_positive(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        bad = {k: v for k, v in (value or {}).items() if v < 1}
        if bad:
            raise ValueError(f"runs per cell must be at least 1, got {bad}")
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> Campaign:
        recipes = {r.name for r in self.recipes} | {r.grid_of for r in self.recipes if r.grid_of}
        _check_design(self)
        unknown = sorted(set(self.seeds or {}) - recipes - {"default"})
        if unknown:
            raise ValueError(f"seeds: {', '.join(unknown)} is not among the campaign's recipes {sorted(recipes)}")
        try:
            object.__setattr__(self, "trainer", validate_trainer_settings(self.trainer))
            kind = self.trainer["kind"]
            choices = [RecipeChoice(name=r.name, options=validate_recipe(kind, r.name, r.options), grid_of=r.grid_of)
                       for r in self.recipes]
            object.__setattr__(self, "recipes", choices)
            missing = [b for b in self.batch_sizes if b not in self.hparams]
            if missing and self.models is None:
                needs = " and ".join(required_hparams(kind)) or "an entry ({} where the trainer takes none)"
                raise ValueError(f"hparams: no entry for batch size {', '.join(map(str, missing))}; "
                                 f"every batch size of trainer kind {kind} needs {needs}")
            hparams = {
                b: validate_hparams(self.trainer["kind"], hp or {}, f"hparams.{b}")
                for b, hp in self.hparams.items()
            }
            if self.models is not None:
                object.__setattr__(self, "models", [resolve_model(m, self.trainer, hparams, self.batch_sizes)
                                                    for m in self.models])
            models = {m.name: m.placeholders for m in self.models or []}
            for trainer, by_bs in self.trainers(hparams):
                check_campaign_fit(trainer, by_bs, {r.name: r.options for r in choices}, models)
                check_target_metric(trainer, self.target.metric)
                check_world_size(trainer, self.batch_sizes, self.launch.world_size)
        except TrainerError as err:
            raise ValueError(str(err)) from None
        object.__setattr__(self, "hparams", hparams)
        if self.trainer["kind"] != "command":  # a program's hyperparameters are its own to read
            for _, by_bs in self.trainers(hparams):
                check_warmup_within_budget(by_bs, self.budget.max_tokens)
            check_schedule_within_budget(self.recipes, self.budget.max_tokens)
        check_launch_against_backend(self.launch, self.backend)
        self.rcp.check_against_checker(self.benchmark)
        if self.tune is not None and self.models is not None:
            raise ValueError("tune: tunes one model's hyperparameters; tune each model in a campaign file of its own "
                             "(no models:) and give its table as models.<name>.hparams_from")
        if self.tune is not None:
            try:
                self.tune.check_against(self.trainer["kind"], self.hparams)
            except ValueError as err:
                raise ValueError(str(err)) from None
        take_out_literals(self)
        return self

    # --- derived settings -------------------------------------------------------------

    def trainers(self, hparams: dict[int, dict[str, Any]] | None = None) -> list[tuple[dict[str, Any], dict]]:
        """(trainer settings, hyperparameters by batch size) of each model, or the campaign's."""
        if self.models is None:
            return [(self.trainer, self.hparams if hparams is None else hparams)]
        return [(m.trainer, m.hparams or {}) for m in self.models]

    def seeds_for(self, recipe: str) -> int:
        """The seeds a cell of `recipe` has: fixed, or at most, in an adaptive campaign."""
        if self.adaptive is not None:
            return self.adaptive_max_seeds
        assert self.seeds is not None  # one of the two, by `_check_design`
        # a grid variant has the seeds its entry has ({default: 4, nvfp4: 8}), unless named itself
        grid_of = next((r.grid_of for r in self.recipes if r.name == recipe and r.grid_of), None)
        return self.seeds.get(recipe, self.seeds.get(grid_of or recipe, self.seeds["default"]))

    @property
    def reference(self) -> str:
        """The recipe the others are compared with: an adaptive campaign's reference (its
        first recipe unless adaptive.reference says), else bf16, the analysis' default."""
        if self.adaptive is None:
            return "bf16"
        return self.adaptive.reference or self.recipes[0].name

    @property
    def adaptive_max_seeds(self) -> int:
        assert self.adaptive is not None
        known = self.rcp.submission_runs or self.checker_runs
        assert self.adaptive.max_seeds is not None or known is not None  # by `_check_design`
        return self.adaptive.seeds_cap(known or 0)

    @property
    def tracking_uri(self) -> str:
        """The store, wherever the command runs from: a relative SQLite path
        (`sqlite:///my-store.db`) is beside the campaign file, as its default store and
        its relative argv and workdir are."""
        if not self.tracking.uri:
            return f"sqlite:///{(self.base_dir / DEFAULT_DB).resolve()}"
        return beside(self.tracking.uri, self.base_dir)

    @property
    def warnings(self) -> list[str]:
        """What makes wrong numbers likely in a valid campaign: shown when it loads."""
        return campaign_warnings(self.trainer, self.benchmark)

    @property
    def gang(self) -> Gang:
        """The processes a backend starts for each run (`launch:`)."""
        return self.launch.gang(per_node=launches_per_node(self.trainer))

    @property
    def artifact_dir(self) -> Path:
        return self.base_dir / "mlartifacts"

    @property
    def config_filename(self) -> str:
        """MLPerf's `config_filename` of the campaign's runs: the campaign file's name."""
        return self.config_file or self.name

    @property
    def runs_folder(self) -> Path:
        """The campaign's runs' folders are in it; its store is recorded there (orchestrator/store_owner.py)."""
        return self.base_dir / "rcpforge-runs" / self.name

    def run_dir(self, spec: RunSpec) -> Path:
        """A run's own folder (result files, checkpoints), the same on every attempt."""
        return self.runs_folder / f"{spec.run_name}_{spec.run_key[:12]}"

    @property
    def benchmark(self) -> str:
        return self.rcp.benchmark or name_as_benchmark(self.name)

    def benchmark_of(self, model: str) -> str:
        """The benchmark of a model's runs (their MLLOG, their RCPs): one per model of the axis."""
        return model_benchmark(self.benchmark, model)

    @property
    def checker_runs(self) -> int | None:
        """The MLCommons checker's N for this campaign's benchmark; None where it does not know it."""
        return SUBMISSION_RUNS.get(self.benchmark)

    @property
    def submission_runs(self) -> int:
        """N for the RCP statistics: set (for a benchmark the checker knows, only its own N
        or with `rcp.override_checker_runs`), else the checker's, else half the smallest
        cell, at least 3."""
        if self.rcp.submission_runs:
            return self.rcp.submission_runs
        if self.checker_runs is not None:
            return self.checker_runs
        return max(3, min(self.seeds_for(r.name) for r in self.recipes) // 2)


def _check_design(campaign: Campaign) -> None:
    """A fixed seed count or an adaptive question, and what the adaptive one needs."""
    adaptive = campaign.adaptive
    if adaptive is None and campaign.seeds is None:
        raise ValueError("seeds: is required but missing; give the runs per cell (seeds: 10) "
                         "or ask a question instead (an adaptive: section)")
    if adaptive is None:
        return
    if campaign.seeds is not None:
        raise ValueError("seeds: a campaign has either a fixed seed count or an adaptive: section, not both; "
                         "remove seeds: (adaptive.min_seeds and max_seeds bound the runs per cell)")
    names = [r.name for r in campaign.recipes]
    if adaptive.reference is not None and adaptive.reference not in names:
        raise ValueError(f"adaptive.reference: {adaptive.reference} is not among the campaign's recipes {names}")
    if len(names) < 2:
        raise ValueError(f"adaptive: there is nothing to compare with {names[0]}; list a candidate recipe too")
    if adaptive.max_seeds is None and not (campaign.rcp.submission_runs or SUBMISSION_RUNS.get(campaign.benchmark)):
        raise ValueError(f"adaptive.max_seeds: required for benchmark {campaign.benchmark}, whose runs per "
                         "submission the checker does not know (the default is 2N); set adaptive.max_seeds "
                         "or rcp.submission_runs")


# pydantic's words where the campaign's reader needs the reason
_MESSAGES = {("too_short", ("batch_sizes",)): (
    "needs at least two batch sizes, the smallest and the largest you will submit: an MLPerf RCP set has an RCP "
    "at the minimum and at the maximum batch size, and interpolates between them")}


def parse_campaign(data: Any, base_dir: Path = Path("."), source: str = "campaign", config_file: str = "") -> Campaign:
    if not isinstance(data, dict):
        raise CampaignError(f"{source}: expected a mapping of campaign fields at the top level")
    try:
        return Campaign.model_validate({**data, "base_dir": base_dir, "config_file": config_file})
    except ValidationError as err:
        hidden = ("base_dir", "config_file", "secret_literals")  # set here, not by the file
        raise CampaignError(f"{source}: {validation_message(err, Campaign, hidden, _MESSAGES)}") from None


def load_campaign(path: str | Path) -> Campaign:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise CampaignError(f"{path}: cannot read the campaign file ({err.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise CampaignError(f"{path}: not valid YAML{where}: {getattr(err, 'problem', err)}") from None
    return parse_campaign(data, path.resolve().parent, str(path), path.name)
