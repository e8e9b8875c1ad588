"""Eval points per second logged to MLflow: rcpforge's batching RunLog against per-call
`log_metric`, side by side on a SQLite store and on an MLflow tracking server backed by
PostgreSQL (started here through cluster/dev/mlflow_server.sh and stopped at the end,
or a running one named by --tracking-url).

    python benchmarks/tracking_ingest.py [--runs 8] [--points 50] [--repeat 3] [--stores sqlite,server]
                                         [--tracking-url http://127.0.0.1:5055]
"""

from __future__ import annotations

import argparse
import os
import socket
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

from mlflow import MlflowClient  # noqa: E402

from orchestrator.tracking import RunLog  # noqa: E402
from trainers.contract import EvalPoint  # noqa: E402

METRICS_PER_POINT = 3  # eval_loss and eval_excess_loss, as the tiny LM reports, and the samples count
SERVER_SCRIPT = ROOT / "cluster" / "dev" / "mlflow_server.sh"


def per_call(client: MlflowClient, run_ids: list[str], points: int) -> float:
    """The same eval points as `batched` writes (its two metrics and the samples count,
    at step = tokens), one `log_metric` call per value."""
    start = time.perf_counter()
    for run_id in run_ids:
        for p in range(points):
            client.log_metric(run_id, "eval_loss", 3.0 - p * 0.01, step=(p + 1) * 1000)
            client.log_metric(run_id, "eval_excess_loss", 1.0 - p * 0.01, step=(p + 1) * 1000)
            client.log_metric(run_id, "samples", float(p + 1), step=(p + 1) * 1000)
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


def measure(uri: str, runs: int, points: int, folder: Path, repeat: int) -> list[tuple[float, float]]:
    """(per-call seconds, RunLog seconds) for runs x points eval points on `uri`, once per
    repeat, the two alternating so that both see the same disk and machine load (on a
    shared machine SQLite's per-call cost, one fsync per call, varies several-fold);
    the store's schema and experiment are made first, outside the timing."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment(f"ingest-{uuid.uuid4().hex[:8]}", artifact_location=(folder / "art").as_uri())

    def new_runs(tag: str) -> list[str]:
        return [client.create_run(exp, run_name=f"{tag}-{r}").info.run_id for r in range(runs)]

    return [(per_call(client, new_runs(f"per-call{i}"), points), batched(uri, new_runs(f"batched{i}"), points, folder))
            for i in range(repeat)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def tracking_server(folder: Path) -> Iterator[str]:
    """A PostgreSQL-backed MLflow server of our own, stopped (with its PostgreSQL) on exit."""
    env = {**os.environ, "RCPF_MLFLOW_DIR": str(folder), "RCPF_MLFLOW_PORT": str(_free_port()),
           "RCPF_PG_PORT": str(_free_port()), "PYTHON": sys.executable}
    started = subprocess.run(["bash", str(SERVER_SCRIPT), "start"], env=env, capture_output=True, text=True)
    try:
        if started.returncode != 0:
            sys.exit(f"tracking_ingest: {SERVER_SCRIPT.name} start failed: {started.stderr.strip()[-500:]}")
        yield f"http://127.0.0.1:{env['RCPF_MLFLOW_PORT']}"
    finally:
        subprocess.run(["bash", str(SERVER_SCRIPT), "stop"], env=env, capture_output=True)


def _row(store: str, n: int, times: list[tuple[float, float]]) -> str:
    """Medians over the repeats, and the range of the per-repeat speedups."""
    t_call = statistics.median(t for t, _ in times)
    t_batch = statistics.median(t for _, t in times)
    ratios = [c / b for c, b in times]
    return (f"{store:<26} {n / t_call:9.1f} pts/s ({t_call:6.2f} s)   "
            f"{n / t_batch:9.1f} pts/s ({t_batch:5.2f} s)   {t_call / t_batch:6.1f}x "
            f"({min(ratios):.1f}-{max(ratios):.1f}x)")


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
            rows.append(_row("sqlite store", n, times))
        if "server" in stores:
            if args.tracking_url:
                times = measure(args.tracking_url, args.runs, args.points, Path(tmp, "server"), args.repeat)
                rows.append(_row("tracking server (given)", n, times))
            else:
                os.chmod(tmp, 0o755)  # the server script's PostgreSQL runs as postgres
                with tracking_server(Path(tmp, "mlflow")) as url:
                    times = measure(url, args.runs, args.points, Path(tmp, "server"), args.repeat)
                rows.append(_row("tracking server (postgres)", n, times))
    print(f"{args.runs} runs x {args.points} eval points ({METRICS_PER_POINT} metrics each), eval points per second")
    print(f"medians of {args.repeat} measurements; speedup: of the medians (range over the measurements)")
    print(f"{'store':<26} {'per-call log_metric':>27}   {'rcpforge RunLog':>25}   speedup")
    print("\n".join(rows))
    print("target: RunLog at least 20x per-call on each store")


if __name__ == "__main__":
    main()
