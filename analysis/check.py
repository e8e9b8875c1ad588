"""Check a submission's results directory against RCPs with the verdict, message and
normalization factor of `mlperf_logging.rcp_checker.check_directory`, branch for branch
(RCP found, interpolated, below the smallest, above the largest, none), plus the numbers
behind the verdict. Where the checker itself stops with an exception, the result fails
with `checker_error` saying where and why, instead of a traceback."""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rcpforge.trainers.contract.mllog.read import CheckerStops, Submission, read_submission
from rcpforge.trainers.contract.submission import SUBMISSION_RUNS
from rcpforge.analysis.rcp import cell_marks
from rcpforge.analysis.rcp_set import (
    PRUNE_MODES, RULESETS, RcpError, RcpSet, Record, carried_runs, ruleset_file, with_405b_slack,
)

DEFAULT_RULESET = "6.0.0"  # the checker's command-line default


@dataclass
class CheckResult:
    passed: bool
    message: str
    norm_factor: float
    batch_size: Any = None
    benchmark: Any = None
    olympic_mean: float | None = None
    rcp_mean: float | None = None
    rcp_stdev: float | None = None  # of the RCP's runs (interpolated: linear in batch size)
    rcp_runs: int | None = None  # the runs behind the RCP's mean and stdev (interpolated: 2N, the checker's count)
    min_acceptable_mean: float | None = None
    # the RCP's note where its min acceptable mean says nothing (too few runs; the rule of
    # the RCP table's cells, rcpforge.analysis.rcp.cell_marks), with the reason; the number stays the checker's
    rcp_note: str | None = None
    rcp_used: str = "none"  # found | interpolated | smallest | none
    rcp_name: str | None = None
    checker_error: str | None = None
    warnings: list[str] = field(default_factory=list)
    # Where the checker stops because of how it was asked (an empty folder, an RCP file
    # that is not JSON, a benchmark it needs a run count for): the flag that fixes it.
    # A command answers it as a usage error, not as a failing verdict.
    usage_error: str | None = None
    # each result file's value as the checker reads it (file name -> value; 1e9 where the
    # run did not converge), also where the verdict does not use them
    run_values: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        out = asdict(self)
        for key in ("norm_factor", "olympic_mean", "rcp_mean", "rcp_stdev", "min_acceptable_mean"):
            if out[key] is not None:
                out[key] = float(out[key])
        for key in ("batch_size",):
            if isinstance(out[key], np.generic):
                out[key] = out[key].item()
        return out


def _evaluate(record: Record, epochs: list, ruleset: str, benchmark: str) -> tuple[bool, Any, Any, Record]:
    """The checker's test of one RCP: (passed, norm factor, olympic mean, record used)."""
    record = with_405b_slack(record, ruleset, benchmark)
    epochs = sorted(epochs)
    trim = 4 if record.benchmark == "unet3d" else 1
    with np.errstate(all="ignore"):
        kept = epochs[trim : len(epochs) - trim]
        mean = np.mean(kept) if kept else np.float64(np.nan)
        factor = np.float64(record.mean) / mean
        factor = 1.0 if factor < 1 else factor
        passed = bool(mean >= record.mean / record.max_speedup)
    return passed, factor, mean, record


def _stopped(result: CheckResult, why: str, usage: str | None = None) -> CheckResult:
    result.passed = False
    result.checker_error = why
    result.usage_error = usage
    if not result.message:
        result.message = f"the reference checker stops here: {why}"
    return result


def _rcp_usage(err: Exception, rcps: str | Path | None, ruleset: str, benchmark: Any) -> str | None:
    """The flag that fixes an RCP file the checker cannot load, where a flag does."""
    import json

    if rcps is None and isinstance(err, FileNotFoundError):
        having = [r for r in RULESETS if ruleset_file(r, str(benchmark)).is_file()]
        return (f"--rcps {ruleset}: ruleset {ruleset} has no RCPs of benchmark {benchmark}; "
                + (f"rulesets that have them: {', '.join(having)}" if having else "no ruleset has them")
                + ", or give --rcps RCP_FILE")
    if rcps is not None and isinstance(err, json.JSONDecodeError):
        return f"--rcps {rcps}: not an RCP JSON file ({err}); give the RCP file or a ruleset version"
    return None


