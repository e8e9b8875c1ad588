"""The runs out of and into the tracking store: `rcpforge export` (a runs table, MLCommons
results directories) and `rcpforge import` (results directories as runs)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from orchestrator.cli.app import app, console, err_console, fail, load_campaign_or_fail, load_runs_or_fail
from trainers.contract.uri import redact_uri


@app.command("import")
def import_cmd(
    dirs: List[Path] = typer.Argument(..., help="results directories holding result_<i>.txt files"),
    campaign: str = typer.Option(..., "--campaign", help="the campaign (MLflow experiment) the runs join"),
    recipe: Optional[str] = typer.Option(None, help="recipe name of the runs (default: each folder's parent's name)"),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", help="default: sqlite rcpforge-mlflow.db here"),
) -> None:
    """Read results directories (a published MLPerf submission, an export) as runs."""
    import re

    from orchestrator.results_dirs import ResultsError, import_results
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
    console.print(f"tracking store: {redact_uri(uri)}")


@app.command()
def export(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    parquet: Path = typer.Option(None, "--parquet", help="write the runs table (one row per run) to this Parquet file"),
    results: Path = typer.Option(None, "--results", help="write MLCommons results directories <recipe>/bs<batch size>/result_<i>.txt under this folder"),
) -> None:
    """Export a campaign's runs as a table (--parquet) and/or as MLCommons results directories (--results)."""
    if parquet is None and results is None:
        fail("export: give --parquet FILE, --results DIR, or both")
    campaign = load_campaign_or_fail(campaign_file)
    if parquet is not None:
        from analysis.load import write_parquet

        runs = load_runs_or_fail(campaign)
        write_parquet(runs, parquet)
        console.print(f"wrote {parquet} ({runs.num_rows} runs)")
    if results is not None:
        _export_results(campaign, campaign_file, results)


def _export_results(campaign, campaign_file: Path, results: Path) -> None:
    from analysis.load import NoSuchCampaign
    from orchestrator.results_dirs import ResultsError, export_results

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
        f"check one with: rcpforge check DIR --rcps RCP_FILE --submission-runs {campaign.submission_runs}, or "
        f"python -m mlperf_logging.rcp_checker DIR --rcp_usage training --custom_rcps RCP_FILE "
        f"(benchmark {campaign.benchmark} must be known to the checker's submission_runs)",
        highlight=False,
    )
