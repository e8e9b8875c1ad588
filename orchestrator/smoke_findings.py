"""What a smoke run (orchestrator/smoke.py) says of its configuration: one finding per
thing the checkers and the campaign will need, each ok, a note, or not ok (the smoke
then exits non-zero). Read from the run's outcome, folder and result file only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rcpforge.sweeps.spec import Campaign
from rcpforge.trainers.command.settings import LABEL_PARALLELISM_KEYS, LABEL_PRECISION_KEYS
from rcpforge.trainers.contract import RunStatus
from rcpforge.trainers.contract.mllog.compliance import ComplianceVerdict, check_file, refusal_lines
from rcpforge.trainers.contract.mllog.read import convergence_unit, follow_events
from rcpforge.trainers.contract.mllog.write import RESULT_FILE

# The keys a recipe label can say for a program that does not log them.
LABEL_KEYS = (*LABEL_PRECISION_KEYS, *LABEL_PARALLELISM_KEYS)


@dataclass(frozen=True)
class Finding:
    what: str  # outcome, argv, output, metric, unit, benchmark, disclosure, events, pace
    ok: bool
    text: str
    note: bool = False  # ok, and worth reading


def findings(smoke: Campaign, run: Any, ruleset: str) -> list[Finding]:
    """The findings of one smoke run (`smoke.SmokeRun`)."""
    out = [_outcome(run)]
    launch = run.launch
    if "argv" in launch:
        missing = launch.get("missing_inputs") or []
        out.append(Finding("argv", not missing, f"argv names {', '.join(missing)}, not found in {launch['workdir']}"
                           if missing else "every file argv names is there"))
    if run.result is None:
        return out
    folder = smoke.run_dir(run.spec)
    result_file = folder / RESULT_FILE
    out.append(_output(launch, folder, result_file))
    if not result_file.is_file():
        return out
    _, events = follow_events(result_file)
    # a program that ended before its first MLLOG line (rcpforge's own lines aside): the outcome says why
    if not any((e.get("metadata") or {}).get("file") != "rcpforge" for e in events):
        return [*out[:-1], Finding("output", False, f"no MLLOG line in {result_file}: the program logged none")]
    benchmark = smoke.benchmark_of(run.spec.model)
    out += _evals(events, run.spec.target.metric, convergence_unit(benchmark), benchmark)
    out.append(_benchmark(events, benchmark, ruleset))
    out += _disclosure(check_file(result_file, ruleset), benchmark, ruleset, stopped=_stopped_by_smoke(run.result))
    return out


def _outcome(run: Any) -> Finding:
    from rcpforge.orchestrator.failfast import reason_line

    result = run.result
    if result is None:
        return Finding("outcome", False, "not run: the smoke stopped on a configuration error first")
    if result.status is RunStatus.failed:
        return Finding("outcome", False, f"failed: {reason_line(result.error)}")
    said = f"{result.status.value} after {result.tokens_trained:,} tokens in {result.wall_s:.1f} s"
    return Finding("outcome", True, said + (f" ({reason_line(result.error)})" if result.error else ""))


def _stopped_by_smoke(result: Any) -> bool:
    """The smoke's own budget or wall-time cap ended the run (not its program)."""
    return result is not None and (result.error or "").startswith("stopped:")


def _output(launch: dict, folder: Path, result_file: Path) -> Finding:
    from rcpforge.trainers.command.trainer import OUTPUT_LOG

    if not result_file.is_file():
        return Finding("output", False, f"no result file {result_file}: the run wrote no MLLOG line rcpforge read")
    if "argv" not in launch:
        return Finding("output", True, f"MLLOG written by rcpforge to {result_file}")
    source = launch.get("mllog_file") or "the program's stdout and stderr"
    log = folder / OUTPUT_LOG
    return Finding("output", True, f"MLLOG read from {source} into {result_file}; program output in "
                   f"{log if log.is_file() else '(none written)'}")


