"""Eval curves of a campaign's runs, read in bulk: every point of the chosen metrics of
every run, as one Arrow table (`CURVE_SCHEMA`, a row per point). `Campaign.curves`, the
report and `rcpforge status` read them here.

A SQL store (SQLite, PostgreSQL) answers one query (`analysis/curves_sql.py`); a tracking
server answers a request per 100 runs and metric (`StoreReader.histories`): never a
`get_metric_history` call per run, which at a thousand runs is a thousand round trips.

A point's `tokens` is its MLflow step (rcpforge logs eval points at step = tokens) and its
`samples` the `samples` metric the run logged at the same step. An imported run
(`rcpforge import`) steps its points by its MLLOG's samples_count: its `samples` is the
step and its `tokens` null."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

CURVE_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("run_name", pa.string()), ("run_key", pa.string()), ("model", pa.string()),
    ("recipe", pa.string()), ("batch_size", pa.int64()), ("seed", pa.int64()), ("metric", pa.string()),
    ("tokens", pa.int64()), ("samples", pa.int64()), ("value", pa.float64()),
])
SAMPLES = "samples"  # the metric every eval point logs beside its own, at the same step
IMPORTED = "import"  # the trainer tag of an imported run


@dataclass(frozen=True)
class RunFacts:
    """What a curve's rows say of their run, read with its points."""

    run_name: str
    run_key: str
    model: str
    recipe: str
    batch_size: int
    seed: int
    trainer: str | None
    target: str | None  # its target metric: the curve `metrics=None` reads


Point = tuple[str, str, int, float]  # run id, metric, step, value


def load_curves(tracking_uri: str, campaign: str, metrics: list[str] | None = None,
                run_ids: list[str] | None = None, role: str = "campaign") -> pa.Table:
    """Every point of `metrics` (None: each run's target metric) of the campaign's runs
    (or of `run_ids` among them), sorted by model, recipe, batch size, seed, run,
    metric and step. `NoSuchCampaign` where the store has no such campaign."""
    from rcpforge.analysis.load_sql import is_sql_uri

    if is_sql_uri(tracking_uri):
        from rcpforge.analysis.curves_sql import sql_points

        rows, points = sql_points(tracking_uri, campaign, metrics, run_ids, role, SAMPLES)
        facts = {run_id: RunFacts(*row) for run_id, row in rows.items()}
    else:
        facts, points = _server_points(tracking_uri, campaign, metrics, run_ids, role)
    return curves_table(facts, points, metrics)


def curves_table(facts: dict[str, RunFacts], points: Iterable[Point], metrics: list[str] | None) -> pa.Table:
    """The points of the metrics asked for as `CURVE_SCHEMA` rows, each with its run's
    facts and its samples (read beside it, as the `samples` metric at the same step)."""
    points = list(points)
    samples_at = {(run_id, step): value for run_id, key, step, value in points if key == SAMPLES}
    wanted = set(metrics or ())
    rows: dict[str, list] = {name: [] for name in CURVE_SCHEMA.names}
    for run_id, key, step, value in points:
        run = facts[run_id]
        if (key not in wanted) if metrics is not None else (key != run.target):
            continue
        imported = run.trainer == IMPORTED
        samples = step if imported else samples_at.get((run_id, step))
        for name, cell in (("run_id", run_id), ("run_name", run.run_name), ("run_key", run.run_key),
                           ("model", run.model), ("recipe", run.recipe), ("batch_size", run.batch_size),
                           ("seed", run.seed), ("metric", key), ("tokens", None if imported else step),
                           ("samples", None if samples is None else int(samples)), ("value", value)):
            rows[name].append(cell)
    table = pa.table(rows, schema=CURVE_SCHEMA)
    order = ("model", "recipe", "batch_size", "seed", "run_id", "metric", "tokens", "samples", "value")
    return table.sort_by([(k, "ascending") for k in order])


def run_facts(tags: dict[str, str], run_name: str) -> RunFacts:
    """A run's facts from its tags (`schema.py`), as both store paths read them."""
    from rcpforge.trainers.contract import schema as ts

    return RunFacts(run_name, tags[ts.TAG_RUN_KEY], tags.get(ts.TAG_MODEL) or "", tags.get(ts.TAG_RECIPE, ""),
                    int(tags[ts.TAG_BATCH_SIZE]), int(tags[ts.TAG_SEED]), tags.get(ts.TAG_TRAINER),
                    tags.get(ts.TAG_TARGET_METRIC))


def _server_points(uri: str, campaign: str, metrics: list[str] | None, run_ids: list[str] | None,
                   role: str) -> tuple[dict[str, RunFacts], list[Point]]:
    """The runs from one paged search, their points a request per 100 runs and metric."""
    from rcpforge.analysis.load import StoreReader
    from rcpforge.trainers.contract.schema import TAG_RUN_KEY

    store = StoreReader(uri)
    only = None if run_ids is None else set(run_ids)
    facts = {run.info.run_id: run_facts(run.data.tags, run.info.run_name)
             for run in store.runs(store.experiment_id(campaign), role)
             if TAG_RUN_KEY in run.data.tags and (only is None or run.info.run_id in only)}
    by_metric: dict[str, list[str]] = {}
    for run_id, run in facts.items():
        for key in (metrics if metrics is not None else [run.target] if run.target else []):
            by_metric.setdefault(key, []).append(run_id)
        if run.trainer != IMPORTED:
            by_metric.setdefault(SAMPLES, []).append(run_id)
    points: list[Point] = []
    for key, ids in by_metric.items():
        points.extend((run_id, key, step, value) for run_id, step, value in store.histories(sorted(set(ids)), key))
    return facts, points


def telemetry_metrics(tracking_uri: str, campaign: str, prefix: str = "telemetry.") -> list[str]:
    """Names of the numeric-telemetry metrics the campaign's runs logged (recipes that
    quantize): one query of a SQL store, one paged search of a server."""
    from rcpforge.analysis.load_sql import is_sql_uri

    if is_sql_uri(tracking_uri):
        from rcpforge.analysis.curves_sql import metric_names

        return [name for name in metric_names(tracking_uri, campaign) if name.startswith(prefix)]
    from rcpforge.analysis.load import StoreReader

    store = StoreReader(tracking_uri)
    names = {key for run in store.runs(store.experiment_id(campaign), "campaign") for key in run.data.metrics}
    return sorted(name for name in names if name.startswith(prefix))
