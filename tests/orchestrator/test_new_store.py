"""A new SQLite store is put in place whole, from the blank store MLflow made once in the
cache: the same schema as one MLflow makes in place, its default experiment as if made
from the current folder, never a store that was already there replaced, and one winner
when several processes make it at once."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from mlflow import MlflowClient

from rcpforge.orchestrator.tracking import Tracking
from rcpforge.orchestrator.tracking.new_store import place_new_sqlite_store
from tests.conftest import ROOT


def _schema(db: Path) -> tuple[dict, set, list]:
    """Tables with their columns, the indexes and the migration: MLflow's own CREATE
    statements list a table's constraints in an order that varies from one making to the next."""
    with sqlite3.connect(db) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        columns = {t: conn.execute(f'PRAGMA table_info("{t}")').fetchall() for t in tables}
        indexes = set(conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'index'").fetchall())
        version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    conn.close()
    return columns, indexes, version


def test_a_placed_store_is_the_store_mlflow_would_have_made(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the blank store is made here first
    by_mlflow = tmp_path / "by_mlflow.db"
    MlflowClient(f"sqlite:///{by_mlflow}").search_experiments()
    assert "database tables" in capfd.readouterr().err  # MLflow says so as it makes one itself
    monkeypatch.chdir(tmp_path)
    placed = tmp_path / "new" / "placed.db"
    assert place_new_sqlite_store(placed)
    # a user's first `run` makes the blank store: not MLflow's lines first on the console
    assert "database tables" not in capfd.readouterr().err
    assert list((tmp_path / "cache" / "rcpforge" / "stores").glob("mlflow-*-blank.db"))
    assert _schema(placed) == _schema(by_mlflow)
    assert not list(placed.parent.glob(".*"))  # no temporary file left beside it
    client = MlflowClient(f"sqlite:///{placed}")
    (default,) = client.search_experiments()
    assert default.name == "Default" and default.artifact_location == str(tmp_path / "mlruns" / "0")
    client.create_experiment("used")
    assert {e.name for e in client.search_experiments()} == {"Default", "used"}


def test_a_store_already_there_is_never_replaced(tmp_path):
    db = tmp_path / "store.db"
    MlflowClient(f"sqlite:///{db}").create_experiment("mine")
    before = db.read_bytes()
    assert not place_new_sqlite_store(db)
    assert db.read_bytes() == before


def test_without_a_writable_cache_mlflow_makes_the_store(tmp_path, monkeypatch):
    blocked = tmp_path / "a_file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    db = tmp_path / "store.db"
    assert not place_new_sqlite_store(db) and not db.exists()
    Tracking(f"sqlite:///{db}").open_experiment("c", tmp_path / "artifacts")
    assert {e.name for e in MlflowClient(f"sqlite:///{db}").search_experiments()} == {"Default", "c"}


_PLACE = """
import sys
import time
from pathlib import Path
from rcpforge.orchestrator.tracking.new_store import place_new_sqlite_store
print(place_new_sqlite_store(Path(sys.argv[1])))
"""


def test_of_processes_making_one_store_at_once_exactly_one_puts_it(tmp_path):
    db = tmp_path / "store.db"
    procs = [subprocess.Popen([sys.executable, "-c", _PLACE, str(db)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    answers = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert sorted(answers) == ["False", "False", "False", "True"]
    assert MlflowClient(f"sqlite:///{db}").get_experiment_by_name("Default") is not None


_OPEN = """
import sys
import time
from rcpforge.orchestrator.tracking import Tracking
Tracking(sys.argv[1]).open_experiment("c", __import__("pathlib").Path(sys.argv[2]))
"""


def test_a_reader_never_finds_the_store_half_made(tmp_path):
    """The file appears whole, schema and all, the moment it appears: MLflow making it in
    place leaves about a second in which a client opened on it would migrate it too."""
    db = tmp_path / "store.db"
    opener = subprocess.Popen([sys.executable, "-c", _OPEN, f"sqlite:///{db}", str(tmp_path / "art")], cwd=ROOT)
    try:
        while not db.exists():
            assert opener.poll() is None or db.exists(), "the store was never made"
            time.sleep(0.002)
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            has_version = "alembic_version" in tables
            version = conn.execute("SELECT version_num FROM alembic_version").fetchall() if has_version else []
        conn.close()
        assert {"experiments", "runs", "metrics", "tags"} <= tables and version, tables
    finally:
        assert opener.wait(timeout=120) == 0
