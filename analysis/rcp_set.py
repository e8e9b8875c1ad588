"""A set of RCP records as the MLCommons checker sees it: loaded from an RCP JSON file
or a shipped ruleset, with the checker's statistics per record, its pruning, its
interpolation and its lookups (docs/rcp-rules.md).

Every step keeps the checker's order of operations and number types (numpy float64),
because its verdicts depend on them at the last digit: records sorted by batch size with
a stable sort, the first minimum wins, comparisons that are False for NaN."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from rcpforge.analysis.rcp import min_acceptable_mean
from rcpforge.trainers.contract.submission import SUBMISSION_RUNS  # the checker's N per benchmark (its one home)

RULESETS = ("1.0.0", "1.1.0", "2.0.0", "2.1.0", "3.0.0", "3.1.0", "4.0.0", "4.1.0",
            "5.0.0", "5.1.0", "6.0.0", "6.1.0")
PRUNE_MODES = ("mlperf", "envelope")
# Llama3.1-405B from ruleset 5.0.0: one eval interval of slack in the max speedup.
SLACK_405B = 46080


class RcpError(ValueError):
    """Bad RCP input, said in one line."""


def convergence_key(benchmark: str) -> str:
    """The key the checker reads a record's runs from."""
    return "samples to converge" if benchmark in ("llama2_70b_lora", "flux1") else "Epochs to converge"


def version_at_least(version: str, minimum: str) -> bool:
    parts = [tuple(int(x) for x in v.split(".")) for v in (version, minimum)]
    width = max(len(p) for p in parts)
    a, b = (p + (0,) * (width - len(p)) for p in parts)
    return a >= b


def ruleset_folder(ruleset: str) -> Path:
    import mlperf_logging.rcp_checker as pkg

    if ruleset not in RULESETS:
        raise RcpError(f"ruleset {ruleset!r} is not one the checker knows; allowed: {', '.join(RULESETS)}")
    return Path(os.path.dirname(pkg.__file__)) / f"training_{ruleset}"


def ruleset_file(ruleset: str, benchmark: str) -> Path:
    return ruleset_folder(ruleset) / f"rcps_{benchmark}.json"


@dataclass
class Record:
    """One RCP with the checker's statistics. `min_epochs` is the minimum acceptable
    submission mean; `max_speedup` = mean / min_epochs."""

    name: str
    benchmark: Any
    bs: Any
    hyperparams: Any
    epochs: list
    mean: Any = np.float64(0.0)
    stdev: Any = np.float64(0.0)
    min_epochs: Any = np.float64(0.0)
    max_speedup: Any = np.float64(0.0)
    interpolated: bool = False
    raw: dict = field(default_factory=dict)


def _stats(record: Record, submission_runs: int) -> None:
    record.epochs = sorted(record.epochs)
    trim = 4 if record.benchmark == "unet3d" else 1
    with np.errstate(all="ignore"):
        kept = record.epochs[trim : len(record.epochs) - trim]
        record.mean = np.float64(np.mean(kept)) if kept else np.float64(np.nan)
        record.stdev = np.float64(np.std(record.epochs)) if record.epochs else np.float64(np.nan)
        n_ref = len(record.epochs) - 2 * trim
        record.min_epochs = np.float64(min_acceptable_mean(record.mean, record.stdev, n_ref, submission_runs))
        record.max_speedup = record.mean / record.min_epochs


# The key of a record's N in the files rcpforge writes: a campaign's own benchmark is
# unknown to the checker, which reads only Benchmark, BS, Hyperparams and the runs.
RUNS_KEY = "rcpforge_submission_runs"


def carried_runs(raw: Any) -> int | None:
    """The N that rcpforge's records carry (None where they carry none)."""
    carried = {body.get(RUNS_KEY) for body in raw.values() if isinstance(body, dict)} - {None} \
        if isinstance(raw, dict) else set()
    if len(carried) > 1:
        raise RcpError(f"the records disagree on {RUNS_KEY} ({sorted(map(str, carried))}); give --submission-runs N")
    n = next(iter(carried), None)
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


def _submission_runs(raw: dict, benchmark: str, given: int | None, unknown: int | None) -> int:
    """N of the benchmark's submissions: `given` (an override), else the checker's own,
    else (for a benchmark the checker does not know) `unknown` (the user's
    --submission-runs) or what rcpforge's records carry."""
    if given is not None:
        return given
    if benchmark in SUBMISSION_RUNS:
        return SUBMISSION_RUNS[benchmark]
    if unknown is not None:
        return unknown
    if (n := carried_runs(raw)) is not None:
        return n
    raise RcpError(f"benchmark {benchmark!r} is not one the checker knows, so its runs per submission (N) are "
                   f"unknown: give --submission-runs N (RCP files written by rcpforge analyze carry it)")


