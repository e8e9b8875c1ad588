"""A submitter package: the folder `python -m mlperf_logging.package_checker DIR training
RULESET` checks, made from a campaign's runs.

Layout:
    DIR/results/<system>/<benchmark>/result_<i>.txt   each run with an outcome, seed order
    DIR/systems/<system>.json                         the system description
    DIR/.rcpforge-package.json                        what this export wrote (so a later
                                                      export may replace it)

One system per (recipe, batch size) cell, `<system>_<recipe>_bs<N>`; when `--recipe`
and/or `--batch-size` select exactly one cell, the system is `<system>` itself. The
benchmark folder is the campaign's benchmark, and every result file must log it as
`submission_benchmark`: the package checker reads the folder's name and the RCP checker
the files', and a mismatch stops the RCP checker with a traceback.

Each system's `division` is the one its result files log (MLLOG `submission_division`): the
package checker runs the seed and RCP checks only for a closed system, so a file that says
open must not land under a closed description. Files of one cell that disagree, and a
`--division` that contradicts them, are refused; where no file logs one, `--division`, an
earlier export's value or `closed` applies. A cell with fewer result files than the
checker's N for the benchmark (`SUBMISSION_RUNS`) is exported with a note.

A folder that exists must be empty or an earlier rcpforge package; an earlier package's
result files are replaced, its system files keep every value except those the flags set
(the hardware fields are the submitter's to fill in), and nothing else in it is touched.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rcpforge.orchestrator.results_dirs import Cell, campaign_cells, fetch_result_files, write_result_files
from rcpforge.trainers.contract.mllog.read import CheckerStops, follow_file, read_result_file, run_facts
from rcpforge.trainers.contract.submission import SUBMISSION_RUNS, benchmark_origin

MARKER = ".rcpforge-package.json"
DIVISIONS = ("closed", "open")
DEFAULT_STATUS = "Research, Development, or Internal (RDI)"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}$")
# The fields the system description checker requires, in the order published files have them.
SYSTEM_FIELDS = (
    "submitter", "division", "status", "system_name", "number_of_nodes", "host_processors_per_node",
    "host_processor_model_name", "host_processor_core_count", "host_processor_vcpu_count",
    "host_processor_frequency", "host_processor_caches", "host_processor_interconnect", "host_memory_capacity",
    "host_storage_type", "host_storage_capacity", "host_networking", "host_networking_topology",
    "host_memory_configuration", "accelerators_per_node", "accelerator_model_name",
    "accelerator_host_interconnect", "accelerator_frequency", "accelerator_on-chip_memories",
    "accelerator_memory_configuration", "accelerator_memory_capacity", "accelerator_interconnect",
    "accelerator_interconnect_topology", "cooling", "hw_notes", "framework", "other_software_stack",
    "operating_system", "sw_notes",
)


class PackageError(ValueError):
    """A package that cannot be written; the message names the flag or file and the fix."""


def training_rulesets() -> list[str]:
    """The training rulesets the installed package checker supports, oldest first: those
    with compliance rules that are also among the RCP checker's (`RULESETS`)."""
    import mlperf_logging.compliance_checker as compliance

    from rcpforge.analysis.rcp_set import RULESETS

    folder = Path(os.path.dirname(compliance.__file__))
    found = {m.group(1) for p in folder.iterdir() if (m := re.match(r"^training_(\d+\.\d+\.\d+)$", p.name))}
    return sorted(found & set(RULESETS), key=lambda v: tuple(int(x) for x in v.split(".")))


def checked_benchmarks(ruleset: str) -> list[str]:
    """The benchmarks whose results the package checker checks under `ruleset` (it skips others)."""
    from mlperf_logging.benchmark_meta import get_allowed_benchmarks

    return list(get_allowed_benchmarks("training", ruleset))


