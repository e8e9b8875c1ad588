"""The columns of MLflow's SQL store that rcpforge writes itself, as SQLAlchemy Core
table clauses: no MLflow import (its ORM models live in the `mlflow` package, whose import
is about 1.5 s of CPU), no schema of ours (the tables are MLflow's, made and migrated by
MLflow; only the names of the columns written or read are here).

Written by the database store's write strategy (`bulk.py`) and by a worker's own run on
a database store (`direct.py`), the same statements for both."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import column, table

RUNS = table("runs", column("run_uuid"), column("status"), column("start_time"), column("end_time"),
             column("artifact_uri"), column("lifecycle_stage"))
METRICS = table("metrics", column("key"), column("value"), column("timestamp"), column("step"), column("is_nan"),
                column("run_uuid"))
LATEST_METRICS = table("latest_metrics", column("key"), column("value"), column("timestamp"), column("step"),
                       column("is_nan"), column("run_uuid"))
TAGS = table("tags", column("key"), column("value"), column("run_uuid"))
PARAMS = table("params", column("key"), column("value"), column("run_uuid"))

_LARGEST = 1.7976931348623157e308  # SQL has no infinity: MLflow stores the largest float instead


def stored_value(value: float) -> tuple[bool, float]:
    """(is NaN, the value as stored), by MLflow's SQL store's rule: NaN is stored as 0 with
    its flag, an infinity as the largest float of its sign."""
    if math.isnan(value):
        return True, 0.0
    if math.isinf(value):
        return False, _LARGEST if value > 0 else -_LARGEST
    return False, value


@contextmanager
def transaction(engine: Any) -> Iterator[Any]:
    """A connection in one transaction, set up as MLflow's own sessions set up SQLite's
    (foreign keys enforced, and a writer waits up to 20 s for another's lock rather than
    failing at once: many workers write one file)."""
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA foreign_keys = ON")
            conn.exec_driver_sql("PRAGMA busy_timeout = 20000")
        yield conn
