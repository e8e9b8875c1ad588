"""The `rcpforge` command line: one module per command group, each registering its
commands on the one Typer app (`app.py`)."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

from rcpforge.orchestrator.cli.app import app
# each module registers its commands on `app`
from rcpforge.orchestrator.cli import analysis, plan, policy, recipes, report, results, round, run, status, tune  # noqa: F401,E402

__all__ = ["app", "main"]


def main() -> NoReturn:
    try:
        app()
    except KeyboardInterrupt:
        code: object = 130
    except SystemExit as done:
        code = done.code
    else:
        code = 0
    _exit(code)


def _exit(code: object) -> NoReturn:
    """End the command as Python's exit would, without its last step: the teardown of
    every module loaded (MLflow, pandas, scipy, ...), about a second of CPU a command and
    nothing a command needs. What comes before it is done here, in its order: threads
    joined, atexit handlers run (Ray's shutdown, logging's flush, multiprocessing's
    children), the standard streams flushed."""
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)  # sys.exit("message"), as Python prints it
        code = 1
    shutdown = getattr(threading, "_shutdown", None)  # private, but what Python's exit calls first
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
