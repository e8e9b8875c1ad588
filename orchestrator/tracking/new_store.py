"""A new SQLite tracking store, made whole in one step from a blank one kept in the cache.

MLflow makes a SQLite store by running its schema migrations on the new file: about a
second of CPU for every new campaign folder, and for that second the file exists half made,
so a client opened on it meanwhile (a `status` in another shell, a notebook) runs the same
migrations at once and the two break each other ("No such index ..."). rcpforge instead
keeps one blank store per MLflow version, made once by MLflow itself in the user's cache,
and puts a copy of it in place by a hard link, which either makes the whole file appear or
fails because a store is already there: nobody ever sees it half made and an existing
store is never replaced. Where the cache cannot be written, MLflow makes the store as usual.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from rcpforge.trainers.contract.cache import user_cache


def _blank_store() -> Path:
    """The cached blank store of the installed MLflow, made first if it is not there."""
    import mlflow

    blank = user_cache("stores") / f"mlflow-{mlflow.__version__}-blank.db"
    if blank.is_file():
        return blank
    blank.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=blank.parent, prefix=".making-") as tmp:
        made = Path(tmp, "blank.db")
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        # MLflow says at INFO that it makes and migrates the tables: on a first `run` that
        # would be the console's first lines, about a file the user never sees
        quiet = logging.getLogger("mlflow.store.db.utils")
        level, quiet.level = quiet.level, logging.WARNING
        try:
            store = SqlAlchemyStore(f"sqlite:///{made}", str(Path(tmp, "mlruns")))
            store.engine.dispose()
        finally:
            quiet.setLevel(level)
        os.replace(made, blank)  # whole, or not there: another process may be making it too
    return blank


def place_new_sqlite_store(db: Path) -> bool:
    """Put a whole, blank store at `db` if no file is there; True if this call put it.
    False leaves the making to MLflow (a file already there, or no cache to use)."""
    if db.exists():
        return False
    try:
        blank = _blank_store()
        db.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=db.parent, prefix=f".{db.name}.", suffix=".new")
        os.close(fd)
    except OSError:
        return False
    try:
        shutil.copyfile(blank, tmp)
        _as_if_made_here(Path(tmp))
        os.link(tmp, db)
        return True
    except FileExistsError:
        return False  # another process put its store there first: that one is used
    except (OSError, sqlite3.Error):
        return False
    finally:
        Path(tmp).unlink(missing_ok=True)


def _as_if_made_here(db: Path) -> None:
    """MLflow's default experiment as MLflow would have made it from this folder now: its
    artifacts under ./mlruns/0 and its times of now (rcpforge's own experiments name theirs)."""
    now = int(time.time() * 1000)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE experiments SET artifact_location = ?, creation_time = ?, last_update_time = ? "
                     "WHERE experiment_id = 0", (str(Path.cwd().resolve() / "mlruns" / "0"), now, now))
    conn.close()