class RcpSet:
    """The records of one benchmark, in the checker's batch-size order, with both passes
    (`full` and `pruned`)."""

    def __init__(self, raw: dict, benchmark: str, submission_runs: int | None = None, prune: str = "mlperf",
                 unknown_runs: int | None = None):
        if prune not in PRUNE_MODES:
            raise RcpError(f"prune {prune!r} is not allowed; allowed: {', '.join(PRUNE_MODES)}")
        self.benchmark = benchmark
        self.submission_runs = _submission_runs(raw, benchmark, submission_runs, unknown_runs)
        self.warnings: list[str] = []
        records = []
        for name, body in raw.items():
            if body["Benchmark"] != benchmark:
                self.warnings.append(f"RCP {name} is for benchmark {body['Benchmark']!r}, not {benchmark!r}")
            records.append(Record(name, body["Benchmark"], body["BS"], body["Hyperparams"],
                                  list(body[convergence_key(body["Benchmark"])]), raw=body))
        if len({r.benchmark for r in records}) > 1:
            self.warnings.append("RCPs in the file are for different benchmarks")
        self.full: dict[str, Record] = {r.name: r for r in sorted(records, key=lambda r: r.bs)}
        for record in self.full.values():
            _stats(record, self.submission_runs)
        kept = prune_mlperf(list(self.full.values()), self.interpolate) if prune == "mlperf" else prune_envelope(list(self.full.values()))
        self.pruned = _select(self.full, kept)

    # Construction -----------------------------------------------------------------
    @classmethod
    def from_file(cls, path: Path, benchmark: str | None = None, **kw) -> "RcpSet":
        raw = json.loads(Path(path).read_text())
        if not isinstance(raw, dict) or not raw:
            raise RcpError(f"{path}: not an RCP file (expected a non-empty JSON object of records)")
        if benchmark is None:
            benchmark = next(iter(raw.values()))["Benchmark"]
        return cls(raw, benchmark, **kw)

    @classmethod
    def from_ruleset(cls, ruleset: str, benchmark: str, **kw) -> "RcpSet":
        path = ruleset_file(ruleset, benchmark)
        if not path.exists():
            raise RcpError(f"ruleset {ruleset} ships no RCPs for benchmark {benchmark!r}")
        return cls.from_file(path, benchmark, **kw)

    # Lookups (the checker's `_find_*`) ------------------------------------------------
    def records(self, rcp_pass: str = "pruned") -> dict[str, Record]:
        if rcp_pass not in ("pruned", "full"):
            raise RcpError(f"rcp pass {rcp_pass!r} is not allowed; allowed: pruned, full")
        return self.pruned if rcp_pass == "pruned" else self.full

    def find(self, bs: Any, rcp_pass: str) -> Record | None:
        return next((r for r in self.records(rcp_pass).values() if r.bs == bs), None)

    def smallest(self, rcp_pass: str) -> Record | None:
        best, best_bs = None, 1e9
        for r in self.records(rcp_pass).values():
            if r.bs < best_bs:
                best, best_bs = r, r.bs
        return best

    def below(self, bs: Any, rcp_pass: str) -> Record | None:
        """Nearest record with 0 < BS < bs (first of equals)."""
        best, best_bs = None, 0
        for r in self.records(rcp_pass).values():
            if r.bs < bs and r.bs > best_bs:
                best, best_bs = r, r.bs
        return best

    def above(self, bs: Any, rcp_pass: str) -> Record | None:
        """Nearest record with bs < BS < 1e9 (first of equals)."""
        best, best_bs = None, 1e9
        for r in self.records(rcp_pass).values():
            if r.bs > bs and r.bs < best_bs:
                best, best_bs = r, r.bs
        return best

    def interpolate(self, bs: Any, low: Record, high: Record) -> Record:
        """Mean and stdev linear in batch size; the reference count is 2N."""
        mean = np.interp(bs, [low.bs, high.bs], [low.mean, high.mean])
        stdev = np.interp(bs, [low.bs, high.bs], [low.stdev, high.stdev])
        m_star = np.float64(min_acceptable_mean(mean, stdev, self.submission_runs * 2, self.submission_runs))
        with np.errstate(all="ignore"):
            speedup = mean / m_star
        return Record(f"{self.benchmark}_interp_{bs}", self.benchmark, bs, {}, [], mean, stdev, m_star, speedup, True)

    def differences(self) -> tuple[list[str], list[str]]:
        """Records kept by one pruning mode and not the other: (mlperf only, envelope only)."""
        full = list(self.full.values())
        mlperf = set(_select(self.full, prune_mlperf(full, self.interpolate)))
        envelope = set(_select(self.full, prune_envelope(full)))
        return sorted(mlperf - envelope), sorted(envelope - mlperf)


