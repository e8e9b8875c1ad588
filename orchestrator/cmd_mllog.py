"""`rcpforge import`: results directories into the tracking store. (Their export is
`rcpforge export --results`, in cmd_analysis.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from orchestrator.cli_app import app, console, fail


@app.command("import")
def import_cmd(
    dirs: List[Path] = typer.Argument(..., help="results directories holding result_<i>.txt files"),
    campaign: str = typer.Option(..., "--campaign", help="the campaign (MLflow experiment) the runs join"),
    recipe: Optional[str] = typer.Option(None, help="recipe name of the runs (default: each folder's parent's name)"),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", help="default: sqlite rcpforge-mlflow.db here"),
) -> None:
    """Read results directories (a published MLPerf submission, an export) as runs."""
    import re

    from orchestrator.mllog_results import ResultsError, import_results
    from sweeps.spec import DEFAULT_DB

    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", campaign):
        fail(f"--campaign {campaign!r}: use letters, digits, '_', '.', '-' (starting with a letter or digit)")
    uri = tracking_uri or f"sqlite:///{(Path.cwd() / DEFAULT_DB).resolve()}"
    try:
        summary = import_results(dirs, campaign, uri, recipe)
    except ResultsError as err:
        fail(str(err))
    for (name, bs), count in sorted(summary.cells.items()):
        console.print(f"{name} bs {bs}: {count} runs imported")
    console.print(f"campaign {campaign}: {summary.imported} runs imported, {summary.already} already there")
    console.print(f"tracking store: {uri}")
