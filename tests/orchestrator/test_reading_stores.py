"""The reading commands on a store that is there but holds no runs of the campaign (issue
38): a real MLflow tracking server without the campaign's experiment, and a real
PostgreSQL database MLflow never set up. status, analyze, report and export answer in one
line (exit 2) naming the campaign and the store; plan predicts from no runs (exit 0).
Either way no experiment appears on the server, no table in the database, no file beside
the campaign. One server for the module (the session's `mlflow_server`, whose PostgreSQL
also holds the empty database), the CLI in this process."""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.cli import invoke, one_line_usage_error
from tests.orchestrator.test_reading_commands import READERS, _tree


@pytest.fixture(scope="module")
def empty_database(mlflow_server):
    """A fresh database on the server's PostgreSQL, without MLflow's tables (made by its
    superuser, whom the dev server trusts on 127.0.0.1), dropped after the module."""
    from sqlalchemy import create_engine, text

    port = urlsplit(mlflow_server.backend_uri.replace("+psycopg2", "")).port
    admin = create_engine(f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres", isolation_level="AUTOCOMMIT")
    name = f"words_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


def _tables(uri: str) -> list[str]:
    from sqlalchemy import create_engine, inspect

    engine = create_engine(uri)
    try:
        return sorted(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _experiments(url: str) -> list[str]:
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    return sorted(e.name for e in MlflowClient(tracking_uri=url).search_experiments(view_type=ViewType.ALL))


@pytest.fixture
def stores(mlflow_server, empty_database):
    """kind -> (the store's URI, what the store holds now)"""
    return {"server": (mlflow_server.url, lambda: _experiments(mlflow_server.url)),
            "postgresql": (empty_database, lambda: _tables(empty_database))}


def _campaign(tmp_path: Path, uri: str) -> Path:
    name = f"readers_{uuid.uuid4().hex[:8]}"  # never run anywhere
    return write_campaign(tmp_path / "campaign", tiny_campaign(name=name, tracking={"uri": uri}))


@pytest.mark.parametrize("kind", ["server", "postgresql"])
def test_reading_commands_on_a_store_without_the_campaign_are_one_line_and_make_nothing(kind, stores, tmp_path):
    uri, holds = stores[kind]
    path = _campaign(tmp_path, uri)
    name = path.read_text().split("name: ", 1)[1].split()[0]
    before, files = holds(), _tree(tmp_path)
    if kind == "postgresql":
        assert before == []  # the check below is not vacuous: a reading MLflow client would make ~20 tables
    for command in READERS:
        args = [a.format(tmp=tmp_path) for a in command[1:]]
        one_line_usage_error(invoke(command[0], str(path), *args), f"no runs of campaign {name} at ",
                             f": run `rcpforge run {path}` first, or check tracking.uri")
        assert holds() == before, command
    planned = invoke("plan", str(path))
    assert planned.exit_code == 0 and "runs per recipe to reach each precision" in planned.output, planned.output
    assert holds() == before and name not in holds()
    assert _tree(tmp_path) == files
