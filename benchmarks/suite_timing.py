"""Where the test suite's time goes, from the records tests/helpers/timing.py writes.

    RCPF_TEST_TIMING=/tmp/t.jsonl make test          # or any pytest command line
    .venv/bin/python benchmarks/suite_timing.py /tmp/t.jsonl [--top 15] [--write-durations tests/durations.json]

Prints the session's wall time and how busy the machine's cores were over it; wall and
CPU time per file (the slowest first) and per kind of time; and with --write-durations,
each test file's seconds for tests/helpers/xdist_groups.py to hand out longest first.

The kinds of time, per test: "services" where the test uses a real cluster or server
(the Slurm clusters, a Ray instance, the PostgreSQL-backed MLflow server, the tiny-LM
campaign every worker runs once); then "computing" where its process and reaped children
spent at least half its wall time on a CPU (training, numerics, analysis), else "waiting"
(subprocesses' start-ups, polls, sleeps). A Ray or Slurm daemon's CPU is not a child's:
it counts as waiting. A heuristic, stated as such in RESULTS.md."""

from __future__ import annotations

import argparse
import glob
import json
import sys
from collections import defaultdict
from pathlib import Path

COMPUTING = 0.5  # CPU seconds per wall second at which a test counts as computing


def read(base: str) -> tuple[list[dict], dict | None]:
    records = []
    for path in sorted(glob.glob(f"{base}.*")):
        if path.endswith(".session"):
            continue
        records += [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    session = Path(f"{base}.session")
    return records, (json.loads(session.read_text()) if session.exists() else None)


def kind(record: dict) -> str:
    if record["services"]:
        return "services"
    return "computing" if record["cpu_s"] >= COMPUTING * record["wall_s"] else "waiting"


def summary(records: list[dict], session: dict | None, top: int) -> list[str]:
    lines = []
    wall = sum(r["wall_s"] for r in records)
    cpu = sum(r["cpu_s"] for r in records)
    lines.append(f"{len(records)} tests, {wall:.0f} s of test wall time summed over workers, "
                 f"{cpu:.0f} s CPU of the test processes and their reaped children")
    if session:
        use = session["machine_busy_s"] / (session["cores"] * session["wall_s"])
        lines.append(f"session wall {session['wall_s']:.0f} s; the machine's {session['cores']} cores busy "
                     f"{session['machine_busy_s']:.0f} s of {session['cores'] * session['wall_s']:.0f} s ({use:.0%})")
    workers = defaultdict(float)
    for r in records:
        workers[r["worker"]] += r["wall_s"]
    lines.append("per worker: " + ", ".join(f"{w} {s:.0f} s" for w, s in sorted(workers.items())))
    kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for r in records:
        k = kinds[kind(r)]
        k[0] += r["wall_s"]
        k[1] += r["cpu_s"]
        k[2] += 1
    lines.append("kind of time: " + "; ".join(f"{name} {w:.0f} s wall ({w / wall:.0%}), {c:.0f} s CPU, {n} tests"
                                              for name, (w, c, n) in sorted(kinds.items())))
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for r in records:
        f = files[r["file"]]
        f[0] += r["wall_s"]
        f[1] += r["cpu_s"]
        f[2] += 1
    lines.append(f"the {top} slowest files (wall s, CPU s, tests):")
    for name, (w, c, n) in sorted(files.items(), key=lambda item: -item[1][0])[:top]:
        lines.append(f"  {w:7.1f} {c:7.1f} {n:5d}  {name}")
    return lines + machine_cost(records, top)


def machine_cost(records: list[dict], top: int) -> list[str]:
    """The files that kept the machine busiest while they ran: in a serial run (`-n 0`)
    a test's whole cost, its servers, Slurm jobs, Ray workers and CLI processes with it;
    side by side, the other workers' too (not a cost then)."""
    if not records or "machine_busy_s" not in records[0]:
        return []  # records from before the field
    busy: dict[str, float] = defaultdict(float)
    for r in records:
        busy[r["file"]] += r["machine_busy_s"]
    total = sum(busy.values())
    lines = [f"the {top} files that kept the machine busiest ({total:.0f} s in all; busy CPU s, share):"]
    for name, b in sorted(busy.items(), key=lambda item: -item[1])[:top]:
        lines.append(f"  {b:7.1f} {b / total:5.1%}  {name}")
    return lines


def file_seconds(records: list[dict]) -> dict[str, float]:
    """Each test file's seconds, longest first: tests/helpers/xdist_groups.py sums a
    group's files, so a serial run's records serve as well as a side-by-side one's."""
    files: dict[str, float] = defaultdict(float)
    for r in records:
        files[r["file"]] += r["wall_s"]
    return {name: round(s, 1) for name, s in sorted(files.items(), key=lambda item: -item[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the RCPF_TEST_TIMING path the run was given")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--write-durations", type=Path, help="write each test file's seconds here")
    args = parser.parse_args()
    records, session = read(args.base)
    if not records:
        print(f"error: no timing records at {args.base}.*: run the tests with RCPF_TEST_TIMING={args.base}",
              file=sys.stderr)
        raise SystemExit(2)
    print("\n".join(summary(records, session, args.top)))
    if args.write_durations:
        args.write_durations.write_text(json.dumps(file_seconds(records), indent=1) + "\n")
        print(f"wrote {args.write_durations}")


if __name__ == "__main__":
    main()
