"""The tracking store as the orchestrator opens it: an MLflow client under the retry
policy (`trainers/contract/retry.py`: an unavailable store is waited out for `retry_s`,
then named in one `TrackingUnavailable` line), the checks of a tracking URI before any
call, and the short probe of the commands that only read."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rcpforge.trainers.contract.retry import DEFAULT_RETRY_S, TrackingUnavailable, first_line, under_retry_policy
from rcpforge.trainers.contract.retry import RetryingClient as _RetryingClient  # noqa: F401 - rcpforge.orchestrator.tracking exports it
from rcpforge.trainers.contract.uri import absent_sqlite_store  # noqa: F401 - rcpforge.orchestrator.tracking exports it

if TYPE_CHECKING:
    from mlflow import MlflowClient

def sqlite_uri(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def retrying_client(uri: str, retry_s: float = DEFAULT_RETRY_S, log_retries: bool = True) -> MlflowClient:
    from mlflow import MlflowClient

    return under_retry_policy(MlflowClient, uri, retry_s, log_retries)


class TrackingUriError(ValueError):
    """A tracking URI no store can be opened at, whatever the wait: the message names the
    URI (its password masked) and the fix, on one line."""


def check_tracking_uri(uri: str) -> None:
    """Refuse, before any call, a URI that cannot work here: malformed, a database driver
    that is not installed, a SQLite file whose folder cannot be made or written. MLflow
    answers each with a long traceback, or retries opening the file for minutes."""
    from rcpforge.trainers.contract.redact import redact_uri
    from rcpforge.trainers.contract.uri import DATABASE_SCHEMES, scheme_of, uri_form_problem

    problem = uri_form_problem(uri)
    if problem is None and scheme_of(uri) in DATABASE_SCHEMES:
        problem = _database_problem(uri)
    if problem is not None:
        raise TrackingUriError(problem if problem.startswith(repr(redact_uri(uri))) else
                               f"{redact_uri(uri)!r}: {problem}")


def _database_problem(uri: str) -> str | None:
    import importlib.util

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        url = make_url(uri)
        url.get_dialect().import_dbapi()
    except (ArgumentError, NoSuchModuleError) as err:
        return f"not a database URI SQLAlchemy can open ({err})"
    except ImportError as err:
        driver = err.name or str(err)
        package = {"psycopg": "'psycopg[binary]'", "psycopg2": "psycopg2-binary", "MySQLdb": "mysqlclient"}.get(
            driver, driver)
        other = (" (or write postgresql+psycopg2://..., whose driver is installed)"
                 if url.get_backend_name() == "postgresql" and driver != "psycopg2"
                 and importlib.util.find_spec("psycopg2") else "")
        return f"its database driver {driver} is not installed: pip install {package}{other}"
    if url.get_backend_name() == "sqlite" and url.database:
        return _sqlite_folder_problem(Path(url.database))
    return None


def _sqlite_folder_problem(db: Path) -> str | None:
    """MLflow makes the file's missing folders, then SQLite the file: each must be possible."""
    import tempfile

    if db.is_dir():
        return f"{db} is a folder; name a file in it, e.g. sqlite:///{db / 'rcpforge-mlflow.db'}"
    if db.exists():
        return None if os.access(db, os.R_OK) else f"cannot read {db}; fix its permissions or choose another file"
    folder = db.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, so the database cannot be made under it; choose a path in a folder"
    try:  # os.access says yes to root on a folder where nothing can be made (/proc)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        return f"cannot make files in folder {folder} ({err.strerror}); choose a writable folder"
    return None


# How long the commands that only read (status, analyze, report, export, ...) wait for
# a tracking server before they say it does not answer: a person is waiting, and a
# mistyped host or port never answers. `rcpforge run` keeps tracking.retry_s.
READ_RETRY_S = 10.0


def probe_store(uri: str, retry_s: float | None = None) -> None:
    """One cheap call to a tracking server, or one connection to a database server,
    retried for `retry_s` (READ_RETRY_S) at most; a store that does not answer raises
    TrackingUnavailable naming it, the wait and the fix. (MLflow itself retries a database
    connection for about 100 s, then prints its traceback.) A SQLite file needs no probe."""
    from rcpforge.trainers.contract.redact import redact_uri
    from rcpforge.trainers.contract.uri import DATABASE_SCHEMES, SERVER_SCHEMES, scheme_of

    scheme = scheme_of(uri)
    retry_s = READ_RETRY_S if retry_s is None else retry_s
    if scheme in DATABASE_SCHEMES and scheme != "sqlite":
        _probe_database(uri, retry_s)
        return
    if scheme not in SERVER_SCHEMES:
        return
    client = retrying_client(uri, retry_s, log_retries=False)  # its one line says it all
    try:
        client.search_experiments(max_results=1)
    except TrackingUnavailable as err:
        cause = err.__cause__ if isinstance(err.__cause__, Exception) else err
        raise TrackingUnavailable(
            f"tracking server {redact_uri(uri)} did not answer within {retry_s:g} s ({first_line(cause)}); "
            "check tracking.uri (a mistyped host or port?) or start the server"
        ) from None
    except Exception as err:  # noqa: BLE001 - a refusal (a login needed, not an MLflow server): said in one line
        raise TrackingUnavailable(f"tracking server {redact_uri(uri)} refused a first call: {first_line(err)}; "
                                  "check tracking.uri and its credentials") from None


def _probe_database(uri: str, retry_s: float) -> None:
    """Connect to the database server once (each try waits a few seconds at most), again
    until `retry_s` has passed; then one line with the driver's own reason."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from rcpforge.trainers.contract.redact import redact_uri

    deadline = time.monotonic() + retry_s
    timeout = max(1, min(5, int(retry_s)))
    # psycopg, psycopg2, pymysql and mysqlclient all take connect_timeout (seconds)
    engine = create_engine(uri, poolclass=NullPool, connect_args={"connect_timeout": timeout})
    try:
        while True:
            try:
                with engine.connect():
                    return
            except Exception as err:  # noqa: BLE001 - any refusal is said in one line below
                cause = getattr(err, "orig", None) or err
                if time.monotonic() + 1.0 > deadline:
                    reason = " ".join(str(cause).split())[:300]
                    raise TrackingUnavailable(
                        f"tracking database {redact_uri(uri)} did not accept a connection within {retry_s:g} s "
                        f"({type(cause).__name__}: {redact_uri(reason)}); check tracking.uri (host, port, "
                        "database name, user and password) or start the database"
                    ) from None
                time.sleep(1.0)
    finally:
        engine.dispose()
