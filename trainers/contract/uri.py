"""Tracking URIs as written: their form checked before a store is touched (shown with
any password masked by `redact.redact_uri`, the one redaction rule)."""

from __future__ import annotations

import re
from pathlib import Path

from rcpforge.trainers.contract.redact import redact_uri

# The stores MLflow's tracking client opens: SQLAlchemy databases and tracking servers.
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
SERVER_SCHEMES = ("http", "https")
_FORMS = "sqlite:///PATH.db for a file, http(s)://HOST:PORT for an MLflow server, postgresql://USER@HOST/DB"


def scheme_of(uri: str) -> str:
    """A URI's scheme without its driver, in lower case: `postgresql+psycopg2://...` ->
    `postgresql`."""
    return uri.split(":", 1)[0].split("+", 1)[0].lower()


def uri_form_problem(uri: str) -> str | None:
    """What is wrong with a tracking URI as written (no store is touched), with the fix;
    None for a well-formed one. MLflow itself answers a typo with a long traceback, or
    takes a scheme-less string for a file store it then refuses."""
    import difflib

    shown = repr(redact_uri(uri))
    scheme, sep, rest = uri.partition("://")
    base = scheme.split("+", 1)[0].lower()
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        return f"{shown} is not a URI (no scheme://); write {_FORMS}"
    known = (*DATABASE_SCHEMES, *SERVER_SCHEMES, "databricks")
    if base not in known:
        close = difflib.get_close_matches(base, known, n=1)
        hint = f"did you mean {close[0]}://? " if close else ""
        return f"{shown}: unknown scheme {scheme!r}; {hint}write {_FORMS}"
    if base in SERVER_SCHEMES and not rest.split("/", 1)[0]:
        return f"{shown}: no host; write {base}://HOST:PORT"
    if base == "sqlite" and not rest.startswith("/"):
        return f"{shown}: a SQLite URI has three slashes before a relative path, four before an absolute one " \
               "(sqlite:///rel/x.db, sqlite:////abs/x.db)"
    return None


def absent_sqlite_store(uri: str) -> Path | None:
    """The database file of a SQLite URI that names no store yet (no file, or an empty one
    that an earlier failed open left); None for a store that exists or is no SQLite file.
    The commands that only read ask first: opening it through MLflow would make it."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(uri)
    except ArgumentError:
        return None
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    db = Path(url.database)
    return db if not db.exists() or (db.is_file() and db.stat().st_size == 0) else None
