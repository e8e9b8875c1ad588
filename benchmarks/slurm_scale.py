"""A campaign of many instant runs on the dev Slurm within a queue limit, against what a
user writes by hand: plain submitit `map_array` in chunks, waiting for each chunk.

    PYTHONPATH=. python benchmarks/slurm_scale.py [--runs 2000] [--limit 200] [--parts rcpforge,submitit]
        [--partition debug]

rcpforge: one `run_campaign` in this process (the orchestrator), the no-op trainer
(benchmarks/noop_trainer.py) on `backend: slurm` with `max_queued: <limit>` (the campaign's
own ceiling: the window a QOS of <limit> submitted jobs gives); every run recorded in
MLflow (a SQLite store), each job a Slurm array task. Baseline: submitit's SlurmExecutor
and `map_array` of a function that returns at once, <limit> tasks a chunk, each chunk
waited for before the next (submitit has no limit of its own: its docs leave chunking to
the user). Both on the same cluster (`sinfo` shows how many CPUs it has; the dev Slurm
runs as many jobs at once as the machine has cores).

Instant jobs on the dev Slurm's `debug` partition (one job a CPU) measure its scheduler
more than either part: a freed CPU waits for the next scheduling pass (about one a second,
and a backfill pass every 2 s), so a part's wall time turns on where its jobs' few tenths
of a second fall between passes. `--partition preemptible-requeue` (four jobs a CPU) keeps
eight jobs running on the two CPUs, so that the jobs' own cost decides.

Printed: wall time, runs per minute, the most jobs in `squeue` at once (polled every
0.2 s), and for rcpforge the orchestrator's CPU time and peak memory (this process's
rusage: the Slurm jobs are other processes), then the ratio of the wall times. Where
accounting answers (`make slurm-up-accounting`), each part's jobs as sacct saw them: the mean
time a job ran (start to end) and the time a job slot of the partition stood idle between
jobs (its CPUs x the jobs a CPU takes x the wall time, less the jobs' run times, a job):
where the wall times differ. And each part's jobs' own CPU: every job's Python writes its
`getrusage` at exit (benchmarks/job_cpu/sitecustomize.py, put on the jobs' Python path).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers.queue_peak import QueuePeak  # noqa: E402


def campaign_data(runs: int, limit: int, partition: str) -> dict:
    """orchestration_overhead.py's no-op campaign, on Slurm within `limit` jobs queued."""
    from benchmarks.orchestration_overhead import campaign_data as noop_campaign

    data = noop_campaign(runs, {"kind": "slurm", "time_min": 10, "max_queued": limit, "partition": partition})
    data["name"] = f"slurm-scale-{runs}"
    return data


def time_rcpforge(runs: int, limit: int, partition: str, folder: Path) -> dict:
    from rcpforge.orchestrator.campaign import run_campaign
    from rcpforge.orchestrator.tracking import Tracking
    from rcpforge.sweeps.spec import parse_campaign

    campaign = parse_campaign(campaign_data(runs, limit, partition), folder)
    Tracking(campaign.tracking_uri).client.search_experiments()  # the store's schema, outside the timing
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    with QueuePeak() as queue:
        start = time.perf_counter()
        summary = run_campaign(campaign)
        wall = time.perf_counter() - start
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    assert summary.statuses["converged"] == runs, summary.statuses
    return {"wall_s": wall, "peak_queued": queue.peak,
            "orchestrator_cpu_s": (cpu.ru_utime + cpu.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime),
            "orchestrator_peak_rss_mb": cpu.ru_maxrss / 1024}


def _instant(i: int) -> int:
    return i


def time_submitit(runs: int, limit: int, partition: str, folder: Path) -> dict:
    import submitit

    executor = submitit.SlurmExecutor(folder=str(folder / "submitit"))
    executor.update_parameters(time=10, ntasks_per_node=1, cpus_per_task=1, partition=partition)
    with QueuePeak() as queue:
        start = time.perf_counter()
        done = 0
        for first in range(0, runs, limit):
            jobs = executor.map_array(_instant, list(range(first, min(first + limit, runs))))
            done += sum(1 for job in jobs if job.result() is not None)
        wall = time.perf_counter() - start
    assert done == runs
    return {"wall_s": wall, "peak_queued": queue.peak}


def job_slots(partition: str, cpus: int) -> int:
    """The jobs the partition runs at once: its CPUs, times N where it shares each (OverSubscribe=FORCE:N)."""
    text = subprocess.run(["scontrol", "show", "partition", partition], capture_output=True, text=True).stdout
    found = re.search(r"OverSubscribe=(?:FORCE|YES):(\d+)", text)
    return cpus * (int(found.group(1)) if found else 1)


