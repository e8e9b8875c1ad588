"""From a campaign's runs to the RCP table and MLCommons-format RCP files.

Per (recipe, batch size): how many runs, how many converged, and the checker's
statistics over the converged runs' samples to converge. An RCP is written only from a
complete cell (every run converged), as real RCPs are; an incomplete cell is reported
with its counts and no statistics, so a failed seed never silently shrinks an RCP.

A complete cell of fewer than 2N runs still gets its record, but it is not an RCP by the
rules: the table says so (`is_rcp`, `note`) and so does its record (`rcpforge_note`, a
key the checker does not read). Statistics the checker computes but that say nothing
(a t-test without degrees of freedom, whatever the stdev, a bisection that ends at 0)
are flagged `degenerate`, with the reason in the note: one rule, `rcpforge.analysis.rcp.cell_marks`,
which `check` applies to the RCP it tests against."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from rcpforge.analysis.mixtures import mixture_of, recorded_hyperparams
from rcpforge.analysis.rcp import not_an_rcp, rcp_stats, trimmed_count
from rcpforge.analysis.rcp_set import RUNS_KEY, convergence_key

OUTCOMES = ("converged", "not_converged", "diverged")

TABLE_SCHEMA = pa.schema(
    [
        ("recipe", pa.string()),
        ("batch_size", pa.int64()),
        ("runs", pa.int64()),
        ("converged", pa.int64()),
        ("not_converged", pa.int64()),
        ("diverged", pa.int64()),
        ("pending_or_failed", pa.int64()),
        ("olympic_mean", pa.float64()),
        ("stdev", pa.float64()),
        ("min_acceptable_mean", pa.float64()),
        ("max_speedup", pa.float64()),
        ("is_rcp", pa.bool_()),
        ("degenerate", pa.bool_()),
        ("note", pa.string()),
    ]
)
# The key of a record's note; the checker reads only Benchmark, BS, Hyperparams and the runs.
NOTE_KEY = "rcpforge_note"


def _note(runs: int, converged: int, submission_runs: int, trim: int, stats) -> str | None:
    if converged < runs:
        return f"no RCP record: {converged} of {runs} runs converged"
    if runs < 3:
        return f"no RCP record: {runs} run(s), a record needs at least 3"
    if stats is not None:
        return stats.note  # the one rule of small cells (rcpforge.analysis.rcp.cell_marks)
    parts = [not_an_rcp(runs, submission_runs), f"no statistics: olympic scoring drops {trim} run(s) at each end"]
    return "; ".join(p for p in parts if p)


def rcp_table(runs: pa.Table, benchmark: str, submission_runs: int) -> pa.Table:
    trim = trimmed_count(benchmark)
    rows: dict[str, list] = {name: [] for name in TABLE_SCHEMA.names}
    cells = sorted({(r, b) for r, b in zip(runs["recipe"].to_pylist(), runs["batch_size"].to_pylist())})
    for recipe, bs in cells:
        cell = runs.filter(pc.and_(pc.equal(runs["recipe"], recipe), pc.equal(runs["batch_size"], bs)))
        status = cell["status"].to_pylist()
        counts = {s: status.count(s) for s in OUTCOMES}
        values = [v for s, v in zip(status, cell["samples_to_target"].to_pylist()) if s == "converged"]
        stats = None
        if counts["converged"] == len(status) and len(values) > max(2, 2 * trim):
            stats = rcp_stats(values, bs, benchmark, submission_runs)
        rows["recipe"].append(recipe)
        rows["batch_size"].append(bs)
        rows["runs"].append(len(status))
        for s in OUTCOMES:
            rows[s].append(counts[s])
        rows["pending_or_failed"].append(len(status) - sum(counts.values()))
        rows["olympic_mean"].append(stats.mean if stats else None)
        rows["stdev"].append(stats.stdev if stats else None)
        rows["min_acceptable_mean"].append(stats.min_acceptable_mean if stats else None)
        rows["max_speedup"].append(stats.max_speedup if stats else None)
        rows["is_rcp"].append(stats is not None and len(status) >= 2 * submission_runs)
        rows["degenerate"].append(None if stats is None else stats.degenerate is not None)
        rows["note"].append(_note(len(status), counts["converged"], submission_runs, trim, stats))
    return pa.table(rows, schema=TABLE_SCHEMA)


def rcp_records(runs: pa.Table, recipe: str, benchmark: str, hparams_by_bs: dict[int, dict],
                submission_runs: int | None = None, pool_mixed: bool = False) -> dict:
    """MLCommons RCP JSON records of one recipe: one per complete batch size, whose
    `Hyperparams` are those its runs recorded (`hparams_by_bs` only for a table without
    them); none for a cell of runs of more than one configuration unless `pool_mixed`
    (analysis/mixtures.py). With `submission_runs`, a record of fewer than 2N runs carries
    its `rcpforge_note`."""
    key = convergence_key(benchmark)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    records = {}
    cell_runs = runs.filter(pc.equal(runs["recipe"], recipe))
    for bs in sorted(set(cell_runs["batch_size"].to_pylist())):
        cell = cell_runs.filter(pc.equal(cell_runs["batch_size"], bs))
        status = cell["status"].to_pylist()
        if any(s != "converged" for s in status) or len(status) < 3:
            continue
        if not pool_mixed and mixture_of(runs, recipe, bs) is not None:
            continue
        recorded = "hparams" in runs.column_names
        records[f"{benchmark}_ref_{bs}"] = {
            "Benchmark": benchmark,
            "Creator": "rcpforge",
            "When": when,
            "Platform": "rcpforge campaign",
            "Precision": recipe,
            "BS": bs,
            "Hyperparams": recorded_hyperparams(runs, recipe, bs) if recorded else hparams_by_bs.get(bs, {}),
            key: sorted(int(v) if float(v).is_integer() else v for v in cell["samples_to_target"].to_pylist()),
        }
        if submission_runs:
            # N travels with the record, so `rcp-stats` and `check` read a campaign's own benchmark
            records[f"{benchmark}_ref_{bs}"][RUNS_KEY] = submission_runs
            if note := not_an_rcp(len(status), submission_runs):
                records[f"{benchmark}_ref_{bs}"][NOTE_KEY] = note
    return records


def write_atomic(path: Path, text: str) -> None:
    """Write to a temporary name, then rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual mode
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_rcp_file(path: Path, records: dict) -> None:
    write_atomic(path, json.dumps(records, indent=2) + "\n")


def write_table_csv(path: Path, table: pa.Table) -> None:
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink)
    write_atomic(path, sink.getvalue().to_pybytes().decode())