@dataclass(frozen=True)
class PackageRequest:
    submitter: str
    system: str
    ruleset: str
    division: str | None = None  # None: the result files', else an earlier file's, else "closed"
    recipe: str | None = None
    batch_size: int | None = None
    # What the campaign knows of the system; the rest of the description is left empty.
    nodes: int = 1
    accelerators_per_node: int = 0
    accelerator: str = ""

    def __post_init__(self) -> None:
        for flag, value in (("--submitter", self.submitter), ("--system", self.system)):
            if not _SAFE_NAME.match(value or ""):
                raise PackageError(f"{flag} {value!r}: it names a folder or file of the package; use up to 100 "
                                   "letters, digits, '_', '.', '+', '-', starting with a letter or digit")
        if self.division is not None and self.division not in DIVISIONS:
            raise PackageError(f"--division {self.division!r}: use one of {', '.join(DIVISIONS)}")
        rulesets = training_rulesets()
        if self.ruleset not in rulesets:
            raise PackageError(f"--ruleset {self.ruleset!r}: the installed package checker knows {', '.join(rulesets)}")

    @property
    def selects(self) -> bool:
        return self.recipe is not None or self.batch_size is not None

    def wants(self, cell: Cell) -> bool:
        return (self.recipe in (None, cell.recipe)) and (self.batch_size in (None, cell.batch_size))


@dataclass
class PackagedSystem:
    system: str
    recipe: str
    batch_size: int
    folder: Path  # results/<system>/<benchmark>
    files: int
    left_out: int  # runs of the cell without an outcome
    division: str = "closed"
    logged: bool = False  # the division is the one the result files log
    checker_runs: int | None = None  # the checker's N for the benchmark; None: it does not know it

    @property
    def short(self) -> bool:
        """Fewer result files than the checker wants for the benchmark."""
        return self.checker_runs is not None and self.files < self.checker_runs


@dataclass
class Package:
    systems: list[PackagedSystem]
    no_outcome: list[Cell] = field(default_factory=list)  # selected cells left out: no run has an outcome
    kept_systems: list[str] = field(default_factory=list)  # system files of earlier exports, left in place
    benchmark_checked: bool = True  # False: the package checker skips the benchmark's results


def export_package(tracking_uri: str, campaign: str, benchmark: str, package_dir: Path,
                   request: PackageRequest, run_dir_of, config_filename: str | None = None) -> Package:
    """Write (or rewrite) the package; nothing is written when an input is refused.
    `config_filename`: the campaign file's name, for result files that lack it."""
    earlier = _earlier_package(package_dir)
    chosen = _chosen_cells(campaign_cells(tracking_uri, campaign), request, campaign)
    if any(c.model for c in chosen):
        raise PackageError(f"campaign {campaign} has a model axis (models:): each model is a benchmark of its own "
                           f"({benchmark}_<model>) and a package holds one; export --results DIR for now "
                           "(docs/models.md)")
    with_outcome = [c for c in chosen if c.done]
    if not with_outcome:
        cells = ", ".join(f"{c.recipe} bs {c.batch_size}" for c in chosen)
        raise PackageError(f"campaign {campaign}: no run of {cells} has an outcome yet (converged, not converged "
                           "or diverged); run the campaign (`rcpforge run`) until they do")
    single = request.selects and len(chosen) == 1
    package = Package([], no_outcome=[c for c in chosen if not c.done],
                      benchmark_checked=benchmark in checked_benchmarks(request.ruleset))
    written: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        plan = [_planned(tracking_uri, cell, Path(tmp), (campaign, benchmark), package_dir, request, single, run_dir_of)
                for cell in with_outcome]  # every file read and checked before anything is written
        _remove_earlier_results(package_dir, earlier)
        for cell, system, files, description, logged in plan:
            folder = package_dir / "results" / system / benchmark
            write_result_files(folder, files, config_filename)
            written += [str(folder.relative_to(package_dir) / f"result_{i}.txt") for i in range(len(files))]
            _write_json(package_dir / "systems" / f"{system}.json", description)
            package.systems.append(PackagedSystem(
                system, cell.recipe, cell.batch_size, folder, len(files), cell.left_out,
                division=str(description["division"]), logged=logged is not None,
                checker_runs=SUBMISSION_RUNS.get(benchmark)))
    names = [s.system for s in package.systems]
    package.kept_systems = sorted(p.stem for p in (package_dir / "systems").glob("*.json") if p.stem not in names)
    _write_json(package_dir / MARKER, {"written_by": "rcpforge export --package", "campaign": campaign,
                                       "benchmark": benchmark, "ruleset": request.ruleset, "systems": names,
                                       "result_files": written})
    return package