def job_figures(since: datetime.datetime, wall_s: float, slots: int) -> str:
    """The jobs submitted since `since`, as accounting saw them (empty where it does not
    answer). Start and end are whole seconds: means over many jobs only."""
    stamp = since.strftime("%Y-%m-%dT%H:%M:%S")
    proc = subprocess.run(["sacct", "-n", "-P", "-S", stamp, "-X", "-o", "Submit,Start,End,State"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return ""
    ran = []
    for line in proc.stdout.splitlines():
        submit, start, end, state = line.split("|")
        if submit >= stamp and state.startswith("COMPLETED"):
            ran.append((datetime.datetime.fromisoformat(end) - datetime.datetime.fromisoformat(start)).total_seconds())
    if not ran:
        return ""
    idle = (slots * wall_s - sum(ran)) / len(ran)
    return f"{len(ran)} jobs: each ran {sum(ran) / len(ran):.2f} s, a slot idle {idle:.2f} s between jobs (means)"


def jobs_cpu(folder: Path) -> str:
    """The mean CPU of the jobs' Python processes that wrote to `folder`."""
    used = [float(path.read_text()) for path in folder.iterdir()]
    return f"their Python: {sum(used) / len(used):.3f} s of CPU a job (mean of {len(used)})" if used else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--limit", type=int, default=200, help="jobs queued at once (rcpforge's max_queued, "
                                                                 "the baseline's chunk)")
    parser.add_argument("--parts", default="rcpforge,submitit")
    parser.add_argument("--partition", default="debug", help="the Slurm partition of both parts' jobs")
    args = parser.parse_args()
    parts = args.parts.split(",")
    if args.runs < 2 or args.runs % 2:
        parser.error(f"--runs: an even number of runs, 2 or more (two batch sizes); got {args.runs}")
    if args.limit < 1:
        parser.error(f"--limit: the jobs queued at once, 1 or more; got {args.limit}")
    if unknown := [p for p in parts if p not in ("rcpforge", "submitit")]:
        parser.error(f"--parts: rcpforge, submitit or both (comma-separated); got {', '.join(unknown)}")
    from rcpforge.cluster.backend import BackendError
    from rcpforge.cluster.slurm_states import preflight

    try:
        preflight(args.partition)  # the cluster is up and has the partition
    except BackendError as err:
        parser.error(f"--partition: {str(err).removeprefix('backend.partition: ')}")
    cpus = subprocess.run(["sinfo", "-h", "-o", "%D x %c CPUs"], capture_output=True, text=True).stdout.split("\n")[0]
    print(f"{args.runs} instant runs, at most {args.limit} jobs queued, dev Slurm of {cpus}, "
          f"partition {args.partition}, {os.cpu_count()} cores here")
    found = {}
    slots = job_slots(args.partition, int(cpus.split(" x ")[0]) * int(cpus.split(" x ")[1].split()[0]))
    # The jobs inherit this environment (sbatch exports it): each writes its CPU to a folder.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent / "job_cpu"),
                                                              os.environ.get("PYTHONPATH")]))
    for part in parts:
        since = datetime.datetime.now().replace(microsecond=0)
        with tempfile.TemporaryDirectory(dir=Path.home()) as folder:  # a folder the Slurm jobs see
            os.environ["RCPF_JOB_CPU_DIR"] = str(Path(folder) / "cpu")
            Path(folder, "cpu").mkdir()
            timed = time_rcpforge if part == "rcpforge" else time_submitit
            found[part] = timed(args.runs, args.limit, args.partition, Path(folder))
            cpu_line = jobs_cpu(Path(folder) / "cpu")
        figures = found[part]
        line = (f"{part:9s} wall {figures['wall_s']:8.1f} s  {args.runs / figures['wall_s'] * 60:7.1f} runs/min  "
                f"peak queued {figures['peak_queued']:5d}")
        if "orchestrator_cpu_s" in figures:
            line += (f"  orchestrator CPU {figures['orchestrator_cpu_s']:.1f} s, "
                     f"peak memory {figures['orchestrator_peak_rss_mb']:.0f} MB")
        print(line, flush=True)
        if jobs := job_figures(since, figures["wall_s"], slots):
            print(f"{'':9s} {jobs}", flush=True)
        if cpu_line:
            print(f"{'':9s} {cpu_line}", flush=True)
    if {"rcpforge", "submitit"} <= found.keys():
        print(f"ratio rcpforge / submitit wall time: {found['rcpforge']['wall_s'] / found['submitit']['wall_s']:.2f}")


if __name__ == "__main__":
    main()
