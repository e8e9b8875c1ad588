"""MLCommons results directories: export a campaign's runs as `result_<i>.txt` files,
one directory per (recipe, batch size), and import existing results directories (a
published submission, another campaign's export) into the tracking store as runs.

Export layout: `<DIR>/<recipe>/bs<batch size>/result_<i>.txt` (`<DIR>/<model>/<recipe>/...`
on a model axis: a cell is then (model, recipe, batch size)), i in seed order, from
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

from rcpforge.orchestrator.tracking import ImportedRun, Tracking
from rcpforge.trainers.contract import RunStatus
from rcpforge.trainers.contract.mllog.read import events_facts, facts_tags, follow_events, with_warning
from rcpforge.trainers.contract.mllog.write import RESULT_FILE, add_missing_disclosure
from rcpforge.trainers.contract.schema import (
    METRIC_SAMPLES_TO_TARGET,
    METRIC_TIME_TO_TRAIN,
    TAG_ACCELERATOR,
    TAG_ACCELERATORS_PER_NODE,
    TAG_ATTEMPTS,
    TAG_BATCH_SIZE,
    TAG_BENCHMARK,
    TAG_CAMPAIGN,
    TAG_DIVISION,
    TAG_FRAMEWORK,
    TAG_NODES,
    TAG_RECIPE,
    TAG_RESULTS_DIR,
    TAG_ROLE,
    TAG_SEED,
    TAG_SOURCE,
    TAG_STATUS,
    TAG_SUBMITTER,
    TAG_SYSTEM,
    TAG_TARGET_METRIC,
    TAG_TRAINER,
)
from rcpforge.trainers.contract.submission import system_settings

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
    model: str = ""  # "" without a model axis


@dataclass
class Cell:
    """One (model, recipe, batch size) of a campaign's tracked runs (model "" without the axis)."""

    recipe: str
    batch_size: int
    done: list[dict]  # the runs with an outcome, in seed order
    left_out: int  # runs without an outcome
    model: str = ""


def cell_folder(results_dir: Path, recipe: str, batch_size: int, model: str = "") -> Path:
    return (results_dir / model if model else results_dir) / recipe / f"bs{batch_size}"


def campaign_cells(tracking_uri: str, campaign: str) -> list[Cell]:
    """The campaign's cells in (model, recipe, batch size) order, those without an outcome too."""
    from rcpforge.analysis.load import load_runs

    cells: dict[tuple[str, str, int], list[dict]] = {}
    for run in load_runs(tracking_uri, campaign).to_pylist():
        cells.setdefault((run["model"], run["recipe"], run["batch_size"]), []).append(run)
    found = []
    for (model, recipe, bs), runs in sorted(cells.items()):
        done = sorted((r for r in runs if r["status"] in OUTCOME_VALUES), key=lambda r: r["seed"])
        found.append(Cell(recipe, bs, done, len(runs) - len(done), model))
    return found


def fetch_result_files(tracking_uri: str, runs: list[dict], tmp: Path, run_dir_of) -> list[Path]:
    """Each run's result file, in the runs' order: downloaded under `tmp`, or from the run's
    folder (`run_dir_of(spec)`) where the artifact is missing."""
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bars on the CLI's output
    tracking = Tracking(tracking_uri)
    return [_result_file(tracking, run["run_id"], tmp / run["run_id"], run_dir_of) for run in runs]


