"""`rcpforge recipes`: the precision recipes a campaign may name."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from orchestrator.cli.app import app, console


@app.command()
def recipes(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """List the precision recipes: the format of each GEMM operand and the options
    (with defaults) a campaign may set as `{recipe: {option: value}}`."""
    from trainers.recipes import RECIPES

    rows = [r.summary() for r in RECIPES.values()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    view = Table(title="recipes", show_lines=True)
    for col in ("name", "x", "W", "dY", "wgrad", "options (default)", "description"):
        view.add_column(col, overflow="fold")
    for r in rows:
        options = "\n".join(f"{k}={json.dumps(v)}" for k, v in r["options"].items())
        view.add_row(r["name"], r["x"], r["w"], r["dy"], r["wgrad"], options, r["description"])
    console.print(view)
