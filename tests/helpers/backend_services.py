"""What each backend kind needs running for a test: its session fixture (the dev Slurm,
a Ray instance of this test session), shared by the backend conformance suites."""

from __future__ import annotations

from typing import Any

# kind -> the fixture that provides its service (for Ray: the address to join)
SERVICES = {"ray": "ray_address", "slurm": "slurm"}


def with_service(request: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """The `backend:` section `settings` once its kind's service is up; a Ray section
    joins the session's Ray instance."""
    settings = dict(settings)
    kind = settings["kind"]
    if kind in SERVICES:
        provided = request.getfixturevalue(SERVICES[kind])
        if kind == "ray":
            settings["address"] = provided
    return settings
