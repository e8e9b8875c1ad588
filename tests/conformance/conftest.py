"""The tracking store of every kind (`tests/helpers/tracking_stores.py`), a test apiece:
each test that takes `store` runs once per kind."""

from __future__ import annotations

import pytest

from tests.helpers.tracking_stores import STORE_KINDS, sqlite_template, tracking_store


@pytest.fixture(scope="session")
def _empty_sqlite(tmp_path_factory):
    return sqlite_template(tmp_path_factory.mktemp("sqlite-template"))


@pytest.fixture(params=STORE_KINDS)
def store(request, tmp_path):
    kind = request.param
    server = None if kind == "sqlite" else request.getfixturevalue("mlflow_server")
    template = request.getfixturevalue("_empty_sqlite") if kind == "sqlite" else None
    with tracking_store(kind, tmp_path, server, template) as supplied:
        yield supplied
