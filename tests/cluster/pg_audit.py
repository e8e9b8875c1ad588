"""Who changed the schema of a PostgreSQL tracking database, and when: an event trigger
(installed as the cluster's superuser, which the dev server's trust login gives on
127.0.0.1) records every DDL command with its time and session, in a schema of its own
that MLflow never looks at."""

from __future__ import annotations

import uuid
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from tests.conftest import missing_service

_INSTALL = """
CREATE SCHEMA IF NOT EXISTS rcpf_audit;
CREATE TABLE IF NOT EXISTS rcpf_audit.ddl (
    at timestamptz NOT NULL DEFAULT clock_timestamp(), tag text, object text, backend_pid int);
CREATE OR REPLACE FUNCTION rcpf_audit.record() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE c record;
BEGIN
  FOR c IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
    IF c.schema_name IS DISTINCT FROM 'rcpf_audit' THEN
      INSERT INTO rcpf_audit.ddl (tag, object, backend_pid) VALUES (c.command_tag, c.object_identity, pg_backend_pid());
    END IF;
  END LOOP;
END $$;
DROP EVENT TRIGGER IF EXISTS rcpf_audit_ddl;
CREATE EVENT TRIGGER rcpf_audit_ddl ON ddl_command_end EXECUTE FUNCTION rcpf_audit.record();
"""


@dataclass(frozen=True)
class Ddl:
    at: datetime
    tag: str
    object: str
    backend_pid: int


def _connect(backend_uri: str, dbname: str):
    import psycopg2

    parts = urlsplit(backend_uri)
    try:
        conn = psycopg2.connect(host=parts.hostname, port=parts.port, user="postgres", dbname=dbname)
    except psycopg2.OperationalError as err:
        missing_service(f"no superuser login to the tracking PostgreSQL (needed to audit DDL): {err}")
    conn.autocommit = True
    return conn


def database_of(backend_uri: str) -> str:
    return urlsplit(backend_uri).path.lstrip("/")


def install(backend_uri: str, dbname: str | None = None) -> None:
    """Start recording DDL in `dbname` (default: the URI's own database), from now on."""
    with closing(_connect(backend_uri, dbname or database_of(backend_uri))) as conn, conn.cursor() as cur:
        cur.execute(_INSTALL)
        cur.execute("DELETE FROM rcpf_audit.ddl")


def recorded(backend_uri: str, dbname: str | None = None) -> list[Ddl]:
    with closing(_connect(backend_uri, dbname or database_of(backend_uri))) as conn, conn.cursor() as cur:
        cur.execute("SELECT at, tag, object, backend_pid FROM rcpf_audit.ddl ORDER BY at")
        return [Ddl(*row) for row in cur.fetchall()]


def query(backend_uri: str, sql: str, params: tuple = (), dbname: str | None = None) -> list[tuple]:
    with closing(_connect(backend_uri, dbname or database_of(backend_uri))) as conn, conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


@contextmanager
def fresh_database(backend_uri: str):
    """A new, empty database owned by the URI's user, with DDL recorded from its first
    statement; yields the URI that points at it; dropped afterwards."""
    parts = urlsplit(backend_uri)
    name = f"rcpf_fresh_{uuid.uuid4().hex[:10]}"
    admin = _connect(backend_uri, "postgres")
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE {name} OWNER "{parts.username}"')
        install(backend_uri, name)
        yield parts._replace(path=f"/{name}").geturl()
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()