def _evals(events: list[dict], metric: str, unit: str, benchmark: str) -> list[Finding]:
    evals = [e for e in events if e.get("key") == metric]
    if not evals:
        seen = sorted({str(e.get("key")) for e in events if str(e.get("key", "")).startswith("eval")})
        return [Finding("metric", False, f"no {metric} line (target.metric / trainer.metric_key); eval keys "
                        f"logged: {', '.join(seen) or 'none'}")]
    values = [e.get("value") for e in evals]
    out = [Finding("metric", True, f"{metric} on {len(evals)} eval lines ({values[0]!r} -> {values[-1]!r})")]
    lacking = sum(1 for e in evals if unit not in (e.get("metadata") or {}))
    out.append(Finding("unit", not lacking, f"the RCP checker reads {benchmark}'s value to converge from "
                       f"{unit}: " + (f"{lacking} of {len(evals)} eval lines lack it" if lacking
                                      else "on every eval line")))
    times = [e["time_ms"] for e in evals if isinstance(e.get("time_ms"), (int, float))]
    if len(times) >= 2:
        out.append(Finding("pace", True, f"{(times[-1] - times[0]) / 1000 / (len(times) - 1):.2f} s between "
                           "evals", note=True))
    return out


def _benchmark(events: list[dict], benchmark: str, ruleset: str) -> Finding:
    from rcpforge.orchestrator.package import checked_benchmarks

    logged = [e.get("value") for e in events if e.get("key") == "submission_benchmark"]
    if not logged:
        return Finding("benchmark", False, f"no submission_benchmark line: log {benchmark!r} (the {{benchmark}} "
                       "placeholder of trainer.argv), which the RCP checker pairs with the RCPs")
    if logged[0] != benchmark:
        return Finding("benchmark", False, f"submission_benchmark {logged[0]!r} is not the campaign's benchmark "
                       f"{benchmark!r} (rcp.benchmark): the package's folder and its files would disagree")
    if benchmark not in checked_benchmarks(ruleset):
        return Finding("benchmark", True, f"submission_benchmark {benchmark!r}: not a {ruleset} benchmark, so its "
                       "rules are the common ones only, and the package checker skips it", note=True)
    return Finding("benchmark", True, f"submission_benchmark {benchmark!r}")


def _disclosure(verdict: ComplianceVerdict, benchmark: str, ruleset: str, *, stopped: bool) -> list[Finding]:
    """The checker's keys: the disclosure keys always count; the run's timeline keys
    count unless the smoke itself stopped the run."""
    from rcpforge.orchestrator.package import checked_benchmarks

    study = benchmark not in checked_benchmarks(ruleset)  # its benchmark: the finding above says it
    refused = [k for k in verdict.refused(events=False) if not (study and k.key == "submission_benchmark")]
    added = [k.key for k in verdict.keys if k.state == "added"]
    rules = f"the compliance checker's {ruleset} rules ({', '.join(verdict.rules)})"
    if refused:
        lines = refusal_lines(ComplianceVerdict(verdict.path, ruleset, refused), events=False)
        label = [k.key for k in refused if k.state == "missing" and k.key in LABEL_KEYS]
        hint = (f"; a recipe label can say {', '.join(label)} for a program that does not log them "
                "(recipes: {name: {key: value}})" if label else "")
        out = [Finding("disclosure", False, f"{rules}: {'; '.join(lines)}{hint}")]
    else:
        out = [Finding("disclosure", True, f"every key of {rules} is there" +
                       (f" ({', '.join(added)} added by rcpforge)" if added else ""))]
    timeline = refusal_lines(ComplianceVerdict(verdict.path, ruleset, [k for k in verdict.refused() if k.event],
                                               verdict.other))
    if timeline:
        text = "; ".join(timeline)
        out.append(Finding("events", True, f"{text} (the smoke's budget stopped the run: expected)", note=True)
                   if stopped else Finding("events", False, text))
    return out
