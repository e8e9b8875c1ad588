"""Eval curves of a campaign's runs (metric value against tokens) as an Arrow table."""

from __future__ import annotations

import pyarrow as pa

from rcpforge.analysis.load import StoreReader

CURVE_SCHEMA = pa.schema([("run_id", pa.string()), ("metric", pa.string()), ("tokens", pa.int64()), ("value", pa.float64())])


def load_curves(tracking_uri: str, run_ids: list[str], metrics: list[str]) -> pa.Table:
    store = StoreReader(tracking_uri)
    rows: dict[str, list] = {name: [] for name in CURVE_SCHEMA.names}
    for run_id in run_ids:
        for metric in metrics:
            for point in store.history(run_id, metric):
                rows["run_id"].append(run_id)
                rows["metric"].append(metric)
                rows["tokens"].append(point.step)
                rows["value"].append(point.value)
    return pa.table(rows, schema=CURVE_SCHEMA)


def telemetry_metrics(tracking_uri: str, run_ids: list[str], prefix: str = "telemetry.") -> list[str]:
    """Names of the numeric-telemetry metrics the runs logged (recipes that quantize)."""
    store = StoreReader(tracking_uri)
    names: set[str] = set()
    for run_id in run_ids:
        names.update(k for k in store.metrics(run_id) if k.startswith(prefix))
    return sorted(names)
