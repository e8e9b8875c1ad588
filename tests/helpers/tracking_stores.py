"""Every kind of tracking store rcpforge supports, supplied the same way, for the
conformance suite (`tests/conformance/`) the way Optuna's `optuna/testing/storages.py`
supplies its storages: a store added to `STORE_KINDS` (and to `tracking_store`) gets
every conformance test.

- `sqlite`: the embedded default, a SQLite file of the test's own;
- `server`: an MLflow tracking server over HTTP (on PostgreSQL, `mlflow_server`);
- `postgresql`: the same PostgreSQL database named directly, as workers may.

Each test gets a fresh campaign (experiment) name, unique across kinds: the server and
the postgresql kinds share one database."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rcpforge.trainers.contract.redact import redact_uri

STORE_KINDS = ("sqlite", "server", "postgresql")


@dataclass(frozen=True)
class TrackingStore:
    kind: str
    uri: str
    campaign: str  # a fresh experiment name of this test's
    artifact_dir: Path
    secret: str | None = None  # a password that no message may show

    @property
    def uri_has_password(self) -> bool:
        return redact_uri(self.uri) != self.uri


def sqlite_template(folder: Path) -> Path:
    """An empty MLflow SQLite store with its schema made: MLflow's migrations take
    seconds per new file, a copy of this takes milliseconds."""
    from mlflow import MlflowClient

    from rcpforge.orchestrator.tracking import sqlite_uri

    db = folder / "template.db"
    MlflowClient(tracking_uri=sqlite_uri(db)).search_experiments(max_results=1)
    return db


@contextmanager
def tracking_store(kind: str, folder: Path, server=None, template: Path | None = None) -> Iterator[TrackingStore]:
    """A store of `kind` for one test: `folder` is the test's own; `server` the
    `mlflow_server` fixture's value (the server and postgresql kinds); `template` an
    empty SQLite store to copy (`sqlite_template`), made afresh when None."""
    from rcpforge.orchestrator.tracking import sqlite_uri

    campaign = f"conf-{kind}-{uuid.uuid4().hex[:12]}"
    artifacts = folder / "artifacts"
    if kind == "sqlite":
        db = folder / "mlflow.db"
        if template is not None:
            shutil.copyfile(template, db)
        yield TrackingStore(kind, sqlite_uri(db), campaign, artifacts)
    elif kind in ("server", "postgresql"):
        if server is None:
            raise ValueError(f"the {kind} store needs the mlflow_server fixture's server")
        uri = server.url if kind == "server" else server.backend_uri
        yield TrackingStore(kind, uri, campaign, artifacts, secret=server.password)
    else:
        raise ValueError(f"unknown tracking store kind {kind!r}; known: {', '.join(STORE_KINDS)}")
