"""Precision across a round: per benchmark and precision label, how the submissions'
olympic means compare with their RCPs. A submission's ratio is its olympic mean over the
mean of the RCP its verdict used (so batch sizes mix); the factor of a (benchmark,
precision) cell is the mean of its submissions' ratios, with a percentile bootstrap
interval over submissions (resampled with replacement, fixed seed). A cell of one
submission has no interval.

The label is what the submission disclosed (`lowest_numerical_precision_in_linear`,
mandatory from the 6.1 rules; `rcpforge.analysis.round.verdicts.settings_of`), or what a precision map
gives it, for rounds before 6.1: a JSON object `{"<dir>": "<label>"}` or a CSV of
`dir,precision` lines, dir as the round analysis shows it (or a trailing part of it)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from rcpforge.analysis.rcp_set import RcpError


def load_precision_map(path: Path) -> dict[str, str]:
    """A precision map file (JSON object or two-column CSV, an optional `dir,precision`
    header)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise RcpError(f"--precision-map {path}: cannot read it ({err.strerror}); give a JSON or CSV file") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as err:
            raise RcpError(f"--precision-map {path}: not valid JSON ({err})") from None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            raise RcpError(f"--precision-map {path}: every entry must be \"dir\": \"label\" (strings)")
        return {k.strip("/"): v for k, v in data.items()}
    mapping = {}
    for n, line in enumerate(csv.reader(text.splitlines()), 1):
        if not line or (n == 1 and [c.strip().lower() for c in line] == ["dir", "precision"]):
            continue
        if len(line) != 2 or not line[0].strip() or not line[1].strip():
            raise RcpError(f"--precision-map {path}:{n}: expected 'dir,precision', got {','.join(line)!r}")
        mapping[line[0].strip().strip("/")] = line[1].strip()
    return mapping


def precision_factors(rows: list[dict], resamples: int = 10_000, confidence: float = 0.95,
                      seed: int = 0) -> list[dict]:
    """One row per (benchmark, precision) with a label: submissions, factor, ci_low,
    ci_high (None for one submission)."""
    cells: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r.get("precision") and r["olympic_mean"] is not None and r["rcp_mean"]:
            cells.setdefault((str(r["benchmark"]), r["precision"]), []).append(r["olympic_mean"] / r["rcp_mean"])
    out = []
    rng = np.random.default_rng(seed)
    tail = (1 - confidence) / 2
    for (benchmark, precision), ratios in sorted(cells.items()):
        values = np.asarray(ratios, float)
        low = high = None
        if len(values) > 1:
            means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
            low, high = (float(q) for q in np.quantile(means, [tail, 1 - tail]))
        out.append({"benchmark": benchmark, "precision": precision, "submissions": len(values),
                    "factor": float(values.mean()), "ci_low": low, "ci_high": high})
    return out
