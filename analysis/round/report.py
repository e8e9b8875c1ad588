"""A round's outputs besides the console: the submissions as a Parquet file, and a
self-contained HTML round report (`rcpforge.analysis.report`'s sections; figures embedded as
base64 PNG): the flags with the numbers behind them, each group of like submissions
against its RCP band, every submission's deviation from its RCP, and the factors by
precision."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rcpforge.analysis.report import Section, write_report
from rcpforge.analysis.round.groups import group_summaries

# columns of the Parquet file that are not plain scalars
_LIST_COLUMNS = {"run_values": pa.list_(pa.float64())}


def round_table(rows: list[dict]) -> pa.Table:
    """One row per submission, every key of the round analysis a column."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    data = {}
    for c in columns:
        values = [r.get(c) for r in rows]
        if c in _LIST_COLUMNS:
            data[c] = pa.array(values, _LIST_COLUMNS[c])
        elif any(isinstance(v, float) for v in values) and all(isinstance(v, (int, float)) or v is None
                                                                for v in values):
            data[c] = pa.array([None if v is None else float(v) for v in values], pa.float64())
        elif all(isinstance(v, (bool, type(None))) for v in values) or all(
                isinstance(v, (int, type(None))) and not isinstance(v, bool) for v in values):
            data[c] = pa.array(values)
        else:  # mixed (a batch size the checker could not read, ...): kept as text
            data[c] = pa.array([None if v is None else str(v) for v in values], pa.string())
    return pa.table(data)


def write_parquet(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(round_table(rows), path)


_FLAG_COLUMNS = ["dir", "group_no", "olympic_mean", "rcp_mean", "p_value", "robust_z", "flag_reason"]
_SUBMISSION_COLUMNS = ["dir", "batch_size", "passed", "message", "norm_factor", "olympic_mean", "vs_rcp_pct",
                       "vs_rcp_evals", "group_no", "robust_z", "p_value", "flagged"]


def round_sections(rows: list[dict], factors: list[dict], keys: Sequence[str]) -> list[Section]:
    from rcpforge.analysis.round.plots import deviations_figure, factors_figure, groups_figure

    groups = group_summaries(rows)
    number = {g["group"]: i for i, g in enumerate(groups, 1)}
    shown = [{**r, "group_no": f"G{number[r['group']]}"} for r in rows]
    flagged = [r for r in shown if r["flagged"]]
    several = [g for g in groups if g["submissions"] > 1]
    passed = sum(bool(r["passed"]) for r in rows)
    sections = [
        Section("summary", "Round", f"{len(rows)} submissions: {passed} pass the checker, {len(rows) - passed} fail; "
                f"{len(groups)} groups of like submissions (same {', '.join(keys)}); {len(flagged)} flagged."),
        Section("flags", "Flagged for the chair",
                "Submissions whose olympic mean is faster than honest seeds make likely (p: the probability that "
                "honest seeds are at least this fast) or far faster than their group (robust z)."
                if flagged else "No submission is beyond the thresholds.",
                _FLAG_COLUMNS if flagged else [], flagged),
        Section("groups", "Groups of like submissions",
                f"The {len(several)} groups of two or more submissions ({len(groups) - len(several)} more hold one "
                "each). Score: olympic mean / RCP mean (scale 'vs RCP') or the olympic mean ('raw'); spread: max - min "
                "of the scores in percent of their median.",
                ["group_no", "group", "submissions", "scored", "scale", "median", "mad", "spread_pct", "flagged"],
                [{**g, "group_no": f"G{number[g['group']]}"} for g in several],
                groups_figure(rows, number), "Each group of two or more: every submission's olympic mean / RCP "
                "mean (red: flagged); the band is the RCP mean +- one RCP stdev."),
        Section("deviations", "Deviations from the RCP", "", [], [], deviations_figure(rows),
                "Olympic mean against the RCP mean, in percent, per benchmark (red: flagged)."),
    ]
    if factors:
        sections.append(Section("precision", "Factors by precision",
                                "Mean of the submissions' olympic mean / RCP mean, 95% bootstrap interval over "
                                "submissions.", ["benchmark", "precision", "submissions", "factor", "ci_low",
                                                 "ci_high"], factors, factors_figure(factors),
                                "Factor by benchmark and precision, with its bootstrap interval."))
    sections.append(Section("submissions", "Every submission", "", _SUBMISSION_COLUMNS, shown, collapsed=True))
    return sections


def write_round_report(path: Path, rows: list[dict], factors: list[dict], keys: Sequence[str], title: str) -> Path:
    return write_report(path, f"Round report: {title}", round_sections(rows, factors, keys), "html")