def _carried(path: Path) -> int | None:
    try:
        return carried_runs(json.loads(path.read_text()))
    except (OSError, ValueError):  # unreadable: the RCP loading below says so
        return None


@functools.lru_cache(maxsize=64)
def _rcp_set(path: str, mtime_ns: int, benchmark: str, prune: str, runs: int | None) -> RcpSet:
    """An RCP file's set, read once per file version: a round checks hundreds of
    directories against the same few files (the set is not changed by a check)."""
    return RcpSet.from_file(Path(path), benchmark, prune=prune, submission_runs=runs)


def _refuse_unknown_options(ruleset: str, prune: str, rcp_pass: str) -> None:
    if ruleset not in RULESETS:
        raise RcpError(f"ruleset {ruleset!r} is not one the checker knows; allowed: {', '.join(RULESETS)}")
    if prune not in PRUNE_MODES:
        raise RcpError(f"prune {prune!r} is not allowed; allowed: {', '.join(PRUNE_MODES)}")
    if rcp_pass not in ("pruned", "full"):
        raise RcpError(f"rcp pass {rcp_pass!r} is not allowed; allowed: pruned, full")


def _no_run_count(sub: Submission) -> tuple[str, str | None]:
    """Why the checker stops on a benchmark it has no run count of, and the flag that
    fixes it where one does."""
    what = sub.mismatch or f"benchmark {sub.benchmark!r} has no run count in the checker"
    usage = None if sub.mismatch or not isinstance(sub.benchmark, str) else (
        f"benchmark {sub.benchmark!r} is not one the MLCommons checker knows: give --submission-runs N, "
        "its runs per submission (a campaign's rcp.submission_runs)")
    return f"{what} (the reference checker raises KeyError)", usage


def _load_rcp_set(result: CheckResult, sub: Submission, rcps: str | Path | None, ruleset: str, prune: str,
                  submission_runs: int | None) -> RcpSet:
    """The RCPs of the submission's benchmark, from `rcps` or the ruleset's file; a
    --submission-runs the checker overrides is a warning on `result`."""
    path = Path(rcps) if rcps is not None else ruleset_file(ruleset, sub.benchmark)
    runs = SUBMISSION_RUNS.get(sub.benchmark, submission_runs)
    if submission_runs and sub.benchmark in SUBMISSION_RUNS and submission_runs != runs:
        result.warnings.append(
            f"--submission-runs {submission_runs} ignored: the checker counts {runs} runs per submission of "
            f"{sub.benchmark}, and this verdict is the checker's; leave --submission-runs out for it")
    return _rcp_set(str(path), path.stat().st_mtime_ns, sub.benchmark, prune, runs)


