"""MLCommons results directories: export a campaign's runs as `result_<i>.txt` files,
one directory per (recipe, batch size), and import existing results directories (a
published submission, another campaign's export) into the tracking store as runs.

Export layout: `<DIR>/<recipe>/bs<batch size>/result_<i>.txt`, i in seed order, from
every run with an outcome (a not-converged or diverged run's file ends with
`run_stop aborted`, which the checker counts as infinite). The files are the runs'
`result.txt` MLflow artifacts (the run folder when the artifact is missing). The cells, the
run selection and the fetching (`campaign_cells`, `fetch_result_files`,
`write_result_files`) are shared with the submitter package (`orchestrator/package.py`).

Import: one MLflow run per file, its run key the hash of the file's bytes, so importing
the same files again adds nothing. `samples_to_target` is the value the checker reads
(epochs for the benchmarks that count in epochs); the file is stored as the run's
`result.txt` artifact, so an imported run exports again unchanged.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.tracking import Tracking
from trainers.contract import RunStatus
from trainers.contract.mllog.read import follow_file, parse_line
from trainers.contract.mllog.write import RESULT_FILE
from trainers.contract.schema import (
    METRIC_SAMPLES_TO_TARGET,
    TAG_ATTEMPTS,
    TAG_BATCH_SIZE,
    TAG_BENCHMARK,
    TAG_CAMPAIGN,
    TAG_RECIPE,
    TAG_ROLE,
    TAG_SEED,
    TAG_SOURCE,
    TAG_STATUS,
    TAG_TARGET_METRIC,
    TAG_TRAINER,
)

OUTCOME_VALUES = {s.value for s in (RunStatus.converged, RunStatus.not_converged, RunStatus.diverged)}
_RESULT_NAME = re.compile(r"^result_(\d+)\.txt$")


class ResultsError(ValueError):
    """Input that cannot be exported or imported; the message names the file."""


@dataclass
class ExportedCell:
    recipe: str
    batch_size: int
    folder: Path
    files: int
    left_out: int  # runs of the cell without an outcome


@dataclass
class Cell:
    """One (recipe, batch size) of a campaign's tracked runs."""

    recipe: str
    batch_size: int
    done: list[dict]  # the runs with an outcome, in seed order
    left_out: int  # runs without an outcome


def cell_folder(results_dir: Path, recipe: str, batch_size: int) -> Path:
    return results_dir / recipe / f"bs{batch_size}"


def campaign_cells(tracking_uri: str, campaign: str) -> list[Cell]:
    """The campaign's cells in (recipe, batch size) order, those without an outcome too."""
    from analysis.load import load_runs

    cells: dict[tuple[str, int], list[dict]] = {}
    for run in load_runs(tracking_uri, campaign).to_pylist():
        cells.setdefault((run["recipe"], run["batch_size"]), []).append(run)
    found = []
    for (recipe, bs), runs in sorted(cells.items()):
        done = sorted((r for r in runs if r["status"] in OUTCOME_VALUES), key=lambda r: r["seed"])
        found.append(Cell(recipe, bs, done, len(runs) - len(done)))
    return found


def fetch_result_files(tracking_uri: str, runs: list[dict], tmp: Path, run_dir_of) -> list[Path]:
    """Each run's result file, in the runs' order: downloaded under `tmp`, or from the run's
    folder (`run_dir_of(spec)`) where the artifact is missing."""
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bars on the CLI's output
    tracking = Tracking(tracking_uri)
    return [_result_file(tracking, run["run_id"], tmp / run["run_id"], run_dir_of) for run in runs]


def write_result_files(folder: Path, files: list[Path]) -> None:
    """`files` as `folder/result_<i>.txt`, i in their order, replacing earlier ones."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("result_*.txt"):
        stale.unlink()  # an earlier export may have had more runs
    for i, source in enumerate(files):
        shutil.copyfile(source, folder / f"result_{i}.txt")


def export_results(tracking_uri: str, campaign: str, results_dir: Path, run_dir_of) -> list[ExportedCell]:
    """`run_dir_of(spec)` gives a run's folder, for runs whose artifact is missing."""
    exported = []
    with tempfile.TemporaryDirectory() as tmp:
        for cell in campaign_cells(tracking_uri, campaign):
            if not cell.done:
                continue
            folder = cell_folder(results_dir, cell.recipe, cell.batch_size)
            write_result_files(folder, fetch_result_files(tracking_uri, cell.done, Path(tmp), run_dir_of))
            exported.append(ExportedCell(cell.recipe, cell.batch_size, folder, len(cell.done), cell.left_out))
    return exported