def compliance_refusals(package: Package, ruleset: str) -> list[tuple[list[Path], list[str]]]:
    """What the compliance checker will refuse in the package's result files, files with
    the same refusals together: (files, refusals), in the package's order."""
    from rcpforge.trainers.contract.mllog.compliance import check_file, refusal_lines

    grouped: dict[tuple[str, ...], list[Path]] = {}
    for system in package.systems:
        for path in sorted(system.folder.glob("result_*.txt"), key=lambda p: int(p.stem.split("_")[1])):
            refused = tuple(refusal_lines(check_file(path, ruleset)))
            if refused:
                grouped.setdefault(refused, []).append(path)
    return [(files, list(refused)) for refused, files in grouped.items()]


def _planned(tracking_uri: str, cell: Cell, tmp: Path, named: tuple[str, str], package_dir: Path,
             request: PackageRequest, single: bool, run_dir_of) -> tuple[Cell, str, list[Path], dict, str | None]:
    """A cell's system, its result files (fetched and checked), its description and the
    division its files log; `named` is the campaign and its benchmark."""
    system = request.system if single else _system_name(request.system, cell)
    files = fetch_result_files(tracking_uri, cell.done, tmp, run_dir_of)
    _check_files(cell, files, named, request.ruleset)
    logged = _logged_division(cell, files, request.division)
    description = _description(package_dir / "systems" / f"{system}.json", system, request, logged)
    return cell, system, files, description, logged


def _logged_division(cell: Cell, files: list[Path], flag: str | None) -> str | None:
    """The division the cell's result files log (`submission_division`); None where none
    does. Refuses files that disagree, and a `--division` that contradicts them."""
    said: dict[str, list[str]] = {}
    where = f"{cell.recipe} bs {cell.batch_size}"
    for run, path in zip(cell.done, files, strict=True):
        value = run_facts(path).submission.get("division")
        if value is None:
            continue
        division = str(value).strip().lower()
        if division not in DIVISIONS:
            raise PackageError(f"run {run['run_id']} ({where}, seed {run['seed']}): its result file logs "
                               f"submission_division {value!r}; the checkers know {', '.join(DIVISIONS)}")
        said.setdefault(division, []).append(f"seed {run['seed']} ({run['run_id']})")
    if len(said) > 1:
        parts = "; ".join(f"{d}: {', '.join(runs)}" for d, runs in sorted(said.items()))
        raise PackageError(f"{where}: its result files log different submission_division values ({parts}); one "
                           "system has one division: rerun the runs with the same division, or export them apart")
    logged = next(iter(said), None)
    if flag is not None and logged is not None and flag != logged:
        raise PackageError(f"--division {flag}: the result files of {where} log submission_division {logged!r}, "
                           f"and the checker must read them as that division; drop --division (the package takes "
                           f"the files' {logged!r}), or rerun the runs logging {flag}")
    return logged


def _earlier_package(package_dir: Path) -> dict:
    """The earlier export's record, {} for a new or empty folder; refuses any other folder."""
    if package_dir.exists() and not package_dir.is_dir():
        raise PackageError(f"--package {package_dir}: is a file; give a folder (new, empty or an earlier package)")
    if not package_dir.is_dir() or not any(package_dir.iterdir()):
        return {}
    marker = package_dir / MARKER
    if not marker.is_file():
        raise PackageError(f"--package {package_dir}: the folder holds other files and is not an rcpforge package "
                           f"(no {MARKER}); give a new or empty folder, nothing in it is touched")
    try:
        record = json.loads(marker.read_text())
    except ValueError:
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("result_files"), list):
        raise PackageError(f"{marker}: not the record an rcpforge export writes; give a new or empty folder")
    return record


