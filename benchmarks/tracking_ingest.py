"""Eval points per second logged to MLflow: rcpforge's batching RunLog against what a
user who read MLflow's docs would write, one call per eval point with all of its
metrics (`MlflowClient.log_batch`, `mlflow.log_metrics`), and against one `log_metric`
call per value; side by side on a SQLite store and on an MLflow tracking server backed
by PostgreSQL (started here through cluster/dev/mlflow_server.sh and stopped at the
end, or a running one named by --tracking-url). Every figure and ratio is measured in
the same run, the ways alternating.

    python benchmarks/tracking_ingest.py [--runs 8] [--points 50] [--repeat 3] [--stores sqlite,server]
                                         [--tracking-url http://127.0.0.1:5055]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import mlflow  # noqa: E402
from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import Metric  # noqa: E402

from rcpforge.cluster.gang import free_port  # noqa: E402
from rcpforge.orchestrator.tracking import RunLog  # noqa: E402
from rcpforge.trainers.contract import EvalPoint  # noqa: E402

METRICS_PER_POINT = 3  # eval_loss and eval_excess_loss, as the tiny LM reports, and the samples count
SERVER_SCRIPT = ROOT / "cluster" / "dev" / "mlflow_server.sh"


def _values(p: int) -> dict[str, float]:
    """Eval point `p`'s metrics: eval_loss and eval_excess_loss, and the samples count."""
    return {"eval_loss": 3.0 - p * 0.01, "eval_excess_loss": 1.0 - p * 0.01, "samples": float(p + 1)}


def per_call(client: MlflowClient, run_ids: list[str], points: int) -> float:
    """The same eval points as `batched` writes (at step = tokens), one `log_metric`
    call per value."""
    start = time.perf_counter()
    for run_id in run_ids:
        for p in range(points):
            for key, value in _values(p).items():
                client.log_metric(run_id, key, value, step=(p + 1) * 1000)
    return time.perf_counter() - start


def per_point_batch(client: MlflowClient, run_ids: list[str], points: int) -> float:
    """One `MlflowClient.log_batch` call per eval point, with all of its metrics."""
    start = time.perf_counter()
    for run_id in run_ids:
        for p in range(points):
            stamp = int(time.time() * 1000)
            client.log_batch(run_id, metrics=[Metric(key, value, stamp, (p + 1) * 1000)
                                              for key, value in _values(p).items()])
    return time.perf_counter() - start


def per_point_fluent(uri: str, run_ids: list[str], points: int) -> float:
    """One `mlflow.log_metrics` call per eval point (the fluent API, run named by id)."""
    mlflow.set_tracking_uri(uri)
    start = time.perf_counter()
    for run_id in run_ids:
        for p in range(points):
            mlflow.log_metrics(_values(p), step=(p + 1) * 1000, run_id=run_id)
    return time.perf_counter() - start


def batched(uri: str, run_ids: list[str], points: int, folder: Path) -> float:
    """Includes what a worker pays besides the points: opening its RunLog (a client and
    the reads of what an earlier attempt logged) and the final flush."""
    start = time.perf_counter()
    for r, run_id in enumerate(run_ids):
        log = RunLog(uri, run_id, "eval_excess_loss", folder / str(r))
        for p in range(points):
            log.eval_point(EvalPoint(tokens=(p + 1) * 1000, samples=p + 1,
                                     metrics={"eval_loss": 3.0 - p * 0.01, "eval_excess_loss": 1.0 - p * 0.01}))
        log.flush()
    return time.perf_counter() - start


WAYS = ("log_metric per value", "log_metrics per point", "log_batch per point", "rcpforge RunLog")


