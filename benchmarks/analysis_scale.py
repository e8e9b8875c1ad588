"""Analysis of a large campaign to an RCP table: the SQL fast path against the same
analysis through `mlflow.search_runs`, side by side on one real MLflow SQLite store.

The store is made by MLflow itself (schema, experiment), then filled with bulk SQL
inserts in MLflow's own table layout: per run the orchestrator's tags, two params, the
final metrics in `latest_metrics` and a short eval curve in `metrics`.

    PYTHONPATH=. python benchmarks/analysis_scale.py --runs 100000
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rcpforge.analysis.load import RUN_SCHEMA, sort_runs  # noqa: E402
from rcpforge.analysis.load_sql import load_runs_sql  # noqa: E402
from rcpforge.analysis.rcp_table import rcp_table  # noqa: E402
from rcpforge.trainers.contract import schema as ts  # noqa: E402

CAMPAIGN, BENCHMARK, N = "scale", "rcpforge_scale", 10
RECIPES = ("bf16", "fp8_tensorwise", "mxfp8", "nvfp4")
BATCH_SIZES = (32, 64, 128, 256, 512)
CURVE_POINTS = 10


def build_store(path: Path, runs: int, seed: int = 0) -> str:
    from mlflow import MlflowClient

    uri = f"sqlite:///{path}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = int(client.create_experiment(CAMPAIGN, artifact_location=(path.parent / "art").as_uri()))
    rng = np.random.default_rng(seed)
    now = int(time.time() * 1000)
    run_rows, tag_rows, param_rows, latest_rows, metric_rows = [], [], [], [], []
    # The orchestrator files the whole RunSpec as a tag: about this size.
    spec_text = '{"seed": SEED, "trainer": {' + ", ".join(f'"setting_{k}": {k}' for k in range(60)) + "}}"
    for i in range(runs):
        rid = uuid.uuid4().hex
        recipe, bs = RECIPES[i % len(RECIPES)], BATCH_SIZES[(i // len(RECIPES)) % len(BATCH_SIZES)]
        seed_i = i // (len(RECIPES) * len(BATCH_SIZES))
        # One cell in five keeps a few non-converged runs: no RCP there, as in life.
        status = "not_converged" if (bs == 512 and seed_i % 97 == 0) else "converged"
        samples = float(round(bs * 40 * (1 + 0.1 * RECIPES.index(recipe)) * rng.normal(1, 0.03)))
        run_rows.append((rid, f"{recipe}-bs{bs}-s{seed_i}", "LOCAL", "", "", "bench", "FINISHED", now, now + 1000,
                         "", "active", f"file:///art/{rid}", exp_id))
        tags = {ts.TAG_CAMPAIGN: CAMPAIGN, ts.TAG_ROLE: "campaign", ts.TAG_RUN_KEY: f"k{i:08d}", ts.TAG_RECIPE: recipe,
                ts.TAG_BATCH_SIZE: str(bs), ts.TAG_SEED: str(seed_i), ts.TAG_STATUS: status, ts.TAG_ATTEMPTS: "1",
                ts.TAG_TRAINER: "tinylm", ts.TAG_TARGET_METRIC: "eval_excess_loss", "mlflow.runName": f"{recipe}-{bs}-{seed_i}",
                ts.TAG_SPEC: spec_text.replace("SEED", str(seed_i), 1)}
        tag_rows += [(k, v, rid) for k, v in tags.items()]
        param_rows += [("lr", str(0.01 * bs / 32), rid), ("warmup_tokens", "8192", rid)]
        finals = {ts.METRIC_TOKENS_TRAINED: samples * 8, ts.METRIC_WALL_S: 2.0}
        if status == "converged":
            finals.update({ts.METRIC_SAMPLES_TO_TARGET: samples, ts.METRIC_TOKENS_TO_TARGET: samples * 8})
        latest_rows += [(k, v, now, 0, 0, rid) for k, v in finals.items()]
        metric_rows += [("eval_excess_loss", 1.0 / (p + 1), now + p, rid, int(samples * 8 * p / CURVE_POINTS), 0)
                        for p in range(1, CURVE_POINTS + 1)]
    with sqlite3.connect(path) as db:
        db.executemany("INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, user_id, status, "
                       "start_time, end_time, source_version, lifecycle_stage, artifact_uri, experiment_id) "
                       "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", run_rows)
        db.executemany("INSERT INTO tags (key, value, run_uuid) VALUES (?,?,?)", tag_rows)
        db.executemany("INSERT INTO params (key, value, run_uuid) VALUES (?,?,?)", param_rows)
        db.executemany("INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) VALUES (?,?,?,?,?,?)", latest_rows)
        db.executemany("INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES (?,?,?,?,?,?)", metric_rows)
    return uri


def table_from_search_runs(uri: str) -> pa.Table:
    """The same runs table built from `mlflow.search_runs` (a pandas DataFrame)."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    df = mlflow.search_runs(experiment_names=[CAMPAIGN], filter_string=f"tags.`{ts.TAG_ROLE}` = 'campaign'",
                            max_results=10_000_000)

    def col(name):
        return df[name].tolist() if name in df else [None] * len(df)

    def num(name):
        return [None if v != v else float(v) for v in col(name)]  # NaN from pandas = missing

    params = [c for c in df.columns if c.startswith("params.")]
    columns = {
        "run_id": col("run_id"), "run_key": col(f"tags.{ts.TAG_RUN_KEY}"), "recipe": col(f"tags.{ts.TAG_RECIPE}"),
        "batch_size": [int(v) for v in col(f"tags.{ts.TAG_BATCH_SIZE}")], "seed": [int(v) for v in col(f"tags.{ts.TAG_SEED}")],
        "status": col(f"tags.{ts.TAG_STATUS}"),
        "tokens_to_target": num(f"metrics.{ts.METRIC_TOKENS_TO_TARGET}"),
        "samples_to_target": num(f"metrics.{ts.METRIC_SAMPLES_TO_TARGET}"),
        "tokens_trained": num(f"metrics.{ts.METRIC_TOKENS_TRAINED}"), "wall_s": num(f"metrics.{ts.METRIC_WALL_S}"),
        "error": [None if v != v else v for v in col(f"tags.{ts.TAG_ERROR}")],
        "hparams": [sorted((p[len("params."):], v) for p, v in zip(params, row) if v is not None and v == v)
                    for row in zip(*(df[p].tolist() for p in params))] if params else [[] for _ in range(len(df))],
        "model": [""] * len(df), "model_params": [None] * len(df), "model_flops_per_token": [None] * len(df),
    }
    return sort_runs(pa.table(columns, schema=RUN_SCHEMA))


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--folder", type=Path, default=None, help="keep the store here (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="measure on the store already in --folder")
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="rcpforge-scale-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "mlflow.db"
    if not (args.reuse and db.exists()):
        db.unlink(missing_ok=True)
        _, t_build = timed(lambda: build_store(db, args.runs))
        print(f"store: {args.runs:,} runs in {db} ({db.stat().st_size / 2**20:.0f} MiB), built in {t_build:.1f} s")
    else:
        print(f"store: reusing {db} ({db.stat().st_size / 2**20:.0f} MiB)")
    uri = f"sqlite:///{db}"

    fast_runs, t_fast_load = timed(lambda: load_runs_sql(uri, CAMPAIGN))
    fast_table, t_fast_table = timed(lambda: rcp_table(fast_runs, BENCHMARK, N))
    t_fast = t_fast_load + t_fast_table
    print(f"SQL fast path:      load {t_fast_load:7.2f} s + RCP table {t_fast_table:5.2f} s = {t_fast:7.2f} s")

    api_runs, t_api_load = timed(lambda: table_from_search_runs(uri))
    api_table, t_api_table = timed(lambda: rcp_table(api_runs, BENCHMARK, N))
    t_api = t_api_load + t_api_table
    print(f"mlflow.search_runs: load {t_api_load:7.2f} s + RCP table {t_api_table:5.2f} s = {t_api:7.2f} s")

    same_runs = fast_runs.to_pylist() == api_runs.to_pylist()
    same_table = fast_table.equals(api_table)
    print(f"same runs table: {same_runs}; same RCP table: {same_table}; rows {fast_runs.num_rows:,}, cells {fast_table.num_rows}")
    print(f"ratio fast / search_runs = {t_fast / t_api:.4f} (1/{t_api / t_fast:.1f}); target <= 1/20")
    if not (same_runs and same_table):
        sys.exit(1)


if __name__ == "__main__":
    main()
