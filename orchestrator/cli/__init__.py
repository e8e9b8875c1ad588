"""The `rcpforge` command line: one module per command group, each registering its
commands on the one Typer app (`app.py`)."""

from __future__ import annotations

import sys

from rcpforge.orchestrator.cli.app import app
# each module registers its commands on `app`
from rcpforge.orchestrator.cli import analysis, plan, policy, recipes, report, results, round, run, status, tune  # noqa: F401,E402

__all__ = ["app", "main"]


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