def write_result_files(folder: Path, files: list[Path], config_filename: str | None = None) -> None:
    """`files` as `folder/result_<i>.txt`, i in their order, replacing earlier ones; a
    file without MLPerf's `config_filename` (a run from before rcpforge wrote it) gets
    `config_filename`, the campaign file's name, appended (the 6.1 rules want one)."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("result_*.txt"):
        stale.unlink()  # an earlier export may have had more runs
    for i, source in enumerate(files):
        shutil.copyfile(source, folder / f"result_{i}.txt")
        if config_filename:
            add_missing_disclosure(folder / f"result_{i}.txt", {"config_filename": config_filename})


def export_results(tracking_uri: str, campaign: str, results_dir: Path, run_dir_of,
                   config_filename: str | None = None) -> list[ExportedCell]:
    """`run_dir_of(spec)` gives a run's folder, for runs whose artifact is missing;
    `config_filename` the campaign file's name (`write_result_files`)."""
    exported = []
    with tempfile.TemporaryDirectory() as tmp:
        for cell in campaign_cells(tracking_uri, campaign):
            if not cell.done:
                continue
            folder = cell_folder(results_dir, cell.recipe, cell.batch_size, cell.model)
            write_result_files(folder, fetch_result_files(tracking_uri, cell.done, Path(tmp), run_dir_of),
                               config_filename)
            exported.append(ExportedCell(cell.recipe, cell.batch_size, folder, len(cell.done), cell.left_out,
                                         cell.model))
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
    folders: int = 0  # results directories read
    # One line per file imported as not converged because it has no run_stop (cut off)
    truncated: list[str] = field(default_factory=list)


def result_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise ResultsError(f"{folder}: not a directory")
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _RESULT_NAME.match(p.name))]
    if not found:
        raise ResultsError(f"{folder}: no result_<i>.txt files; a results directory holds result_0.txt, result_1.txt, ...")
    return [p for _, p in sorted(found)]


def results_folders(paths: list[Path]) -> list[Path]:
    """The results directories in `paths`: each path is one, or a folder holding some at
    any depth (a round's root `<submitter>/results/<system>/<benchmark>/`, an export's
    `<recipe>/bs<N>/`), in path order."""
    found: dict[Path, None] = {}
    for path in paths:
        if not path.exists():
            raise ResultsError(f"{path}: no such file or directory")
        if not path.is_dir():
            raise ResultsError(f"{path}: not a directory")
        leaves = sorted({p.parent for p in path.rglob("result_*.txt") if _RESULT_NAME.match(p.name) and p.is_file()})
        if not leaves:
            raise ResultsError(f"{path}: no result_<i>.txt files in it or under it; give a results directory "
                               "(result_0.txt, result_1.txt, ...), a folder of them, or a round's root")
        found.update(dict.fromkeys(leaves))
    return list(found)


def default_artifact_dir(tracking_uri: str) -> Path:
    if tracking_uri.startswith("sqlite:///"):
        return Path(tracking_uri[len("sqlite:///"):]).parent / "mlartifacts"
    return Path("mlartifacts")


# system_settings name -> tag
_SYSTEM_TAGS = {"submitter": TAG_SUBMITTER, "system": TAG_SYSTEM, "division": TAG_DIVISION,
                "framework": TAG_FRAMEWORK, "accelerator": TAG_ACCELERATOR,
                "accelerators_per_node": TAG_ACCELERATORS_PER_NODE, "nodes": TAG_NODES}
# MLLOG submission_<x> -> tag, where no system file says it
_MLLOG_FIELDS = {"org": TAG_SUBMITTER, "division": TAG_DIVISION, "platform": TAG_SYSTEM}


def round_tags(folder: Path) -> dict[str, str]:
    """What a results directory's place in a round says (`system_settings`), as tags."""
    tags = {TAG_RESULTS_DIR: str(folder.resolve())}
    tags.update({_SYSTEM_TAGS[k]: v for k, v in system_settings(folder).items()})
    return tags


