"""Read-only peeks at a campaign's SQLite store while a campaign runs. Plain sqlite3, not
an MlflowClient: a client opening a store whose schema is still being created by the
orchestrator would race it on the schema migration."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path


def run_statuses(db: Path) -> Counter:
    if not db.exists():
        return Counter()
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute("SELECT value FROM tags WHERE key = 'rcpforge.status'").fetchall()
        finally:
            con.close()
    except sqlite3.OperationalError:  # schema not there yet, or busy
        return Counter()
    return Counter(value for (value,) in rows)
