"""From a campaign's runs to the RCP table and MLCommons-format RCP files.

Per (recipe, batch size): how many runs, how many converged, and the checker's
statistics over the converged runs' samples to converge. An RCP is written only from a
complete cell (every run converged), as real RCPs are; an incomplete cell is reported
with its counts and no statistics, so a failed seed never silently shrinks an RCP."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from analysis.rcp import rcp_stats
from analysis.rcp_set import convergence_key

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
    ]
)


def rcp_table(runs: pa.Table, benchmark: str, submission_runs: int) -> pa.Table:
    rows: dict[str, list] = {name: [] for name in TABLE_SCHEMA.names}
    cells = sorted({(r, b) for r, b in zip(runs["recipe"].to_pylist(), runs["batch_size"].to_pylist())})
    for recipe, bs in cells:
        cell = runs.filter(pc.and_(pc.equal(runs["recipe"], recipe), pc.equal(runs["batch_size"], bs)))
        status = cell["status"].to_pylist()
        counts = {s: status.count(s) for s in OUTCOMES}
        values = [v for s, v in zip(status, cell["samples_to_target"].to_pylist()) if s == "converged"]
        stats = None
        if counts["converged"] == len(status) and len(values) > 2:
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
    return pa.table(rows, schema=TABLE_SCHEMA)


def rcp_records(runs: pa.Table, recipe: str, benchmark: str, hparams_by_bs: dict[int, dict]) -> dict:
    """MLCommons RCP JSON records of one recipe: one per complete batch size."""
    key = convergence_key(benchmark)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    records = {}
    cell_runs = runs.filter(pc.equal(runs["recipe"], recipe))
    for bs in sorted(set(cell_runs["batch_size"].to_pylist())):
        cell = cell_runs.filter(pc.equal(cell_runs["batch_size"], bs))
        status = cell["status"].to_pylist()
        if any(s != "converged" for s in status) or len(status) < 3:
            continue
        records[f"{benchmark}_ref_{bs}"] = {
            "Benchmark": benchmark,
            "Creator": "rcpforge",
            "When": when,
            "Platform": "rcpforge campaign",
            "Precision": recipe,
            "BS": bs,
            "Hyperparams": hparams_by_bs.get(bs, {}),
            key: sorted(int(v) if float(v).is_integer() else v for v in cell["samples_to_target"].to_pylist()),
        }
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
