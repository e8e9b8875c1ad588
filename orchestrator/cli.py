"""The `rcpforge` command line: the app, with every command module registered."""

from __future__ import annotations

import sys

from orchestrator.cli_app import app
# each module registers its commands on `app`
from orchestrator import cmd_analysis, cmd_mllog, cmd_report, cmd_run, cmd_status, cmd_tune  # noqa: F401


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
