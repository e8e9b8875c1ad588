"""Eval points per second logged to MLflow: rcpforge's batching RunLog against per-call
`log_metric`, side by side on the same SQLite store.

    python benchmarks/tracking_ingest.py [--runs 8] [--points 50]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from mlflow import MlflowClient

from orchestrator.tracking import RunLog
from trainers.contract import EvalPoint

METRICS_PER_POINT = 2  # eval_loss and eval_excess_loss, as the tiny LM reports


def per_call(client: MlflowClient, run_ids: list[str], points: int) -> float:
    start = time.perf_counter()
    for run_id in run_ids:
        for p in range(points):
            client.log_metric(run_id, "eval_loss", 3.0 - p * 0.01, step=(p + 1) * 1000)
            client.log_metric(run_id, "eval_excess_loss", 1.0 - p * 0.01, step=(p + 1) * 1000)
    return time.perf_counter() - start


def batched(uri: str, run_ids: list[str], points: int, folder: Path) -> float:
    """Includes what a worker pays besides the points: opening its RunLog (a client and
    the read of what an earlier attempt logged) and the final flush."""
    start = time.perf_counter()
    for r, run_id in enumerate(run_ids):
        log = RunLog(uri, run_id, "eval_excess_loss", folder / str(r))
        for p in range(points):
            log.eval_point(EvalPoint(tokens=(p + 1) * 1000, samples=p + 1,
                                     metrics={"eval_loss": 3.0 - p * 0.01, "eval_excess_loss": 1.0 - p * 0.01}))
        log.flush()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--points", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{tmp}/bench.db"
        client = MlflowClient(tracking_uri=uri)
        exp = client.create_experiment("ingest", artifact_location=Path(tmp, "art").as_uri())
        n = args.runs * args.points

        def new_runs(tag: str) -> list[str]:
            return [client.create_run(exp, run_name=f"{tag}-{r}").info.run_id for r in range(args.runs)]

        t_call = per_call(client, new_runs("per-call"), args.points)
        t_batch = batched(uri, new_runs("batched"), args.points, Path(tmp))
    print(f"sqlite store, {args.runs} runs x {args.points} eval points ({METRICS_PER_POINT} metrics each)")
    print(f"per-call log_metric: {t_call:7.2f} s  {n / t_call:9.1f} eval points/s")
    print(f"rcpforge RunLog:     {t_batch:7.2f} s  {n / t_batch:9.1f} eval points/s")
    print(f"speedup: {t_call / t_batch:.1f}x (target: at least 20x)")


if __name__ == "__main__":
    main()
