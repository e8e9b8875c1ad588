"""The one adapter to MLflow: every write of rcpforge to a tracking store goes through
this package (the analysis reads on its own, in `analysis/load*.py`).

Experiment = campaign; one MLflow run per run key, created by the orchestrator before the
run is launched and reattached on every retry, so a run key never has two MLflow runs.
The tag schema (`trainers/contract/schema.py`) is a public contract: analysis reads it.

- `client`: MLflow's client under the retry policy (`trainers/contract/retry.py`) every
  call runs under, the checks of a tracking URI and the probe of a store;
- `records`: what the modules below write, shared (a run's tags and params, an
  attempt's tags, an imported run); a leaf that imports none of them;
- `writes`: one write strategy per kind of store, chosen once: MLflow's client (a
  tracking server, a file store) or direct SQL (`bulk`) for a database store;
- `store`: the orchestrator's calls (experiment, ledger read, runs, imports);
- `run_log`: a worker's calls on its own run; on a database store with local artifacts
  through `direct` (the same statements, no MLflow import), else MLflow's client;
- `tables`: the columns of MLflow's tables that `bulk` and `direct` write.
"""

from __future__ import annotations

from rcpforge.orchestrator.tracking.client import (
    DEFAULT_RETRY_S,
    READ_RETRY_S,
    TrackingUnavailable,
    TrackingUriError,
    _RetryingClient,
    absent_sqlite_store,
    check_tracking_uri,
    probe_store,
    sqlite_uri,
)
from rcpforge.orchestrator.tracking.records import ImportedRun, campaign_tags, run_params, spec_tags
from rcpforge.orchestrator.tracking.run_log import RunLog
from rcpforge.orchestrator.tracking.store import Tracking, mark_preempted

__all__ = ["DEFAULT_RETRY_S", "READ_RETRY_S", "ImportedRun", "RunLog", "Tracking", "TrackingUnavailable",
           "TrackingUriError", "_RetryingClient", "absent_sqlite_store", "campaign_tags", "check_tracking_uri",
           "mark_preempted", "probe_store", "run_params", "sqlite_uri", "spec_tags"]
