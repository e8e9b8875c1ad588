"""`rcpforge import` (results directories into the tracking store) and
`rcpforge export-results` (a campaign's runs as MLCommons results directories)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from orchestrator.cli_app import app, console, err_console, fail, load_campaign_or_fail


@app.command("export-results")
def export_results_cmd(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    results: Path = typer.Option(..., "--results", help="folder for <recipe>/bs<batch size>/result_<i>.txt"),
) -> None:
    """Write one MLCommons results directory per (recipe, batch size) of a campaign."""
    campaign = load_campaign_or_fail(campaign_file)
    from analysis.load import NoSuchCampaign
    from orchestrator.mllog_results import ResultsError, export_results

    try:
        cells = export_results(campaign.tracking_uri, campaign.name, results, campaign.run_dir)
    except (NoSuchCampaign, ResultsError) as err:
        fail(str(err))
    if not cells:
        fail(f"campaign {campaign.name} has no run with an outcome yet; run `rcpforge run {campaign_file}` first")
    for cell in cells:
        console.print(f"{cell.folder}: {cell.files} result files ({cell.recipe}, batch size {cell.batch_size})")
        if cell.left_out:
            err_console.print(f"note: {cell.recipe} bs {cell.batch_size}: {cell.left_out} runs without an outcome left out")
    console.print(
        f"check one with: python -m mlperf_logging.rcp_checker DIR --rcp_usage training --custom_rcps RCP_FILE "
        f"(benchmark {campaign.benchmark} must be known to the checker's submission_runs)"
    )


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
