"""The `rcpforge` Typer app and what every command shares. Commands live in
`orchestrator/cmd_*.py`, one module per area, and register on `app`. Heavy imports
(torch, mlflow) happen inside commands, so `--help` and campaign validation stay fast."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Precision-vs-convergence campaigns and MLPerf RCPs.")
# Off a terminal (CI, Slurm logs) rich would wrap at 80 columns and cut table cells.
console = Console() if Console().is_terminal else Console(width=160, soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def fail(message: str) -> NoReturn:
    """One line on stderr, exit status 2: how every command reports bad input."""
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def load_campaign_or_fail(path: Path):
    from sweeps.spec import CampaignError, load_campaign

    try:
        return load_campaign(path)
    except CampaignError as err:
        fail(str(err))
