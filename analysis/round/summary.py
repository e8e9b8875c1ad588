"""What a round's own `summary.json` files say of each submission (rounds from v6.0 carry
them: mlperf-logging's result summarizer writes one, a list of records, one per system,
with `<benchmark>:samples_to_converge`, `<benchmark>:RCP` (Pass, Fail, Interp. Fail,
Missing, No RCP) and `<benchmark>:rcp_scaling_factor` columns), set beside what
`rcpforge round` computed, with every disagreement named.

A summary.json applies to the results directories at or under its folder. A record
belongs to a submission when its submitter and system (either may be absent) are the
submission's: the system as its folder names it or as its description's `system_name`;
a record inside a results directory is that submission's whatever it names. Columns
without the benchmark's prefix are read too (a per-submission file)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

SUMMARY_FILE = "summary.json"
FIELDS = ("samples_to_converge", "RCP", "rcp_scaling_factor")
# Row columns this module adds (all None for a submission no summary.json speaks of).
COLUMNS = ("summary_file", "summary_samples_to_converge", "summary_rcp", "summary_rcp_scaling_factor",
           "summary_disagrees")
_REL_TOL = 1e-6  # the summarizer's numbers are float64 written as JSON, so equal to this


def summary_records(root: Path) -> tuple[dict[Path, list[dict]], list[str]]:
    """Every summary.json under `root` (its folder -> its records), and a note per file
    that cannot be read as a list of records (skipped)."""
    found: dict[Path, list[dict]] = {}
    notes = []
    for path in sorted(root.rglob(SUMMARY_FILE)):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            notes.append(f"{path}: not readable JSON ({err}); its submissions are not compared")
            continue
        records = [data] if isinstance(data, dict) else data
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            notes.append(f"{path}: not a list of records as the result summarizer writes; skipped")
            continue
        found[path.parent.resolve()] = records
    return found, notes


def add_summaries(rows: list[dict], folders: list[Path], root: Path) -> list[str]:
    """Each row (the submission in `folders`, same order) with what a summary.json says
    of it and how that disagrees with the row; the notes of files skipped."""
    files, notes = summary_records(root)
    for row, folder in zip(rows, folders, strict=True):
        row.update(dict.fromkeys(COLUMNS))
        said = _said(folder.resolve(), row, files)
        if said is None:
            continue
        path, record = said
        values = {f: _field(record, row.get("benchmark"), folder.name, f) for f in FIELDS}
        row.update(summary_file=str(path), summary_samples_to_converge=_number(values["samples_to_converge"]),
                   summary_rcp=None if values["RCP"] is None else str(values["RCP"]),
                   summary_rcp_scaling_factor=_number(values["rcp_scaling_factor"]))
        row["summary_disagrees"] = "; ".join(disagreements(row)) or None
    return notes


def disagreements(row: dict) -> list[str]:
    """Where the row's summary.json and what rcpforge computed differ, one phrase each."""
    found = []
    theirs, ours = row["summary_samples_to_converge"], row.get("olympic_mean")
    if theirs is not None and not _same(theirs, ours):
        found.append(f"samples_to_converge {theirs:g} in summary.json, olympic mean {_show(ours)} here")
    theirs, ours = row["summary_rcp_scaling_factor"], row.get("norm_factor")
    if theirs is not None and not _same(theirs, ours):
        found.append(f"rcp_scaling_factor {theirs:g} in summary.json, normalization factor {_show(ours)} here")
    if row["summary_rcp"] is not None and row["summary_rcp"] != rcp_label(row):
        found.append(f"RCP {row['summary_rcp']!r} in summary.json, {rcp_label(row)!r} here ({row.get('message')})")
    return found


def rcp_label(row: dict) -> str:
    """The summarizer's word for a verdict (its `RCP` column)."""
    if row.get("passed"):
        return "Pass"
    message = str(row.get("message") or "")
    if message == "RCP found":
        return "Fail"
    if message == "RCP Interpolation":
        return "Interp. Fail"
    if "Missing" in message:
        return "Missing"
    return "No RCP" if message == "Cannot find any RCPs" else "Unknown state"


def _said(folder: Path, row: dict, files: dict[Path, list[dict]]) -> tuple[Path, dict] | None:
    """The nearest summary.json at or above `folder` with a record of the submission."""
    for at in (folder, *folder.parents):
        records = files.get(at)
        if records is None:
            continue
        if at == folder and len(records) == 1:
            return at / SUMMARY_FILE, records[0]
        names = _system_names(folder, row)
        mine = [r for r in records if _is_mine(r, row, names)
                and any(_field(r, row.get("benchmark"), folder.name, f) is not None for f in FIELDS)]
        if len(mine) == 1:
            return at / SUMMARY_FILE, mine[0]
    return None


def _is_mine(record: dict, row: dict, systems: set[str]) -> bool:
    submitter, system = record.get("submitter"), record.get("system")
    if submitter is not None and str(submitter).strip().lower() != str(row.get("submitter") or "").strip().lower():
        return False
    return system is None or str(system).strip() in systems


def _system_names(folder: Path, row: dict) -> set[str]:
    """The submission's system: its folder's name and its description's system_name."""
    names = {str(row["system"])} if row.get("system") else set()
    if folder.parent.parent.name == "results":
        names.add(folder.parent.name)
        try:
            described = json.loads((folder.parents[2] / "systems" / f"{folder.parent.name}.json").read_text())
            if isinstance(described, dict) and described.get("system_name"):
                names.add(str(described["system_name"]).strip())
        except (OSError, ValueError):
            pass  # no description: the folder's name is the system's
    return names


def _field(record: dict, benchmark: Any, folder_name: str, name: str) -> Any:
    for key in (f"{benchmark}:{name}", f"{folder_name}:{name}", name):
        value = record.get(key)
        if value is not None:
            return value
    return None


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _same(theirs: float, ours: Any) -> bool:
    return isinstance(ours, (int, float)) and math.isclose(theirs, float(ours), rel_tol=_REL_TOL)


def _show(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else "none"
