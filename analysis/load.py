"""The runs table (`RUN_SCHEMA`, one row per run) and every read analysis makes of a
tracking store through MLflow's client (`StoreReader`), under the tracking store's retry
policy (`trainers/contract/retry.py`): the runs of a campaign (`load_runs`), their eval
curves (`analysis/curves.py`) and their tags (`analysis/layer_map.py`).

`load_runs` works for any tracking URI (a SQLite file, a tracking server);
`analysis/load_sql.py` reads the same table straight from a SQL store, and its
`load_campaign_runs` takes that fast path where the URI allows it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq

from rcpforge.trainers.contract.retry import RetryingClient, under_retry_policy
from rcpforge.trainers.contract.redact import redact_uri
from rcpforge.trainers.contract.schema import (
    METRIC_SAMPLES_TO_TARGET,
    METRIC_TOKENS_TO_TARGET,
    METRIC_TOKENS_TRAINED,
    METRIC_WALL_S,
    TAG_ACCELERATOR,
    TAG_BATCH_SIZE,
    TAG_CONFIG_KEY,
    TAG_ERROR,
    TAG_MODEL,
    TAG_MODEL_FLOPS_PER_TOKEN,
    TAG_MODEL_PARAMS,
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
        # A campaign's model axis (docs/models.md): the run's model ("" without one), its
        # parameter count and training FLOPs per token (null where unknown).
        ("model", pa.string()),
        ("model_params", pa.int64()),
        ("model_flops_per_token", pa.float64()),
        # The GPUs the run ran on, by name (null where unknown: a CPU run): a cell whose runs
        # ran on more than one kind is flagged (analysis/hardware.py).
        ("accelerator", pa.string()),
        # The run's configuration (its run key without the seed; null for a run recorded
        # before the tag): a cell of two is not pooled into an RCP record (analysis/mixtures.py).
        ("config_key", pa.string()),
    ]
)


# Runs-table column -> the tag or the metric it is read from, on both load paths.
TAG_COLUMNS = {"run_key": TAG_RUN_KEY, "recipe": TAG_RECIPE, "batch_size": TAG_BATCH_SIZE, "seed": TAG_SEED,
               "status": TAG_STATUS, "error": TAG_ERROR, "model": TAG_MODEL, "model_params": TAG_MODEL_PARAMS,
               "model_flops_per_token": TAG_MODEL_FLOPS_PER_TOKEN, "accelerator": TAG_ACCELERATOR,
               "config_key": TAG_CONFIG_KEY}
METRIC_COLUMNS = {"tokens_to_target": METRIC_TOKENS_TO_TARGET, "samples_to_target": METRIC_SAMPLES_TO_TARGET,
                  "tokens_trained": METRIC_TOKENS_TRAINED, "wall_s": METRIC_WALL_S}


# What a tracking server's bulk read of metric histories takes: run ids a request, points an answer.
_BULK_RUNS = 100
_BULK_POINTS = 25_000
_BULK_AT_ONCE = 4


class NoSuchCampaign(LookupError):
    pass


def no_such_campaign(campaign: str, tracking_uri: str) -> NoSuchCampaign:
    return NoSuchCampaign(f"no runs of campaign {campaign!r} in {redact_uri(tracking_uri)}; run `rcpforge run` first")


class StoreReader:
    """The reads of one tracking store through MLflow's client, each under the retry
    policy: a store that is briefly unavailable is waited out, one that stays down is
    `TrackingUnavailable` naming it."""

    def __init__(self, tracking_uri: str):
        from mlflow import MlflowClient

        self.uri = tracking_uri
        self._client = under_retry_policy(MlflowClient, tracking_uri)

    def experiment_id(self, campaign: str) -> str:
        """The id of the campaign's experiment; `NoSuchCampaign` where there is none."""
        exp = self._client.get_experiment_by_name(campaign)
        if exp is None:
            raise no_such_campaign(campaign, self.uri)
        return exp.experiment_id

    def runs(self, experiment_id: str, role: str) -> Iterator[Any]:
        """The experiment's MLflow runs of one role, page by page."""
        token = None
        while True:
            page = self._client.search_runs(
                [experiment_id], filter_string=f"tags.`{TAG_ROLE}` = '{role}'", max_results=5000, page_token=token
            )
            yield from page
            token = page.token
            if not token:
                return

    def tags(self, run_id: str) -> dict[str, str]:
        return self._client.get_run(run_id).data.tags

    def metrics(self, run_id: str) -> dict[str, float]:
        """The run's metrics, each at its last value."""
        return self._client.get_run(run_id).data.metrics

    def history(self, run_id: str, metric: str) -> list[Any]:
        """Every point the run logged of `metric`, by step (tokens)."""
        return sorted(self._client.get_metric_history(run_id, metric), key=lambda m: m.step)

    def histories(self, run_ids: list[str], metric: str) -> Iterator[tuple[str, int, float]]:
        """(run id, step, value) of every point of `metric` the runs logged, through the
        tracking server's bulk read (`metrics/get-history-bulk`, the read MLflow's UI
        charts runs with: a request, and one query, per 100 runs); the runs of a batch
        whose answer fills the server's cap are asked again in halves, one run alone
        through `get_metric_history` (which pages). The batches are asked _BULK_AT_ONCE at
        a time: the server's own cost a point (its ORM rows made JSON) is most of the wait."""
        from concurrent.futures import ThreadPoolExecutor

        batches = [run_ids[start:start + _BULK_RUNS] for start in range(0, len(run_ids), _BULK_RUNS)]
        with ThreadPoolExecutor(_BULK_AT_ONCE) as pool:
            for points in pool.map(lambda batch: list(self._histories(batch, metric)), batches):
                yield from points

    def _histories(self, run_ids: list[str], metric: str) -> Iterator[tuple[str, int, float]]:
        found = cast(RetryingClient, self._client).retry("get-history-bulk", lambda: self._bulk(run_ids, metric))
        if found is not None and len(found) < _BULK_POINTS:
            yield from ((m["run_id"], int(m["step"]), float(m["value"])) for m in found)
        elif len(run_ids) > 1:  # the cap cut the answer short: fewer runs a request
            half = len(run_ids) // 2
            yield from self._histories(run_ids[:half], metric)
            yield from self._histories(run_ids[half:], metric)
        else:  # one run of more points than the cap, or a server without the bulk read
            yield from ((run_ids[0], m.step, m.value) for m in self._client.get_metric_history(run_ids[0], metric))

    def _bulk(self, run_ids: list[str], metric: str) -> list[dict] | None:
        """One bulk request; None where the server has no such endpoint (404)."""
        from mlflow.utils.credentials import get_default_host_creds
        from mlflow.utils.rest_utils import http_request, verify_rest_response

        endpoint = "/ajax-api/2.0/mlflow/metrics/get-history-bulk"
        response = http_request(get_default_host_creds(self.uri), endpoint, "GET",
                                params={"run_id": run_ids, "metric_key": metric, "max_results": _BULK_POINTS})
        if response.status_code == 404:
            return None
        return verify_rest_response(response, endpoint).json().get("metrics", [])