def _drop_below_fastest(records: list[Record]) -> list[Record]:
    fastest = min(records, key=lambda r: r.mean)
    return [r for r in records if r.bs >= fastest.bs]


def prune_mlperf(records: list[Record], interpolate) -> list[Record]:
    """The checker's pruning: drop batch sizes below the fastest mean, then one pass that
    removes point i when its mean is above the interpolation of its current neighbours,
    re-testing the same position after a removal but never stepping further back."""
    points = _drop_below_fastest(records)
    i = 1
    while i < len(points) - 1:
        if points[i].mean > interpolate(points[i].bs, points[i - 1], points[i + 1]).mean:
            del points[i]
        else:
            i += 1
    return points


def prune_envelope(records: list[Record]) -> list[Record]:
    """The true lower convex envelope of (BS, mean) after the same first step; points
    on a straight edge are kept, as the checker keeps them."""
    hull: list[Record] = []
    for p in _drop_below_fastest(records):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            cross = (b.bs - a.bs) * (p.mean - a.mean) - (b.mean - a.mean) * (p.bs - a.bs)
            if cross < 0:  # b lies above the segment a-p
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def _select(full: dict[str, Record], kept: Iterable[Record]) -> dict[str, Record]:
    """The checker keeps every record that shares benchmark and BS with a kept point."""
    out: dict[str, Record] = {}
    for k in kept:
        for name, r in full.items():
            if r.benchmark == k.benchmark and r.bs == k.bs:
                out[name] = r
    return out


def with_405b_slack(record: Record, ruleset: str, benchmark: str) -> Record:
    """The checker's rule for Llama3.1-405B (it rewrites the record's max speedup before
    the test)."""
    if version_at_least(ruleset, "5.0.0") and benchmark == "llama31_405b":
        with np.errstate(all="ignore"):
            return replace(record, max_speedup=record.mean / (record.min_epochs - SLACK_405B))
    return record


def load_rcp_sets(source: str, benchmark: str | None = None, prune: str = "mlperf",
                  unknown_runs: int | None = None) -> list[RcpSet]:
    """FILE_OR_RULESET: an RCP JSON file, or a ruleset version whose shipped files are read."""
    if source not in RULESETS and not Path(source).exists():
        raise RcpError(f"{source!r} is neither an RCP file nor a ruleset; rulesets: {', '.join(RULESETS)}")
    if source in RULESETS:
        folder = ruleset_folder(source)
        names = sorted(p.stem[len("rcps_"):] for p in folder.glob("rcps_*.json"))
        names = [n for n in names if n in SUBMISSION_RUNS and (benchmark is None or n == benchmark)]
        if not names:
            raise RcpError(f"ruleset {source} ships no RCPs for benchmark {benchmark!r}; it has: "
                           + ", ".join(p.stem[5:] for p in sorted(folder.glob('rcps_*.json'))))
        return [RcpSet.from_ruleset(source, n, prune=prune) for n in names]
    try:
        rcp_set = RcpSet.from_file(Path(source), benchmark, prune=prune, unknown_runs=unknown_runs)
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise RcpError(f"{source}: not a readable RCP file ({type(err).__name__}: {err})") from err
    return [rcp_set]


def stats_rows(rcp_set: RcpSet) -> list[dict]:
    """Per record: the checker's statistics and whether each pruning keeps it."""
    full = list(rcp_set.full.values())
    mlperf = _select(rcp_set.full, prune_mlperf(full, rcp_set.interpolate))
    envelope = _select(rcp_set.full, prune_envelope(full))
    return [
        {"benchmark": rcp_set.benchmark, "record": name, "batch_size": r.bs, "runs": len(r.epochs),
         "mean": float(r.mean), "stdev": float(r.stdev), "min_acceptable_mean": float(r.min_epochs),
         "max_speedup": float(r.max_speedup), "kept_by_pruning": name in mlperf,
         "kept_by_envelope": name in envelope}
        for name, r in rcp_set.full.items()
    ]
