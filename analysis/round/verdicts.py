"""A published round as one dataset: per submission (results directory) the checker's
verdict, message and normalization factor (`rcpforge.analysis.check`, the checker's own rules),
its olympic mean against the RCP mean in percent and in eval intervals (the unit
submitters argue in), and the rules' M > N score: where more than N runs were
submitted, the olympic mean of the median window of N consecutive runs by start time."""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rcpforge.analysis.check import check_directory
from rcpforge.analysis.rcp_set import RULESETS, RcpError
from rcpforge.analysis.round.groups import DEFAULT_GROUP_KEYS, FlagSettings, assign_groups
from rcpforge.analysis.round.summary import add_summaries
from rcpforge.trainers.contract.mllog.read import (
    NOT_CONVERGED,
    convergence_unit,
    events_facts,
    follow_events,
    read_result_file,
)
from rcpforge.trainers.contract.submission import SUBMISSION_RUNS, system_settings


def submission_dirs(root: Path) -> list[Path]:
    """The results directories at any depth under `root` (or `root` itself)."""
    if not root.is_dir():
        raise RcpError(f"{root}: no such directory; give a round's root or a folder of results directories")
    found = sorted({p.parent for p in root.rglob("result_*.txt") if p.is_file()})
    if not found:
        raise RcpError(f"{root}: no result_*.txt files in it or under it")
    return found


def analyze_round(root: Path, rcps: str, ruleset: str = "5.0.0", group_by: Sequence[str] = DEFAULT_GROUP_KEYS,
                  flags: FlagSettings | None = None, precision_map: dict[str, str] | None = None,
                  notes: list[str] | None = None) -> list[dict]:
    """`rcps` is a ruleset (its shipped RCPs) or an RCP file (read with `ruleset`'s rules).
    Every submission is grouped by `group_by` and scored within its group
    (`rcpforge.analysis.round.groups`); `precision_map` (dir -> label) overrides the MLLOG
    precision disclosure. Where the round has summary.json files, each submission also
    gets what they say and where that disagrees (`rcpforge.analysis.round.summary`); `notes`
    receives the files that could not be read."""
    if rcps in RULESETS:
        rcp_file, ruleset = None, rcps
    elif Path(rcps).is_file():
        rcp_file = rcps
    else:
        raise RcpError(f"--rcps {rcps!r}: neither an RCP file nor a ruleset; rulesets: {', '.join(RULESETS)}")
    folders = submission_dirs(root)
    rows = [_submission(folder, root, rcp_file, ruleset) for folder in folders]
    skipped = add_summaries(rows, folders, root)
    if notes is not None:
        notes += skipped
    for row in rows:
        if precision_map is not None:
            row["precision"] = mapped_precision(precision_map, row["dir"]) or row["precision"]
    assign_groups(rows, group_by, flags or FlagSettings())
    return rows


def _submission(folder: Path, root: Path, rcp_file: str | None, ruleset: str) -> dict:
    result = check_directory(folder, rcp_file, ruleset)
    mean = None if result.olympic_mean is None else float(result.olympic_mean)
    rcp_mean = float(result.rcp_mean) if result.rcp_mean is not None and result.rcp_used != "none" else None
    used = rcp_mean is not None
    files = _files(folder, result.run_values)
    interval = _eval_interval(files, result.benchmark)
    row = {
        "dir": str(folder.relative_to(root)) if folder != root else folder.name,
        "benchmark": result.benchmark, "batch_size": result.batch_size, "runs": len(files),
        "olympic_mean": mean, "window_olympic_mean": _window(files, result.benchmark),
        "rcp_mean": rcp_mean, "rcp_stdev": float(result.rcp_stdev) if used and result.rcp_stdev is not None else None,
        "rcp_runs": result.rcp_runs if used else None, "rcp_used": result.rcp_used, "passed": result.passed,
        "message": result.message,
        "norm_factor": float(result.norm_factor), "eval_interval": interval,
        "vs_rcp_pct": None, "vs_rcp_evals": None,
        **settings_of(folder, files),
        "run_values": [f.value for f in files],
        "group": None, "robust_z": None, "p_value": None, "flagged": None,
    }
    if mean is not None and rcp_mean:
        row["vs_rcp_pct"] = (mean / rcp_mean - 1.0) * 100.0
        if interval:
            row["vs_rcp_evals"] = (mean - rcp_mean) / interval
    return row


