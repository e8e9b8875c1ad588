"""The `rcpforge` command line: the app, with every command module registered."""

from __future__ import annotations

import sys

from orchestrator.cli_app import app
from orchestrator import cmd_analysis, cmd_run  # noqa: F401  (they register their commands)
from orchestrator import cmd_tune  # noqa: F401


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