def check_directory(
    results_dir: str | Path,
    rcps: str | Path | None = None,
    ruleset: str = DEFAULT_RULESET,
    rcp_pass: str = "pruned",
    use_train_samples: bool = False,
    rcp_bypass: bool = False,
    prune: str = "mlperf",
    submission_runs: int | None = None,
) -> CheckResult:
    """`rcps` is an RCP JSON file, or None for the ruleset's shipped file. `prune` =
    "envelope" tests the pruned pass against the true lower convex envelope instead of
    the checker's pruning (a what-if: only "mlperf" is the checker's verdict).
    `submission_runs` registers the run count of a benchmark the checker does not know
    (a campaign's own), as a submitter adds it to the checker's `submission_runs`."""
    _refuse_unknown_options(ruleset, prune, rcp_pass)
    result = CheckResult(False, "", 1.0)
    try:
        sub = read_submission(str(results_dir), ruleset, use_train_samples)
    except CheckerStops as err:
        return _stopped(result, str(err))
    result.batch_size, result.benchmark, result.warnings = sub.bs, sub.benchmark, sub.warnings
    result.run_values = {Path(f).name: v for f, v in zip(sub.files, sub.values, strict=False)}
    if not sub.files:
        return _stopped(result, f"no result_*.txt files in {results_dir} (the reference checker raises KeyError)",
                        f"RESULTS_DIR {results_dir}: no result_*.txt files in this folder; give the folder that holds them "
                        "(`rcpforge export --results DIR` writes DIR/<recipe>/bs<N>/)")
    # The checker loads the RCPs before it looks at the batch size or convergence.
    if submission_runs is None and rcps is not None and sub.benchmark not in SUBMISSION_RUNS:
        submission_runs = _carried(Path(rcps))  # the N of a campaign's own benchmark, in rcpforge's RCP files
    if sub.benchmark not in SUBMISSION_RUNS and not (submission_runs and isinstance(sub.benchmark, str)):
        return _stopped(result, *_no_run_count(sub))
    try:
        rcp_set = _load_rcp_set(result, sub, rcps, ruleset, prune, submission_runs)
    except Exception as err:  # the checker raises on a missing or malformed RCP file
        return _stopped(result, f"RCPs: {type(err).__name__}: {err}", _rcp_usage(err, rcps, ruleset, sub.benchmark))
    result.warnings += rcp_set.warnings
    if sub.bs == -1:
        result.message = "Could not detect global_batch_size"
        return result
    if sub.epochs is None:
        result.message = "Insufficient convergence"
        return result
    try:
        _decide(result, rcp_set, sub.bs, sub.epochs, ruleset, rcp_pass)
    except Exception as err:  # e.g. a non-numeric value the checker cannot compare
        return _stopped(result, f"{type(err).__name__}: {err}")
    missing = f"Missing RCP, please submit RCP with BS = {sub.bs}"
    if rcp_bypass and not result.passed and result.message in ("RCP found", "RCP Interpolation", missing):
        result.message += " passed using rcp_bypass"
        result.passed = True
    return result


def _decide(result: CheckResult, rcp_set: RcpSet, bs: Any, epochs: list, ruleset: str, rcp_pass: str) -> None:
    record, used = rcp_set.find(bs, rcp_pass), "found"
    if record is None:
        low, high = rcp_set.below(bs, rcp_pass), rcp_set.above(bs, rcp_pass)
        if low is not None and high is not None:
            record, used = rcp_set.interpolate(bs, low, high), "interpolated"
        elif low is None and high is not None:
            record, used = rcp_set.smallest(rcp_pass), "smallest"
        else:
            result.message = f"Missing RCP, please submit RCP with BS = {bs}" if low is not None else "Cannot find any RCPs"
            return
    passed, factor, mean, tested = _evaluate(record, epochs, ruleset, rcp_set.benchmark)
    result.passed, result.norm_factor, result.olympic_mean = passed, factor, mean
    result.rcp_mean, result.rcp_stdev = tested.mean, tested.stdev
    result.rcp_runs = 2 * rcp_set.submission_runs if tested.interpolated else len(tested.epochs)
    with np.errstate(all="ignore"):
        result.min_acceptable_mean = tested.mean / tested.max_speedup
    result.rcp_used, result.rcp_name = used, tested.name
    result.rcp_note = _rcp_note(tested, result, rcp_set)
    result.message = {
        "found": "RCP found",
        "interpolated": "RCP Interpolation",
        "smallest": "RCP not found but slower convergence on smaller batch size"
        if passed else f"Missing RCP, please submit RCP with BS = {bs}",
    }[used]


def _rcp_note(tested: Record, result: CheckResult, rcp_set: RcpSet) -> str | None:
    """The tested RCP's note, by the rule of the RCP table's cells, where its minimum
    acceptable mean is not meaningful (an RCP of fewer than 2N runs whose limits still
    tell is left unmarked: the shipped RCPs include some)."""
    trim = 4 if tested.benchmark == "unet3d" else 1
    n_ref = 2 * rcp_set.submission_runs if tested.interpolated else len(tested.epochs) - 2 * trim
    runs = result.rcp_runs if result.rcp_runs is not None else len(tested.epochs)
    try:
        with np.errstate(all="ignore"):
            marks = cell_marks(runs, n_ref, rcp_set.submission_runs, float(tested.mean), float(tested.stdev),
                               float(result.min_acceptable_mean))  # type: ignore[arg-type]
    except (TypeError, ValueError):  # values the checker compares but that are no numbers: no note
        return None
    return marks.note if marks.degenerate else None