def tag_values(tracking_uri: str, campaign: str, keys: tuple[str, ...], role: str = "campaign") -> dict[str, Counter]:
    """How many of the campaign's runs carry each value of each tag of `keys`."""
    store = StoreReader(tracking_uri)
    found: dict[str, Counter] = {key: Counter() for key in keys}
    for run in store.runs(store.experiment_id(campaign), role):
        for key in keys:
            if (value := run.data.tags.get(key)) is not None:
                found[key][value] += 1
    return found


def load_runs(tracking_uri: str, campaign: str, role: str = "campaign") -> pa.Table:
    store = StoreReader(tracking_uri)
    rows: dict[str, list] = {name: [] for name in RUN_SCHEMA.names}
    for run in store.runs(store.experiment_id(campaign), role):
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
        rows["model"].append(tags.get(TAG_MODEL, ""))
        rows["model_params"].append(model_number(tags.get(TAG_MODEL_PARAMS), int))
        rows["model_flops_per_token"].append(model_number(tags.get(TAG_MODEL_FLOPS_PER_TOKEN), float))
        rows["accelerator"].append(tags.get(TAG_ACCELERATOR))
        rows["config_key"].append(tags.get(TAG_CONFIG_KEY))
    return sort_runs(pa.table(rows, schema=RUN_SCHEMA))


def model_number(text: str | None, kind: type) -> Any:
    """A model size tag's value as a number (an int's tag may read 1200000000 or 1.2e9)."""
    if text is None or text == "":
        return None
    return int(float(text)) if kind is int else float(text)


def sort_runs(table: pa.Table) -> pa.Table:
    """The one row order of a runs table, whichever path loaded it."""
    keys = ("model", "recipe", "batch_size", "seed", "run_id")
    return table.sort_by([(k, "ascending") for k in keys])


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write to a temporary name, then rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