def _chosen_cells(cells: list[Cell], request: PackageRequest, campaign: str) -> list[Cell]:
    if not cells:
        raise PackageError(f"campaign {campaign} has no runs yet; run it first (`rcpforge run CAMPAIGN.yaml`)")
    chosen = [c for c in cells if request.wants(c)]
    if not chosen:
        flags = " ".join(f for f in (request.recipe and f"--recipe {request.recipe}",
                                     request.batch_size is not None and f"--batch-size {request.batch_size}") if f)
        known = ", ".join(f"{c.recipe} bs {c.batch_size}" for c in cells)
        raise PackageError(f"{flags}: selects none of the campaign's cells ({known})")
    return chosen


def _system_name(system: str, cell: Cell) -> str:
    return f"{system}_{re.sub(r'[^A-Za-z0-9_.+-]', '_', cell.recipe)}_bs{cell.batch_size}"


def _check_files(cell: Cell, files: list[Path], named: tuple[str, str], ruleset: str) -> None:
    """What would make the package checker stop with a traceback rather than report."""
    campaign, benchmark = named
    for run, path in zip(cell.done, files, strict=True):
        logged = follow_file(path, keep_lines=False).benchmark
        if logged != benchmark:
            said = f"logs submission_benchmark {logged!r}" if logged is not None else "logs no submission_benchmark"
            other = f", or set rcp.benchmark: {logged} in the campaign file" if logged is not None else ""
            raise PackageError(
                f"run {run['run_id']} ({cell.recipe} bs {cell.batch_size}, seed {run['seed']}): its result file "
                f"(the program's MLLOG) {said}, but the campaign's benchmark, under which the package puts it, "
                f"is {benchmark!r} ({benchmark_origin(benchmark, campaign)}); the checkers read both, so they "
                f"must agree: make the program log submission_benchmark {benchmark!r} (the placeholder "
                f"{{benchmark}} in trainer.argv){other}")
        try:
            read_result_file(str(path), ruleset)
        except CheckerStops as err:
            raise PackageError(f"run {run['run_id']} ({cell.recipe} bs {cell.batch_size}): the RCP checker stops "
                               f"on its result file: {err.reason}") from None


def _remove_earlier_results(package_dir: Path, earlier: dict) -> None:
    """The result files an earlier export wrote (and folders they leave empty)."""
    for name in earlier.get("result_files", []):
        path = package_dir / str(name)
        if path.name.startswith("result_") and path.is_file() and package_dir.resolve() in path.resolve().parents:
            path.unlink()
            for folder in (path.parent, path.parent.parent):
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()


def _description(path: Path, system: str, request: PackageRequest, logged: str | None = None) -> dict:
    """A new description has every required field (empty where the campaign does not
    know it); an existing one keeps its values but for the submitter (and the division,
    when the result files log one or --division is given)."""
    defaults: dict[str, object] = {name: "" for name in SYSTEM_FIELDS}
    defaults.update({
        "division": "closed", "status": DEFAULT_STATUS, "system_name": system,
        "number_of_nodes": str(request.nodes), "accelerators_per_node": str(request.accelerators_per_node),
        "accelerator_model_name": request.accelerator,
    })
    existing: dict = {}
    if path.is_file():
        try:
            existing = json.loads(path.read_text())
        except ValueError as err:
            raise PackageError(f"{path}: not valid JSON ({err}); fix or remove it") from None
        if not isinstance(existing, dict):
            raise PackageError(f"{path}: not a JSON object; fix or remove it")
    description = {**defaults, **existing, "submitter": request.submitter}
    if logged is not None or request.division is not None:
        description["division"] = logged or request.division
    return description


def _write_json(path: Path, content: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content, indent=4) + "\n")