def measure(uri: str, runs: int, points: int, folder: Path, repeat: int) -> list[dict[str, float]]:
    """Seconds of each of WAYS for runs x points eval points on `uri`, once per repeat,
    the ways alternating so that all see the same disk and machine load (on a shared
    machine SQLite's per-call cost, one fsync per call, varies several-fold); the
    store's schema and experiment are made first, outside the timing."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment(f"ingest-{uuid.uuid4().hex[:8]}", artifact_location=(folder / "art").as_uri())

    def new_runs(tag: str) -> list[str]:
        return [client.create_run(exp, run_name=f"{tag}-{r}").info.run_id for r in range(runs)]

    times = []
    for i in range(repeat):
        times.append({
            WAYS[0]: per_call(client, new_runs(f"per-call{i}"), points),
            WAYS[1]: per_point_fluent(uri, new_runs(f"fluent{i}"), points),
            WAYS[2]: per_point_batch(client, new_runs(f"batch{i}"), points),
            WAYS[3]: batched(uri, new_runs(f"runlog{i}"), points, folder / str(i)),
        })
    return times


@contextmanager
def tracking_server(folder: Path) -> Iterator[str]:
    """A PostgreSQL-backed MLflow server of our own, stopped (with its PostgreSQL) on exit."""
    env = {**os.environ, "RCPF_MLFLOW_DIR": str(folder), "RCPF_MLFLOW_PORT": str(free_port()),
           "RCPF_PG_PORT": str(free_port()), "PYTHON": sys.executable}
    started = subprocess.run(["bash", str(SERVER_SCRIPT), "start"], env=env, capture_output=True, text=True)
    try:
        if started.returncode != 0:
            sys.exit(f"tracking_ingest: {SERVER_SCRIPT.name} start failed: {started.stderr.strip()[-500:]}")
        yield f"http://127.0.0.1:{env['RCPF_MLFLOW_PORT']}"
    finally:
        subprocess.run(["bash", str(SERVER_SCRIPT), "stop"], env=env, capture_output=True)


def _rows(store: str, n: int, times: list[dict[str, float]]) -> list[str]:
    """Each way's median over the repeats, and RunLog's speedup over it: the median of
    the per-repeat ratios (their range)."""
    rows = []
    for way in WAYS:
        t = statistics.median(m[way] for m in times)
        ratios = [m[way] / m[WAYS[-1]] for m in times]
        rows.append(f"{store:<26} {way:<22} {n / t:9.1f} pts/s ({t:6.2f} s)   "
                    f"{statistics.median(ratios):6.1f}x ({min(ratios):.1f}-{max(ratios):.1f}x)")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--points", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3, help="measurements per store (medians are shown)")
    parser.add_argument("--stores", default="sqlite,server", help="comma-separated: sqlite, server")
    parser.add_argument("--tracking-url", help="a running MLflow tracking server to use instead of starting one")
    args = parser.parse_args()
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    unknown = set(stores) - {"sqlite", "server"}
    if unknown:
        parser.error(f"--stores: unknown store {sorted(unknown)[0]!r}; allowed: sqlite, server")
    n = args.runs * args.points
    rows = []
    with tempfile.TemporaryDirectory(prefix="rcpforge-ingest-") as tmp:
        if "sqlite" in stores:
            times = measure(f"sqlite:///{tmp}/bench.db", args.runs, args.points, Path(tmp, "sqlite"), args.repeat)
            rows += _rows("sqlite store", n, times)
        if "server" in stores:
            if args.tracking_url:
                times = measure(args.tracking_url, args.runs, args.points, Path(tmp, "server"), args.repeat)
                rows += _rows("tracking server (given)", n, times)
            else:
                os.chmod(tmp, 0o755)  # the server script's PostgreSQL runs as postgres
                with tracking_server(Path(tmp, "mlflow")) as url:
                    times = measure(url, args.runs, args.points, Path(tmp, "server"), args.repeat)
                rows += _rows("tracking server (postgres)", n, times)
    print(f"{args.runs} runs x {args.points} eval points ({METRICS_PER_POINT} metrics each), eval points per second")
    print(f"medians of {args.repeat} measurements; RunLog's speedup over each way: median of the per-measurement "
          "ratios (their range)")
    print(f"{'store':<26} {'way':<22} {'eval points a second':>27}   RunLog's speedup")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
