from __future__ import annotations

import pytest

from orchestrator.tracking import _RetryingClient


class _Flaky:
    def __init__(self, failures: int, error: Exception):
        self.failures = failures
        self.error = error
        self.calls = 0

    def log_batch(self, run_id):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return run_id


class _Coded(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.error_code = code


def test_transient_errors_are_retried_until_the_store_answers():
    flaky = _Flaky(3, RuntimeError("database is locked"))
    client = _RetryingClient(flaky, attempts=5, first_delay_s=0.001)
    assert client.log_batch("r1") == "r1"
    assert flaky.calls == 4


def test_retries_give_up_after_the_last_attempt():
    flaky = _Flaky(10, RuntimeError("database is locked"))
    client = _RetryingClient(flaky, attempts=3, first_delay_s=0.001)
    with pytest.raises(RuntimeError, match="locked"):
        client.log_batch("r1")
    assert flaky.calls == 3


def test_a_wrong_request_is_not_retried():
    flaky = _Flaky(10, _Coded("INVALID_PARAMETER_VALUE"))
    client = _RetryingClient(flaky, attempts=5, first_delay_s=0.001)
    with pytest.raises(_Coded):
        client.log_batch("r1")
    assert flaky.calls == 1
