"""Reference points for the factor-against-size plot: public results (a name, the recipe
they stand beside, a parameter count, a factor with its low and high, and the source),
read from a small YAML or JSON file. They are drawn, never fitted: a campaign's trend
is its own runs' alone. `MLPERF_FP4` is the file rcpforge ships (the MLPerf Training FP4
factors on llama31_8b)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

MLPERF_FP4 = Path(__file__).with_name("reference_points") / "mlperf_fp4.yaml"
FIELDS = ("name", "recipe", "params", "factor", "low", "high", "source")


class PointsError(ValueError):
    """A reference-points file that cannot be read: one line naming the field and the fix."""


@dataclass(frozen=True)
class ReferencePoint:
    name: str
    recipe: str
    params: float
    factor: float
    low: float | None
    high: float | None
    source: str


def load_points(path: Path) -> list[ReferencePoint]:
    """The file's points (`points:` a list, or the list itself); PointsError names the
    first wrong field."""
    try:
        text = path.read_text()
        raw = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise PointsError(f"reference points {path}: cannot read it ({err})") from err
    entries = raw.get("points") if isinstance(raw, dict) else raw
    if not isinstance(entries, list):
        raise PointsError(f"reference points {path}: expected a list under `points:` of entries with "
                          f"{', '.join(FIELDS)}")
    return [_point(path, i, e) for i, e in enumerate(entries)]


def _number(path: Path, i: int, entry: dict, key: str, required: bool) -> float | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]  # None and text fail here, as they should
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise PointsError(f"reference points {path}: points[{i}].{key} must be a positive number, got {value!r}")
    return number


def _point(path: Path, i: int, entry: object) -> ReferencePoint:
    if not isinstance(entry, dict):
        raise PointsError(f"reference points {path}: points[{i}] must be a mapping with {', '.join(FIELDS)}")
    unknown = sorted(set(entry) - set(FIELDS))
    if unknown:
        raise PointsError(f"reference points {path}: points[{i}] has unknown field(s) {', '.join(unknown)}; "
                          f"the fields are {', '.join(FIELDS)}")
    for key in ("name", "recipe", "source"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise PointsError(f"reference points {path}: points[{i}].{key} is missing; give it as text")
    params, factor = _number(path, i, entry, "params", True), _number(path, i, entry, "factor", True)
    low, high = _number(path, i, entry, "low", False), _number(path, i, entry, "high", False)
    assert params is not None and factor is not None
    if (low is not None and low > factor) or (high is not None and high < factor):
        raise PointsError(f"reference points {path}: points[{i}] needs low <= factor <= high, got "
                          f"{low} <= {factor} <= {high}")
    return ReferencePoint(entry["name"], entry["recipe"], params, factor, low, high, entry["source"])
