"""The retry policy of every call to the tracking store: an unavailable store (a
restarting server, a locked SQLite file) is waited out for `retry_s`, then named in one
`TrackingUnavailable` line."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlflow import MlflowClient

# MLflow rejects tag values above 8000 characters.
MAX_TAG = 7000


def sqlite_uri(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


_log = logging.getLogger("rcpforge.tracking")

# How long a call waits for an unavailable tracking store before giving up: a tracking
# server restart or a SQLite file locked by a backup takes seconds to minutes, and a run
# that gave up fails its attempt. A campaign sets its own in `tracking.retry_s`.
DEFAULT_RETRY_S = 600.0
_MAX_DELAY_S = 10.0

# Errors that retrying cannot fix: the request itself is wrong.
_PERMANENT = {"INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST", "RESOURCE_ALREADY_EXISTS", "BAD_REQUEST",
              "INVALID_STATE", "PERMISSION_DENIED", "UNAUTHENTICATED"}


class TrackingUnavailable(RuntimeError):
    """The tracking store stayed unreachable for the whole retry window."""


def _transient(err: Exception) -> bool:
    code = getattr(err, "error_code", None)
    return code not in _PERMANENT and not isinstance(err, TrackingUnavailable)


def _first_line(err: Exception) -> str:
    """The error on one line, its head and its tail: an HTTP client's message puts the
    cause ("Connection refused") at the end of a long line. A URI in it is shown
    without its password."""
    from trainers.contract.uri import redact_uri

    text = redact_uri(" ".join(str(err).split()))
    if len(text) > 300:
        text = f"{text[:150]} ... {text[-120:]}"
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class _RetryingClient:
    """An MlflowClient whose calls are retried with exponential backoff (0.5 s doubling
    to 10 s) while the store is unavailable (a SQLite file locked past its busy timeout, a
    tracking server stopped or restarting), for at most `retry_s` seconds per call; then
    `TrackingUnavailable` names the store and says what to do. A run's result is not
    lost to a hiccup of the tracking store, and a store that stays down ends the
    campaign with a clear message instead of hanging it."""

    def __init__(self, client: MlflowClient, uri: str, retry_s: float = DEFAULT_RETRY_S, first_delay_s: float = 0.5):
        self._client = client
        self._uri = uri
        self._retry_s = retry_s
        self._first_delay_s = first_delay_s

    @property
    def raw(self) -> MlflowClient:
        return self._client

    def __getattr__(self, name: str):
        method = getattr(self._client, name)
        if not callable(method):
            return method
        return lambda *args, **kwargs: self.retry(name, lambda: method(*args, **kwargs))

    def retry(self, what: str, call):
        """`call()` under the retry policy; `what` names it in the log."""
        from trainers.contract.uri import redact_uri

        deadline = time.monotonic() + self._retry_s
        delay = self._first_delay_s
        while True:
            try:
                return call()
            except Exception as err:  # noqa: BLE001 - classified just below
                if not _transient(err):
                    raise
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TrackingUnavailable(
                        f"tracking store {redact_uri(self._uri)} unavailable for {self._retry_s:g} s "
                        f"(tracking.retry_s), last error on {what}: {_first_line(err)}; start it again or fix "
                        "tracking.uri, then run the command again (`rcpforge run` resumes the campaign)"
                    ) from err
                pause = min(delay, left)
                _log.warning("tracking store unavailable: %s (%s); retrying %s in %.1f s, for up to %.0f s more",
                             redact_uri(self._uri), _first_line(err), what, pause, left)
                time.sleep(pause)
                delay = min(delay * 2, _MAX_DELAY_S)


def retrying_client(uri: str, retry_s: float = DEFAULT_RETRY_S) -> MlflowClient:
    from mlflow import MlflowClient

    if uri.startswith(("http://", "https://")):
        # MLflow's HTTP client retries a refused connection itself, 7 times over about 4
        # minutes per call, which would stretch our window unpredictably: the retry
        # policy is ours. A value the user set is kept.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    return _RetryingClient(MlflowClient(tracking_uri=uri), uri, retry_s)  # type: ignore[return-value]
