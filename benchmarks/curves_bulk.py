"""Reading a campaign's eval curves: `Campaign.curves()` (analysis/curves.py: one SQL query
of a SQLite store, a bulk request per 100 runs of a tracking server) against the per-run
loop that analysis/curves.py ran before, `MlflowClient.get_metric_history` once per run
and metric, given the run ids. The loop reads the same points as curves(): the eval
metric, and the samples logged beside it ("loop, eval + samples"); the loop of the eval
metric alone, half of that data, is shown too. Both on a SQLite store and on an MLflow
tracking server on PostgreSQL (started here through cluster/dev/mlflow_server.sh and
stopped at the end, or a running one named by --tracking-url), in one run.

The store is filled first (not timed) with `log_batch`, a call per run: tags as the
orchestrator writes them, `--points` eval points (eval_accuracy and samples at step =
tokens).

    python benchmarks/curves_bulk.py [--runs 1000] [--points 50] [--repeat 3] [--stores sqlite,server]
                                     [--tracking-url http://127.0.0.1:5055]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import Metric, RunTag  # noqa: E402

from benchmarks.tracking_ingest import tracking_server  # noqa: E402
from rcpforge.analysis.curves import load_curves  # noqa: E402
from rcpforge.orchestrator.tracking import sqlite_uri  # noqa: E402
from rcpforge.trainers.contract import schema as ts  # noqa: E402

METRIC = "eval_accuracy"
TOKENS_PER_SAMPLE = 8


def fill(uri: str, campaign: str, runs: int, points: int, folder: Path) -> list[str]:
    """`runs` runs of `points` eval points each; their ids. Four writers on a server."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment(campaign, artifact_location=folder.resolve().as_uri())

    def one(i: int) -> str:
        recipe, bs, seed = ("bf16", "fp8")[i % 2], (16, 64)[i // 2 % 2], i // 4
        tags = {ts.TAG_CAMPAIGN: campaign, ts.TAG_ROLE: "campaign", ts.TAG_RUN_KEY: f"key{i:05d}",
                ts.TAG_RECIPE: recipe, ts.TAG_BATCH_SIZE: str(bs), ts.TAG_SEED: str(seed),
                ts.TAG_TARGET_METRIC: METRIC, ts.TAG_STATUS: "converged"}
        run_id = client.create_run(exp, run_name=f"{recipe}-bs{bs}-s{seed}").info.run_id
        metrics = []
        for p in range(1, points + 1):
            tokens = p * bs * 1024
            metrics += [Metric(METRIC, 1.0 - 1.0 / (p + i % 7), 0, tokens),
                        Metric("samples", float(tokens // TOKENS_PER_SAMPLE), 0, tokens)]
        for start in range(0, len(metrics), 1000):  # MLflow's limit a batch
            client.log_batch(run_id, metrics=metrics[start:start + 1000],
                             tags=[RunTag(k, v) for k, v in tags.items()] if start == 0 else [])
        return run_id

    with ThreadPoolExecutor(4 if uri.startswith("http") else 1) as pool:
        return list(pool.map(one, range(runs)))


def per_run(uri: str, run_ids: list[str], metrics: tuple[str, ...]) -> tuple[float, int]:
    """The loop: a `get_metric_history` call per run and metric. (seconds, points)"""
    client = MlflowClient(tracking_uri=uri)
    start = time.perf_counter()
    found = sum(len(client.get_metric_history(run_id, m)) for run_id in run_ids for m in metrics)
    return time.perf_counter() - start, found


def bulk(uri: str, campaign: str) -> tuple[float, int]:
    """`Campaign.curves_arrow()`'s read: every eval point with its samples. (seconds, rows)"""
    start = time.perf_counter()
    table = load_curves(uri, campaign)
    return time.perf_counter() - start, table.num_rows


def run_list(uri: str, campaign: str) -> tuple[float, int]:
    """The part of curves() that gives it the runs' facts: the campaign's runs read in one
    paged search (on a server, MLflow's `search_runs`). (seconds, runs)"""
    from rcpforge.analysis.load import StoreReader

    start = time.perf_counter()
    store = StoreReader(uri)
    found = sum(1 for _ in store.runs(store.experiment_id(campaign), "campaign"))
    return time.perf_counter() - start, found


def measure(uri: str, runs: int, points: int, folder: Path, repeat: int) -> list[dict[str, float]]:
    campaign = f"curves-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    run_ids = fill(uri, campaign, runs, points, folder)
    print(f"  filled {runs} runs x {points} points in {time.perf_counter() - started:.1f} s", flush=True)
    times = []
    for _ in range(repeat):  # the ways alternate, so a load on the machine weighs on each alike
        t_bulk, rows = bulk(uri, campaign)
        t_list, listed = run_list(uri, campaign)  # measured apart: a second read of the same runs
        t_both, both = per_run(uri, run_ids, (METRIC, "samples"))
        t_eval, one = per_run(uri, run_ids, (METRIC,))
        if not rows == one == both // 2 == runs * points or listed != runs:
            sys.exit(f"curves_bulk: read {rows} rows in bulk, {one} and {both} points in the loops; "
                     f"expected {runs * points}")
        times.append({"bulk": t_bulk, "eval": t_eval, "both": t_both, "list": t_list})
        print(f"  bulk {t_bulk:.2f} s (the run list alone: {t_list:.2f} s), loop eval {t_eval:.2f} s, "
              f"loop eval + samples {t_both:.2f} s", flush=True)
    return times


def rows_of(store: str, times: list[dict[str, float]]) -> list[str]:
    med = {k: statistics.median(t[k] for t in times) for k in times[0]}
    ratios = {k: [t[k] / t["bulk"] for t in times] for k in ("eval", "both")}
    cells = [f"{med[k]:7.2f} s  {med[k] / med['bulk']:6.1f}x ({min(ratios[k]):.1f}-{max(ratios[k]):.1f}x)"
             for k in ("both", "eval")]
    rows = [f"{store:<28}{med['bulk']:7.2f} s    {cells[0]}    {cells[1]}"]
    if store.startswith("tracking server"):  # on SQL, curves() reads the runs' facts in its one query
        rows.append(f"{'':<28}of curves(): the run list (one paged search_runs, the runs' facts) about "
                    f"{med['list']:.2f} s, which the loops, given the run ids, skip; the points about "
                    f"{med['bulk'] - med['list']:.2f} s")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--points", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,server", help="comma-separated: sqlite, server")
    parser.add_argument("--tracking-url", help="a running MLflow tracking server to use instead of starting one")
    args = parser.parse_args()
    stores = args.stores.split(",")
    if unknown := set(stores) - {"sqlite", "server"}:
        parser.error(f"--stores: unknown store {sorted(unknown)[0]!r}; allowed: sqlite, server")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if "sqlite" in stores:
            print("sqlite store", flush=True)
            times = measure(sqlite_uri(Path(tmp, "mlflow.db")), args.runs, args.points, Path(tmp, "a"), args.repeat)
            rows += rows_of("sqlite store", times)
        if "server" in stores:
            print("tracking server", flush=True)
            if args.tracking_url:
                rows += rows_of("tracking server (given)",
                                measure(args.tracking_url, args.runs, args.points, Path(tmp, "s"), args.repeat))
            else:
                os.chmod(tmp, 0o755)  # the server script's PostgreSQL runs as postgres
                with tracking_server(Path(tmp, "mlflow")) as url:
                    times = measure(url, args.runs, args.points, Path(tmp, "s"), args.repeat)
                rows += rows_of("tracking server (postgres)", times)
    print(f"\n{args.runs} runs x {args.points} eval points; medians of {args.repeat} measurements, "
          "speedup of curves() over each loop: of the medians (range over the measurements)")
    print(f"{'store':<28}{'curves()':>9}    {'loop, eval + samples':<34}{'loop, eval only'}")
    print("\n".join(rows))
    print("target: curves() at least 20x the per-run loop on each store")


if __name__ == "__main__":
    main()
