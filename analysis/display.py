"""How a value and a column name are shown to a person: one set of rules for `summary.md`
(analyze) and the report (HTML and markdown), so the two never show one number two ways."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NOT_MEANINGFUL = "n/m"  # a degenerate statistic: the checker's number, but it says nothing

# Column names that the default rule (underscores to spaces) would not make readable.
_HEADERS = {
    "is_rcp": "is RCP",
    "ci_low": "CI low",
    "ci_high": "CI high",
    "p_candidate_faster": "P(candidate faster)",
    "mann_whitney_p": "Mann-Whitney p",
    "n": "N",
    "pass_prob": "pass prob.",
    "best_of_k": "best-of-K gain (K: gain)",
    "gpu_hours": "GPU-hours",
    "core_hours": "core-hours",
    "run_wall_hours": "run wall-hours",
    "eta_s": "ETA (s)",
    "cost_usd": "cost (US$)",
    "vs_rcp_pct": "vs RCP %",
    "vs_rcp_evals": "vs RCP (evals)",
    "rcp_mean": "RCP mean",
    "p_value": "p (honest this fast)",
    "robust_z": "robust z",
    "spread_pct": "spread %",
    "mad": "MAD",
    "group_no": "group",
    "flag_reason": "why",
    "honest_rejected_se": "MC s.e.",
}


def header(column: str) -> str:
    """A table column's header as a person reads it: "max_speedup" -> "max speedup"."""
    if column in _HEADERS:
        return _HEADERS[column]
    if column.startswith("gain_best_of_"):
        return f"gain, best of {column.removeprefix('gain_best_of_')}"
    return column.replace("_", " ")


def markdown_header(columns: list[str], aligns: str | None = None) -> list[str]:
    """A markdown table's header and alignment rows; `aligns`: l or r per column (default l)."""
    return ["| " + " | ".join(header(c) for c in columns) + " |",
            "|" + "".join("---:|" if a == "r" else "---|" for a in aligns or "l" * len(columns))]


@dataclass(frozen=True)
class Shown:
    """A cell shown as `text` while the table still carries its exact `value` (HTML's
    data-value), e.g. a statistic that is not meaningful."""

    value: Any
    text: str


def fixed(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


# Digits of the statistics that summary.md and the report both show; others get `_number`.
_DIGITS = {"olympic_mean": 1, "stdev": 1, "min_acceptable_mean": 1, "max_speedup": 4, "factor": 4,
           "ci_low": 4, "ci_high": 4, "p_candidate_faster": 3, "honest_mean": 1, "honest_stdev": 1, "pass_prob": 3,
           "eta_s": 0, "robust_z": 2, "vs_rcp_pct": 1, "vs_rcp_evals": 2, "spread_pct": 1, "norm_factor": 4,
           "cost_usd": 2}
_SIGNIFICANT = {"mann_whitney_p", "p_value", "p_value_rcp", "p_value_pooled"}  # shown to 3 significant digits


def _number(value: float) -> str:
    return f"{value:,.4f}" if abs(value) < 100 else f"{value:,.1f}"


def cell_text(column: str, value: Any) -> str:
    """The text of one table cell of `column`."""
    if isinstance(value, Shown):
        return value.text
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        if column in _SIGNIFICANT:
            return f"{value:.3g}"
        return fixed(value, _DIGITS[column]) if column in _DIGITS else _number(value)
    return str(value)


def gain_text(gain: float | None) -> str:
    """A selection gain (a relative drop of the expected olympic mean) as a percentage."""
    return "-" if gain is None else f"{gain * 100:,.2f}%"


def runs_required_text(runs_required: int | None, n: int, max_m_factor: int) -> str:
    """Runs per submission that keep the selection gain under the tolerance; none up to
    the largest M tried (max_m_factor x N) is shown as "> that M"."""
    return str(runs_required) if runs_required else f"> {max_m_factor * n}"


LIMITS = ("min_acceptable_mean", "max_speedup")  # the RCP table's checker limits


def rcp_row_shown(row: dict) -> dict:
    """An RCP table row as shown: a degenerate cell's limits are the checker's numbers but
    say nothing, so they show as n/m (the exact value still carried)."""
    if not row["degenerate"]:
        return row
    return {**row, **{c: Shown(row[c], NOT_MEANINGFUL) for c in LIMITS}}


def outliers_text(outlier_sets: list[dict]) -> str:
    return ", ".join(str(o["set"]) for o in outlier_sets) or "-"
