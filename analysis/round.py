"""A published round as one dataset: per submission (results directory) the checker's
verdict, message and normalization factor (`analysis.check`, the checker's own rules),
its olympic mean against the RCP mean in percent and in eval intervals (the unit
submitters argue in), and the rules' M > N score: where more than N runs were
submitted, the olympic mean of the median window of N consecutive runs by start time."""

from __future__ import annotations

import statistics
from pathlib import Path

from analysis.check import check_directory
from analysis.rcp_set import RULESETS, RcpError
from trainers.contract.mllog.read import convergence_unit, follow_events, read_result_file
from trainers.contract.submission import SUBMISSION_RUNS


def submission_dirs(root: Path) -> list[Path]:
    """The results directories at any depth under `root` (or `root` itself)."""
    if not root.is_dir():
        raise RcpError(f"{root}: no such directory; give a round's root or a folder of results directories")
    found = sorted({p.parent for p in root.rglob("result_*.txt") if p.is_file()})
    if not found:
        raise RcpError(f"{root}: no result_*.txt files in it or under it")
    return found


def analyze_round(root: Path, rcps: str, ruleset: str = "5.0.0") -> list[dict]:
    """`rcps` is a ruleset (its shipped RCPs) or an RCP file (read with `ruleset`'s rules)."""
    if rcps in RULESETS:
        rcp_file, ruleset = None, rcps
    elif Path(rcps).is_file():
        rcp_file = rcps
    else:
        raise RcpError(f"--rcps {rcps!r}: neither an RCP file nor a ruleset; rulesets: {', '.join(RULESETS)}")
    return [_submission(folder, root, rcp_file, ruleset) for folder in submission_dirs(root)]


def _submission(folder: Path, root: Path, rcp_file: str | None, ruleset: str) -> dict:
    result = check_directory(folder, rcp_file, ruleset)
    mean = None if result.olympic_mean is None else float(result.olympic_mean)
    rcp_mean = None if result.rcp_mean is None or result.rcp_used == "none" else float(result.rcp_mean)
    interval = eval_interval(folder, result.benchmark)
    row = {
        "dir": str(folder.relative_to(root)) if folder != root else folder.name,
        "benchmark": result.benchmark, "batch_size": result.batch_size, "runs": len(list(folder.glob("result_*.txt"))),
        "olympic_mean": mean, "window_olympic_mean": window_olympic_mean(folder, result.benchmark, ruleset),
        "rcp_mean": rcp_mean, "rcp_used": result.rcp_used, "passed": result.passed, "message": result.message,
        "norm_factor": float(result.norm_factor), "eval_interval": interval,
        "vs_rcp_pct": None, "vs_rcp_evals": None,
        "group": None, "robust_z": None, "p_value": None, "flagged": None,
    }
    if mean is not None and rcp_mean:
        row["vs_rcp_pct"] = (mean / rcp_mean - 1.0) * 100.0
        if interval:
            row["vs_rcp_evals"] = (mean - rcp_mean) / interval
    return row


def eval_interval(folder: Path, benchmark) -> float | None:
    """The median distance between consecutive evals, in the unit the checker counts."""
    unit = convergence_unit(benchmark)
    gaps = []
    for path in folder.glob("result_*.txt"):
        _, events = follow_events(path)
        marks = [e["metadata"][unit] for e in events if e.get("key") == "eval_accuracy"
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
    n = SUBMISSION_RUNS.get(benchmark)
    files = sorted(folder.glob("result_*.txt"))
    if n is None or len(files) <= n:
        return None
    timed = []
    for path in files:
        _, events = follow_events(path)
        start = next((e.get("time_ms") for e in events if e.get("key") == "run_start"), None)
        at = start if isinstance(start, (int, float)) else float("inf")
        timed.append((at, read_result_file(str(path), ruleset).epochs))
    values = [epochs for _, epochs in sorted(timed, key=lambda t: t[0])]
    scores = sorted(_olympic(values[i : i + n], benchmark) for i in range(len(values) - n + 1))
    return scores[(len(scores) - 1) // 2]
