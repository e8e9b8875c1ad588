"""Load a campaign's runs from the tracking store into an Arrow table, one row per run.

`load_runs` reads through the MLflow API, which works for any tracking URI (a SQLite
file, a tracking server); `load_campaign_runs` takes the SQL fast path
(`analysis/load_sql.py`) where the URI allows it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from trainers.contract.uri import redact_uri
from trainers.contract.schema import (
    METRIC_SAMPLES_TO_TARGET,
    METRIC_TOKENS_TO_TARGET,
    METRIC_TOKENS_TRAINED,
    METRIC_WALL_S,
    TAG_BATCH_SIZE,
    TAG_ERROR,
    TAG_PREFIX,
    TAG_RECIPE,
    TAG_ROLE,
    TAG_RUN_KEY,
    TAG_SEED,
    TAG_STATUS,
)

RUN_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("run_key", pa.string()),
        ("recipe", pa.string()),
        ("batch_size", pa.int64()),
        ("seed", pa.int64()),
        ("status", pa.string()),
        ("tokens_to_target", pa.float64()),
        ("samples_to_target", pa.float64()),
        ("tokens_trained", pa.float64()),
        ("wall_s", pa.float64()),
        ("error", pa.string()),
        ("hparams", pa.map_(pa.string(), pa.string())),
    ]
)


# Runs-table column -> the tag or the metric it is read from, on both load paths.
TAG_COLUMNS = {"run_key": TAG_RUN_KEY, "recipe": TAG_RECIPE, "batch_size": TAG_BATCH_SIZE, "seed": TAG_SEED,
               "status": TAG_STATUS, "error": TAG_ERROR}
METRIC_COLUMNS = {"tokens_to_target": METRIC_TOKENS_TO_TARGET, "samples_to_target": METRIC_SAMPLES_TO_TARGET,
                  "tokens_trained": METRIC_TOKENS_TRAINED, "wall_s": METRIC_WALL_S}


class NoSuchCampaign(LookupError):
    pass


def load_runs(tracking_uri: str, campaign: str, role: str = "campaign") -> pa.Table:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(campaign)
    if exp is None:
        raise NoSuchCampaign(
            f"no runs of campaign {campaign!r} in {redact_uri(tracking_uri)}; run `rcpforge run` first"
        )
    rows: dict[str, list] = {name: [] for name in RUN_SCHEMA.names}
    token = None
    while True:
        page = client.search_runs(
            [exp.experiment_id], filter_string=f"tags.`{TAG_ROLE}` = '{role}'", max_results=5000, page_token=token
        )
        for run in page:
            tags, metrics = run.data.tags, run.data.metrics
            if TAG_RUN_KEY not in tags:
                continue
            rows["run_id"].append(run.info.run_id)
            rows["run_key"].append(tags[TAG_RUN_KEY])
            rows["recipe"].append(tags.get(TAG_RECIPE))
            rows["batch_size"].append(int(tags[TAG_BATCH_SIZE]))
            rows["seed"].append(int(tags[TAG_SEED]))
            rows["status"].append(tags.get(TAG_STATUS))
            for column, name in METRIC_COLUMNS.items():
                rows[column].append(metrics.get(name))
            rows["error"].append(tags.get(TAG_ERROR))
            rows["hparams"].append(sorted((k, v) for k, v in run.data.params.items() if not k.startswith(TAG_PREFIX)))
        token = page.token
        if not token:
            break
    return sort_runs(pa.table(rows, schema=RUN_SCHEMA))


def sort_runs(table: pa.Table) -> pa.Table:
    """The one row order of a runs table, whichever path loaded it."""
    keys = ("recipe", "batch_size", "seed", "run_id")
    return table.sort_by([(k, "ascending") for k in keys])


def load_campaign_runs(tracking_uri: str, campaign: str, role: str = "campaign") -> pa.Table:
    """The SQL fast path for SQLite and PostgreSQL stores, the MLflow API otherwise
    (a tracking server over http(s))."""
    from analysis.load_sql import is_sql_uri, load_runs_sql

    if is_sql_uri(tracking_uri):
        return load_runs_sql(tracking_uri, campaign, role)
    return load_runs(tracking_uri, campaign, role)


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write to a temporary name, then rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
