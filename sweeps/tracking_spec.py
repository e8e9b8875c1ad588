"""The `tracking:` section of a campaign: the MLflow tracking store its runs are
recorded in, and how long an outage of it is waited out. Torch-free.

    tracking: {uri: sqlite:///...}           # default: rcpforge-mlflow.db beside the campaign file
    tracking: {uri: http://mlflow:5000, retry_s: 600}
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rcpforge.trainers.contract.uri import uri_form_problem

DEFAULT_DB = "rcpforge-mlflow.db"
SQLITE = "sqlite:///"


def beside(uri: str, base_dir: Path) -> str:
    """A relative SQLite path (`sqlite:///my-store.db`) as a path beside the campaign file
    (`base_dir`), as the default store and relative argv and workdir are, wherever a
    command runs from; any other URI as it is."""
    if not uri.startswith(SQLITE) or uri.startswith(SQLITE + "/") or uri[len(SQLITE):].startswith(":memory:"):
        return uri
    path, sep, query = uri[len(SQLITE):].partition("?")
    return f"{SQLITE}{(base_dir / path).resolve()}{sep}{query}"


class TrackingSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    uri: str | None = None
    # How long the orchestrator and every worker keep retrying a tracking store that is
    # unavailable (a server restarting, a locked SQLite file) before giving up with an
    # error that names it; a worker that gives up fails its run's attempt.
    retry_s: float = Field(600.0, gt=0, le=86_400)

    @field_validator("uri")
    @classmethod
    def _uri_form(cls, value: str | None) -> str | None:
        problem = uri_form_problem(value) if value else None
        if problem:
            raise ValueError(problem)
        return value