@dataclass(frozen=True)
class _File:
    events: list[dict]
    value: float  # the checker's: the value to converge, 1e9 where the run did not converge
    start_ms: float  # run_start's time, inf where there is none


def _files(folder: Path, values: dict[str, object]) -> list[_File]:
    """The result files with their events, and `values` (the checker's, by file name)."""
    found = []
    for path in sorted(folder.glob("result_*.txt")):
        _, events = follow_events(path)
        value = values.get(path.name, NOT_CONVERGED)
        value = float(value) if isinstance(value, (int, float)) else NOT_CONVERGED
        start = next((e.get("time_ms") for e in events if e.get("key") == "run_start"), None)
        found.append(_File(events, value, start if isinstance(start, (int, float)) else float("inf")))
    return found


_PLATFORM = re.compile(r"^(\d+)x(.+)$")  # submission_platform: "<nodes>x<system>"


def settings_of(folder: Path, files: list[_File]) -> dict:
    """The grouping settings: the system file's (`system_settings`), else what the MLLOG
    lines say: submission_org, _division, _platform ("8xNVIDIA GB200": 8 nodes of the
    system, which then stands for the accelerator), a `framework` or
    `submission_framework` line if logged; precision from
    `lowest_numerical_precision_in_linear` (the GEMMs' precision)."""
    found: dict = {k: None for k in ("submitter", "system", "division", "framework", "accelerator",
                                     "accelerators_per_node", "nodes", "precision")}
    logged: dict = {}
    for f in files:
        facts = events_facts(f.events)
        for key in ("org", "division", "platform", "framework"):
            logged.setdefault(key, facts.submission.get(key))
        logged.setdefault("precision", facts.disclosed.get("lowest_numerical_precision_in_linear"))
        if logged.get("framework") is None:
            logged["framework"] = next((e.get("value") for e in f.events if e.get("key") == "framework"), None)
    platform = logged.get("platform")
    shape = _PLATFORM.match(str(platform)) if platform else None
    fallback = {"submitter": logged.get("org"), "division": logged.get("division"), "system": platform,
                "framework": logged.get("framework"), "accelerator": shape.group(2) if shape else platform,
                "nodes": shape.group(1) if shape else None, "precision": logged.get("precision")}
    found.update({k: str(v) for k, v in fallback.items() if v not in (None, "")})
    found.update(system_settings(folder))
    return found


def mapped_precision(mapping: dict[str, str], folder: str) -> str | None:
    """The label of `folder` (a row's dir) in a precision map: its own entry, else the
    first entry whose path and the folder's end alike (one is a trailing part of the
    other: a map written from another root still applies)."""
    if folder in mapping:
        return mapping[folder]
    parts = Path(folder).parts
    for key, label in mapping.items():
        theirs = Path(key).parts
        k = min(len(theirs), len(parts))
        if k and theirs[-k:] == parts[-k:]:
            return label
    return None


def _eval_interval(files: list[_File], benchmark) -> float | None:
    """The median distance between consecutive evals, in the unit the checker counts."""
    unit = convergence_unit(benchmark)
    gaps = []
    for f in files:
        marks = [e["metadata"][unit] for e in f.events if e.get("key") == "eval_accuracy"
                 and isinstance((e.get("metadata") or {}).get(unit), (int, float))]
        gaps += [b - a for a, b in zip(marks, marks[1:], strict=False) if b > a]
    return float(statistics.median(gaps)) if gaps else None


def _olympic(values: list[float], benchmark) -> float:
    trim = 4 if benchmark == "unet3d" else 1
    kept = sorted(values)[trim : len(values) - trim]
    return float(statistics.fmean(kept)) if kept else float("nan")


def window_olympic_mean(folder: Path, benchmark, ruleset: str) -> float | None:
    """Where M > N runs were submitted: the windows of N consecutive runs by run_start
    time, and the olympic mean of the median one (the lower of two middle ones)."""
    values = {p.name: read_result_file(str(p), ruleset).epochs for p in folder.glob("result_*.txt")}
    return _window(_files(folder, values), benchmark)


def _window(files: list[_File], benchmark) -> float | None:
    n = SUBMISSION_RUNS.get(benchmark)
    if n is None or len(files) <= n:
        return None
    values = [f.value for f in sorted(files, key=lambda f: f.start_ms)]
    scores = sorted(_olympic(values[i : i + n], benchmark) for i in range(len(values) - n + 1))
    return scores[(len(scores) - 1) // 2]
