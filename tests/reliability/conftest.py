"""The `mlflow_server` fixture these tests use lives in tests/conftest.py (the cluster
tests need it too); `unavailable` stays importable here for the tests that use it."""

from __future__ import annotations

from tests.conftest import missing_service as unavailable  # noqa: F401
