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


_FACTS = ("run_name", "run_key", "model", "recipe", "batch_size", "seed", "trainer", "target")
_RUNS_SCHEMA = pa.schema([("run_id", pa.string()), ("run_name", pa.string()), ("run_key", pa.string()),
                          ("model", pa.string()), ("recipe", pa.string()), ("batch_size", pa.int64()),
                          ("seed", pa.int64()), ("trainer", pa.string()), ("target", pa.string())])
# The points as read, before the join: a row per point of a metric (samples included).
POINT_SCHEMA = pa.schema([("run_id", pa.string()), ("metric", pa.string()), ("step", pa.int64()),
                          ("value", pa.float64())])


def load_curves(tracking_uri: str, campaign: str, metrics: list[str] | None = None,
                run_ids: list[str] | None = None, role: str = "campaign") -> pa.Table:
    """Every point of `metrics` (None: each run's target metric) of the campaign's runs
    (or of `run_ids` among them), sorted by model, recipe, batch size, seed, run,
    metric and step. `NoSuchCampaign` where the store has no such campaign."""
    from rcpforge.analysis.load_sql import is_sql_uri

    if is_sql_uri(tracking_uri):
        from rcpforge.analysis.curves_sql import sql_points

        rows, columns = sql_points(tracking_uri, campaign, metrics, run_ids, role, SAMPLES)
        facts = {run_id: RunFacts(*row) for run_id, row in rows.items()}
        points = points_table(*columns)
    else:
        facts, points = _server_points(tracking_uri, campaign, metrics, run_ids, role)
    return curves_table(facts, points, metrics)


def curves_table(facts: dict[str, RunFacts], points: pa.Table, metrics: list[str] | None) -> pa.Table:
    """The points (`POINT_SCHEMA`) of the metrics asked for as `CURVE_SCHEMA` rows, each
    with its run's facts and its samples (the `samples` metric at the same step), joined
    column-wise in Arrow: a Python loop over the points would cost more than the read."""
    import pyarrow.compute as pc

    runs = pa.table({"run_id": list(facts), **{f: [getattr(r, f) for r in facts.values()] for f in _FACTS}},
                    schema=_RUNS_SCHEMA)
    samples = points.filter(pc.equal(points["metric"], SAMPLES)).group_by(["run_id", "step"]).aggregate(
        [("value", "max")]).rename_columns(["run_id", "step", "samples"])
    joined = points.join(runs, "run_id")
    keep = (pc.equal(joined["metric"], joined["target"]) if metrics is None
            else pc.is_in(joined["metric"], value_set=pa.array(metrics, pa.string())))
    joined = joined.filter(pc.fill_null(keep, False)).join(samples, ["run_id", "step"], join_type="left outer")
    imported = pc.equal(joined["trainer"], IMPORTED).fill_null(False)
    columns = {name: joined[name] for name in CURVE_SCHEMA.names if name in joined.column_names}
    columns["tokens"] = pc.if_else(imported, pa.scalar(None, pa.int64()), joined["step"])
    columns["samples"] = pc.if_else(imported, joined["step"], pc.cast(joined["samples"], pa.int64()))
    table = pa.table({name: columns[name] for name in CURVE_SCHEMA.names}).cast(CURVE_SCHEMA)
    order = ("model", "recipe", "batch_size", "seed", "run_id", "metric", "tokens", "samples", "value")
    return table.sort_by([(k, "ascending") for k in order])


def points_table(run_ids: list, metrics: list, steps: list, values: list) -> pa.Table:
    return pa.table([run_ids, metrics, steps, values], schema=POINT_SCHEMA)


def run_facts(tags: dict[str, str], run_name: str) -> RunFacts:
    """A run's facts from its tags (`schema.py`), as both store paths read them."""
    from rcpforge.trainers.contract import schema as ts

    return RunFacts(run_name, tags[ts.TAG_RUN_KEY], tags.get(ts.TAG_MODEL) or "", tags.get(ts.TAG_RECIPE, ""),
                    int(tags[ts.TAG_BATCH_SIZE]), int(tags[ts.TAG_SEED]), tags.get(ts.TAG_TRAINER),
                    tags.get(ts.TAG_TARGET_METRIC))


def _server_points(uri: str, campaign: str, metrics: list[str] | None, run_ids: list[str] | None,
                   role: str) -> tuple[dict[str, RunFacts], pa.Table]:
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
    columns: tuple[list, list, list, list] = ([], [], [], [])
    for key, ids in by_metric.items():
        for run_id, step, value in store.histories(sorted(set(ids)), key):
            for column, cell in zip(columns, (run_id, key, step, value), strict=True):
                column.append(cell)
    return facts, points_table(*columns)


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