def _result_file(tracking: Tracking, run_id: str, tmp: Path, run_dir_of) -> Path:
    downloaded = tracking.result_file(run_id, tmp)
    if downloaded is not None:
        return downloaded
    run_name, spec = tracking.recorded_spec(run_id)
    if spec is not None:
        local = run_dir_of(spec) / RESULT_FILE
        if local.is_file():
            return local
    raise ResultsError(f"run {run_name} ({run_id}) has no {RESULT_FILE}: neither an artifact nor in its run folder")


# --- import ------------------------------------------------------------------------------


@dataclass
class ImportSummary:
    imported: int = 0
    already: int = 0
    cells: dict[tuple[str, int], int] = field(default_factory=dict)


def result_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise ResultsError(f"{folder}: not a directory")
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _RESULT_NAME.match(p.name))]
    if not found:
        raise ResultsError(f"{folder}: no result_<i>.txt files; a results directory holds result_0.txt, result_1.txt, ...")
    return [p for _, p in sorted(found)]


def default_artifact_dir(tracking_uri: str) -> Path:
    if tracking_uri.startswith("sqlite:///"):
        return Path(tracking_uri[len("sqlite:///"):]).parent / "mlartifacts"
    return Path("mlartifacts")


def import_results(folders: list[Path], campaign: str, tracking_uri: str, recipe: str | None = None) -> ImportSummary:
    """Each folder's files become runs of `campaign`; the recipe is `recipe` or the
    folder's parent's name (`<recipe>/bs<bs>` of an export, `<system>/<benchmark>` of an
    MLCommons submission)."""
    plans = []
    for folder in folders:
        for path in result_files(folder):
            reading = follow_file(path)
            if not isinstance(reading.batch_size, (int, float)) or reading.batch_size <= 0:
                raise ResultsError(f"{path}: no global_batch_size line; the checker cannot use this file either")
            plans.append((path, reading, recipe or folder.resolve().parent.name))
    tracking = Tracking(tracking_uri)
    experiment_id = tracking.open_experiment(campaign, default_artifact_dir(tracking_uri))
    known = tracking.ledger(experiment_id)
    summary = ImportSummary()
    seeds: dict[tuple[str, int], int] = {}
    for path, reading, name in plans:
        bs = int(reading.batch_size)
        seed = seeds.get((name, bs), 0)
        seeds[(name, bs)] = seed + 1
        key = hashlib.sha256(path.read_bytes()).hexdigest()[:24]
        if key in known:
            summary.already += 1
            continue
        _import_one(tracking, experiment_id, campaign, path, reading, name, bs, seed, key)
        summary.imported += 1
        summary.cells[(name, bs)] = summary.cells.get((name, bs), 0) + 1
    return summary


def _import_one(tracking: Tracking, experiment_id: str, campaign: str, path: Path, reading, recipe: str,
                bs: int, seed: int, key: str) -> None:
    status = RunStatus.converged if reading.converged else RunStatus.not_converged
    tags = {
        TAG_CAMPAIGN: campaign, TAG_ROLE: "campaign", TAG_RECIPE: recipe,
        TAG_BATCH_SIZE: str(bs), TAG_SEED: str(seed), TAG_STATUS: status.value, TAG_ATTEMPTS: "1",
        TAG_TRAINER: "import", TAG_TARGET_METRIC: "eval_accuracy", TAG_SOURCE: str(path.resolve()),
    }
    if reading.benchmark:
        tags[TAG_BENCHMARK] = str(reading.benchmark)
    metrics = [("eval_accuracy", value, step) for step, value in _curve(reading)]
    if status is RunStatus.converged:
        metrics.append((METRIC_SAMPLES_TO_TARGET, float(reading.value_to_converge), 0))
    tracking.import_run(experiment_id, key, f"{recipe}-bs{bs}-s{seed}", tags, metrics, path)


def _curve(reading) -> list[tuple[int, float]]:
    """The eval_accuracy points, stepped by samples_count (or by their order)."""
    points: dict[int, float] = {}
    for i, line in enumerate(reading.lines):
        event = parse_line(line)
        if not event or event.get("key") != "eval_accuracy" or not isinstance(event.get("value"), (int, float)):
            continue
        meta = event.get("metadata") or {}
        step = meta.get("samples_count") if isinstance(meta.get("samples_count"), (int, float)) else len(points) + 1
        points[int(step)] = float(event["value"])
    return sorted(points.items())
