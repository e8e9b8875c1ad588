"""The `tracking:` section of a campaign: the MLflow tracking store its runs are
recorded in, and how long an outage of it is waited out. Torch-free.

    tracking: {uri: sqlite:///...}           # default: rcpforge-mlflow.db beside the campaign file
    tracking: {uri: http://mlflow:5000, retry_s: 600}
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rcpforge.trainers.contract.uri import uri_form_problem

DEFAULT_DB = "rcpforge-mlflow.db"


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
