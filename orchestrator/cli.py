"""The `rcpforge` command line: the app, with every command module registered."""

from __future__ import annotations

import sys

from orchestrator.cli_app import app
from orchestrator import cmd_analysis, cmd_run, cmd_status  # noqa: F401  (they register their commands)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