def import_results(folders: list[Path], campaign: str, tracking_uri: str, recipe: str | None = None) -> ImportSummary:
    """The result files in `folders` (results directories, or folders holding them:
    `results_folders`) become runs of `campaign`; the recipe is `recipe` or the results
    directory's parent's name (`<recipe>/bs<bs>` of an export, `<system>/<benchmark>` of
    an MLCommons submission). The run key is the hash of the file's bytes, so files
    already imported are skipped before anything is written."""
    leaves = results_folders(folders)
    tracking = Tracking(tracking_uri)
    experiment_id = tracking.open_experiment(campaign, default_artifact_dir(tracking_uri))
    known = tracking.ledger(experiment_id)
    summary = ImportSummary(folders=len(leaves))
    seeds: dict[tuple[str, int], int] = {}
    planned = []
    for folder in leaves:
        where = round_tags(folder)
        name = recipe or folder.resolve().parent.name
        for path in result_files(folder):
            data = path.read_bytes()
            key = hashlib.sha256(data).hexdigest()[:24]
            reading, events = follow_events(path)
            if not isinstance(reading.batch_size, (int, float)) or reading.batch_size <= 0:
                raise ResultsError(f"{path}: no global_batch_size line; the checker cannot use this file either")
            bs = int(reading.batch_size)
            seed = seeds.get((name, bs), 0)
            seeds[(name, bs)] = seed + 1
            if key in known:  # imported before, or the same bytes twice in this import
                summary.already += 1
                continue
            known[key] = None  # type: ignore[assignment]
            planned.append(_imported_run(campaign, path, reading, events, where, name, bs, seed, key, summary))
    tracking.import_runs(experiment_id, [run for run, _ in planned])  # every file read (and usable) first
    for _, cell in planned:
        summary.imported += 1
        summary.cells[cell] = summary.cells.get(cell, 0) + 1
    return summary


def _imported_run(campaign: str, path: Path, reading, events: list[dict], where: dict[str, str], recipe: str,
                  bs: int, seed: int, key: str, summary: ImportSummary) -> tuple[ImportedRun, tuple[str, int]]:
    status = RunStatus.converged if reading.converged else RunStatus.not_converged
    facts = events_facts(events)
    tags = {
        TAG_CAMPAIGN: campaign, TAG_ROLE: "campaign", TAG_RECIPE: recipe,
        TAG_BATCH_SIZE: str(bs), TAG_SEED: str(seed), TAG_STATUS: status.value, TAG_ATTEMPTS: "1",
        TAG_TRAINER: "import", TAG_TARGET_METRIC: "eval_accuracy", TAG_SOURCE: str(path.resolve()),
    }
    for name, tag in _MLLOG_FIELDS.items():
        value = facts.submission.get(name)
        if tag not in where and value not in (None, ""):
            tags[tag] = str(value)
    tags.update(where)
    tags.update(facts_tags(facts))
    if reading.benchmark:
        tags[TAG_BENCHMARK] = str(reading.benchmark)
    if not reading.saw_run_stop:
        note = f"{path}: no run_stop (the file is cut off?); imported as not converged, as the checker counts it"
        with_warning(tags, note)
        summary.truncated.append(note)
    metrics = [("eval_accuracy", value, step) for step, value in _curve(events)]
    if status is RunStatus.converged:
        metrics.append((METRIC_SAMPLES_TO_TARGET, float(reading.value_to_converge), 0))
    if facts.time_to_train_s is not None:
        metrics.append((METRIC_TIME_TO_TRAIN, facts.time_to_train_s, 0))
    end = facts.stopped_ms if facts.stopped_ms is not None else facts.last_ms
    run = ImportedRun(key, f"{recipe}-bs{bs}-s{seed}", tags, metrics, path, facts.started_ms, end)
    return run, (recipe, bs)


def _curve(events: list[dict]) -> list[tuple[int, float]]:
    """The eval_accuracy points, stepped by samples_count (or by their order)."""
    points: dict[int, float] = {}
    for event in events:
        if event.get("key") != "eval_accuracy" or not isinstance(event.get("value"), (int, float)):
            continue
        meta = event.get("metadata") or {}
        step = meta.get("samples_count") if isinstance(meta.get("samples_count"), (int, float)) else len(points) + 1
        points[int(step)] = float(event["value"])
    return sorted(points.items())
