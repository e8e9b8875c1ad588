"""The statements rcpforge runs on MLflow's SQL store itself, one text for every database:
no MLflow import (its ORM models live in the `mlflow` package, whose import is about 1.5 s
of CPU), no schema of ours (the tables are MLflow's, made and migrated by MLflow; only
the names of the columns written or read appear in the statements).

A statement is written once, in standard SQL: identifiers in double quotes where they are
words some database reserves (`"key"`, `"value"`, `"timestamp"`), values bound by name
(`:run`). It runs on a connection of SQLAlchemy (PostgreSQL, MySQL, MSSQL, SQLite) or,
for a worker's own run on a SQLite file, of Python's sqlite3 alone (`SqliteFile`): a
Slurm job then imports neither MLflow nor SQLAlchemy (about 0.2 s of its CPU).

Written by the database store's write strategy (`bulk.py`) and by a worker's own run on
a database store (`direct.py`), the same statements for both."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

_LARGEST = 1.7976931348623157e308  # SQL has no infinity: MLflow stores the largest float instead


def stored_value(value: float) -> tuple[bool, float]:
    """(is NaN, the value as stored), by MLflow's SQL store's rule: NaN is stored as 0 with
    its flag, an infinity as the largest float of its sign."""
    if math.isnan(value):
        return True, 0.0
    if math.isinf(value):
        return False, _LARGEST if value > 0 else -_LARGEST
    return False, value


def among(name: str, values: Iterable[Any]) -> tuple[str, dict[str, Any]]:
    """`IN (...)` of `values` as named parameters (`:name0, :name1, ...`), and those
    parameters: a list binds the same way on every database and library."""
    params = {f"{name}{i}": value for i, value in enumerate(values)}
    return f"IN ({', '.join(':' + p for p in params)})", params


class Sql:
    """Statements on one connection in one transaction, whichever library holds it."""

    def __init__(self, run: Any, many: Any, quote: str = '"'):
        self._run, self._many, self._quote = run, many, quote

    def _text(self, sql: str) -> str:
        # MySQL quotes identifiers with backquotes (double quotes are strings there)
        return sql if self._quote == '"' else sql.replace('"', self._quote)

    def rows(self, sql: str, **params: Any) -> list[tuple]:
        return [tuple(row) for row in self._run(self._text(sql), params)]

    def run(self, sql: str, **params: Any) -> None:
        self._run(self._text(sql), params)

    def many(self, sql: str, rows: Sequence[dict[str, Any]]) -> None:
        """The statement once per row of parameters (an insert of many rows)."""
        if rows:
            self._many(self._text(sql), rows)


class SqliteFile:
    """A SQLite store opened with Python's sqlite3, one connection, opened when first used
    and set up as MLflow's own SQLite sessions are (foreign keys enforced, a writer waiting
    up to 20 s for another's lock: many workers write one file). One per process: direct.py
    keys its engines by the process, so a connection is never shared across a fork."""

    def __init__(self, path: str):
        self.path = path
        self._conn: Any = None

    def connection(self) -> Any:
        import sqlite3

        if self._conn is None:
            self._conn = sqlite3.connect(self.path, timeout=20.0, isolation_level=None)  # transactions: ours
            self._conn.execute("PRAGMA foreign_keys = ON")
        return self._conn


def sqlite_file(uri: str) -> SqliteFile | None:
    """A plain `sqlite:///<path>` store as a `SqliteFile`; None for any other URI (another
    database, or SQLite with driver options in a query string: SQLAlchemy reads those)."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix) or "?" in uri or len(uri) == len(prefix):
        return None
    return SqliteFile(uri[len(prefix):])


@contextmanager
def transaction(engine: Any) -> Iterator[Sql]:
    """Statements in one transaction: committed on the way out, rolled back on an error.
    `engine`: a `SqliteFile` or an SQLAlchemy engine (MLflow's store's, or a worker's own);
    on SQLAlchemy's SQLite, set up as `SqliteFile` is."""
    if isinstance(engine, SqliteFile):
        conn = engine.connection()
        conn.execute("BEGIN")
        try:
            yield Sql(lambda sql, params: conn.execute(sql, params).fetchall(), conn.executemany)
            conn.execute("COMMIT")  # a COMMIT refused (the file locked past the wait) rolls back too
        except BaseException:
            if conn.in_transaction:  # SQLite ends some failed transactions itself
                conn.execute("ROLLBACK")
            raise
        return
    from sqlalchemy import text

    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA foreign_keys = ON")
            conn.exec_driver_sql("PRAGMA busy_timeout = 20000")

        def run(sql: str, params: dict[str, Any]) -> list:
            result = conn.execute(text(sql), params)
            return result.all() if result.returns_rows else []

        yield Sql(run, lambda sql, rows: conn.execute(text(sql), list(rows)),
                  quote="`" if engine.dialect.name in ("mysql", "mariadb") else '"')
