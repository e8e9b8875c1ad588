"""What the tracking modules write, as records they share: a run's tags and params from
its RunSpec, an attempt's tags, an imported run and its metric points as MLflow stores
them, a result file put where its run's artifacts go. A leaf: it imports no other module
of `rcpforge.orchestrator.tracking`, so each of them may import it."""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from rcpforge.trainers.contract import RunSpec, RunStatus
from rcpforge.trainers.contract.mllog.write import RESULT_FILE
from rcpforge.trainers.contract.redact import redact
from rcpforge.trainers.contract.schema import (
    TAG_ATTEMPT_STARTED,
    TAG_ATTEMPTS,
    TAG_BATCH_SIZE,
    TAG_BENCHMARK,
    TAG_CAMPAIGN,
    TAG_CONFIG_KEY,
    TAG_MODEL,
    TAG_MODEL_FLOPS_PER_TOKEN,
    TAG_MODEL_PARAMS,
    TAG_RECIPE,
    TAG_REFERENCE,
    TAG_ROLE,
    TAG_RUN_KEY,
    TAG_SEED,
    TAG_SPEC,
    TAG_STATUS,
    TAG_SUBMISSION_RUNS,
    TAG_TARGET_METRIC,
    TAG_TRAINER,
    TAG_WORLD_SIZE,
)

# MLflow rejects tag values above 8000 characters.
MAX_TAG = 7000
_MAX_FLOAT = 1.7976931348623157e308  # what MLflow stores for +-inf (SQL has no infinity)


@dataclass(frozen=True)
class ImportedRun:
    """A finished run to file as it happened: metrics as (name, value, step), its MLflow
    start and end times the run's own (epoch milliseconds; None: now)."""

    run_key: str
    run_name: str
    tags: dict[str, str]
    metrics: list[tuple[str, float, int]]
    result_file: Path
    start_ms: float | None = None
    end_ms: float | None = None


def spec_tags(spec: RunSpec) -> dict[str, str]:
    return {
        TAG_CAMPAIGN: spec.campaign,
        TAG_ROLE: spec.role,
        TAG_RUN_KEY: spec.run_key,
        TAG_CONFIG_KEY: spec.config_key,
        TAG_RECIPE: spec.recipe,
        TAG_BATCH_SIZE: str(spec.batch_size),
        TAG_SEED: str(spec.seed),
        TAG_TRAINER: spec.trainer_kind,
        TAG_TARGET_METRIC: spec.target.metric,
        TAG_SPEC: spec_record(spec)[:MAX_TAG],
        TAG_STATUS: RunStatus.pending.value,
        TAG_ATTEMPTS: "0",
        TAG_WORLD_SIZE: str(spec.world_size),
        **model_tags(spec),
    }


def spec_record(spec: RunSpec) -> str:
    """The RunSpec as its tag holds it: under the one redaction rule (a credential in
    argv masked; env holds no secret value by then, sweeps/secrets.py)."""
    plain = spec.model_dump(mode="json")
    recorded = redact(plain)
    return spec.model_dump_json() if recorded == plain else RunSpec.model_validate(recorded).model_dump_json()


def campaign_tags(benchmark: str, submission_runs: int, reference: str) -> dict[str, str]:
    """What the campaign file says of its analysis, on each run it makes: the RCPs'
    benchmark and N, the reference recipe. Tags, not part of the RunSpec, so the run key
    stays what it was (a campaign whose N changes keeps its runs); `rcpforge.load` by
    campaign name reads them back."""
    return {TAG_BENCHMARK: benchmark, TAG_SUBMISSION_RUNS: str(submission_runs), TAG_REFERENCE: reference}


def model_tags(spec: RunSpec) -> dict[str, str]:
    """The run's model, and its size where known (none without a model axis)."""
    if not spec.model:
        return {}
    sizes = {TAG_MODEL_PARAMS: spec.model_params, TAG_MODEL_FLOPS_PER_TOKEN: spec.model_flops_per_token}
    return {TAG_MODEL: spec.model, **{k: repr(v) for k, v in sizes.items() if v is not None}}


def run_params(spec: RunSpec) -> dict[str, str]:
    """A run's MLflow params: its hyperparameters, its recipe's options, and the cell and
    seed too (they are tags already: MLflow's UI shows params as columns and compares and
    groups runs by them)."""
    params = {k: str(v) for k, v in sorted(spec.hparams.items())}
    # a recipe written by its operands has nested options: one param per field (recipe.x.format)
    params.update({k: str(v) for k, v in sorted(flat_options(spec.recipe_options, "recipe").items())})
    params.update({k: str(v) for k, v in run_identity(spec).items()})
    return params


def run_identity(spec: RunSpec) -> dict[str, str | int]:
    """What a run is, logged as MLflow params beside its hyperparameters (named as its
    tags, so the loaders tell them from hyperparameters)."""
    model: dict[str, str | int] = {TAG_MODEL: spec.model} if spec.model else {}
    return {**model, TAG_RECIPE: spec.recipe, TAG_BATCH_SIZE: spec.batch_size, TAG_SEED: spec.seed}


def flat_options(options: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Nested options as dotted keys ({x: {format: e4m3}} -> {prefix.x.format: e4m3})."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, dict):
            out.update(flat_options(value, f"{prefix}.{key}"))
        else:
            out[f"{prefix}.{key}"] = value
    return out


def attempt_tags(attempt: int) -> dict[str, str]:
    """What a run reads while an attempt of it runs: its status, the attempt's number and
    when it started."""
    return {TAG_STATUS: RunStatus.running.value, TAG_ATTEMPTS: str(attempt),
            TAG_ATTEMPT_STARTED: datetime.now(UTC).isoformat(timespec="seconds")}


def points_of(run: ImportedRun) -> list[tuple[str, float, int, int, bool]]:
    """(key, value, timestamp, step, is_nan) as MLflow stores a metric point, duplicates
    dropped as its `log_batch` drops them."""
    stamp = int(run.end_ms or run.start_ms or 0)
    seen: dict[tuple, None] = {}
    for name, value, step in run.metrics:
        value = float(value)
        is_nan = math.isnan(value)
        stored = 0.0 if is_nan else max(-_MAX_FLOAT, min(_MAX_FLOAT, value))
        seen.setdefault((name, stored, stamp, int(step), is_nan))
    return list(seen)


def store_result_file(artifact_uri: str, result_file: Path, run_id: str, upload) -> None:
    """The run's result file as its `result.txt` artifact: copied into a local artifact
    folder, else given to `upload(run_id, file)`."""
    if artifact_uri.startswith("file:"):  # a local folder: one copy, no round trip
        folder = Path(unquote(urlparse(artifact_uri).path))
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(result_file, folder / RESULT_FILE)
    else:
        upload(run_id, result_file)
