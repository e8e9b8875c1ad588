"""The retry policy of every call to a tracking store, the orchestrator's writes and the
analysis' reads alike: an unavailable store (a restarting server, a locked SQLite file)
is waited out for `retry_s`, then named in one `TrackingUnavailable` line.

Torch- and mlflow-free: the caller hands `under_retry_policy` the MLflow client class
it imported (`orchestrator/tracking/client.py`, `analysis/load.py`)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from rcpforge.trainers.contract.redact import redact_uri

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


# Python errors that say the call itself is wrong (a bug, bad data), never the store's state.
_PROGRAMMING = (TypeError, AttributeError, NameError, KeyError, IndexError, AssertionError, NotImplementedError)
# A database's refusal of the data or the statement, by the names the DB-API gives them:
# sqlite3's and psycopg2's own (and their subclasses), and SQLAlchemy's wrappers alike.
_REFUSED = {"IntegrityError", "DataError", "ProgrammingError"}


def _transient(err: Exception) -> bool:
    """Whether waiting can help: not an MLflow refusal of the request, not a programming
    error, and not a database's refusal of the data (a constraint, a bad statement),
    which MLflow's SQL store reports as INTERNAL_ERROR like a lost connection; the
    cause is in the exception's chain."""
    if isinstance(err, TrackingUnavailable) or getattr(err, "error_code", None) in _PERMANENT:
        return False
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, _PROGRAMMING) or any(c.__name__ in _REFUSED for c in type(cause).__mro__):
            return False
        cause = cause.__cause__ or cause.__context__
    return True


def first_line(err: Exception) -> str:
    """The error on one line, its head and its tail: an HTTP client's message puts the
    cause ("Connection refused") at the end of a long line. A URI in it is shown
    without its password."""
    text = redact_uri(" ".join(str(err).split()))
    if len(text) > 300:
        text = f"{text[:150]} ... {text[-120:]}"
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class RetryingClient:
    """An MlflowClient whose calls are retried with exponential backoff (0.5 s doubling
    to 10 s) while the store is unavailable (a SQLite file locked past its busy timeout, a
    tracking server stopped or restarting), for at most `retry_s` seconds per call; then
    `TrackingUnavailable` names the store and says what to do. A run's result is not
    lost to a hiccup of the tracking store, and a store that stays down ends the
    campaign with a clear message instead of hanging it."""

    def __init__(self, client: Any, uri: str, retry_s: float = DEFAULT_RETRY_S, first_delay_s: float = 0.5,
                 log_retries: bool = True):
        self._client = client
        self._log_retries = log_retries
        self._uri = uri
        self._retry_s = retry_s
        self._first_delay_s = first_delay_s

    @property
    def raw(self) -> Any:
        return self._client

    def __getattr__(self, name: str):
        method = getattr(self._client, name)
        if not callable(method):
            return method
        return lambda *args, **kwargs: self.retry(name, lambda: method(*args, **kwargs))

    def retry(self, what: str, call):
        """`call()` under the retry policy; `what` names it in the log."""
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
                        f"(tracking.retry_s), last error on {what}: {first_line(err)}; start it again or fix "
                        "tracking.uri, then run the command again (`rcpforge run` resumes the campaign)"
                    ) from err
                pause = min(delay, left)
                if self._log_retries:
                    _log.warning("tracking store unavailable: %s (%s); retrying %s in %.1f s, for up to %.0f s more",
                                 redact_uri(self._uri), first_line(err), what, pause, left)
                time.sleep(pause)
                delay = min(delay * 2, _MAX_DELAY_S)


Client = TypeVar("Client")


def under_retry_policy(client_class: Callable[..., Client], uri: str, retry_s: float = DEFAULT_RETRY_S,
                       log_retries: bool = True) -> Client:
    """`client_class(tracking_uri=uri)` (MLflow's client) with every call under the retry policy."""
    if uri.startswith(("http://", "https://")):
        # MLflow's HTTP client retries a refused connection itself, 7 times over about 4
        # minutes per call, which would stretch our window unpredictably: the retry
        # policy is ours. A value the user set is kept.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    return RetryingClient(client_class(tracking_uri=uri), uri, retry_s,  # type: ignore[return-value]
                          log_retries=log_retries)
