"""The `rcpforge` command line. Heavy imports (torch, mlflow) happen inside commands, so
`--help` and campaign validation stay fast."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Precision-vs-convergence campaigns and MLPerf RCPs.")
# Off a terminal (CI, Slurm logs) rich would wrap at 80 columns and cut table cells.
console = Console() if Console().is_terminal else Console(width=160, soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def _fail(message: str) -> None:
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _load(path: Path):
    from sweeps.spec import CampaignError, load_campaign

    try:
        return load_campaign(path)
    except CampaignError as err:
        _fail(str(err))


@app.command()
def run(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    workers: Optional[int] = typer.Option(None, min=1, help="worker processes (default: backend.workers)"),
    retry_failed: bool = typer.Option(False, help="launch again the runs that failed on every attempt"),
) -> None:
    """Launch every run of the campaign that has no outcome yet."""
    campaign = _load(campaign_file)
    from orchestrator.campaign import CampaignBusy, run_campaign
    from orchestrator.progress import RunProgress

    progress = RunProgress(console)
    try:
        summary = run_campaign(
            campaign, workers=workers, retry_failed=retry_failed, on_event=progress.on_event, on_plan=progress.on_plan
        )
    except CampaignBusy as err:
        _fail(str(err))
    except KeyboardInterrupt:
        progress.close()
        err_console.print("interrupted: runs in flight were stopped; `rcpforge run` again resumes the campaign")
        raise typer.Exit(130)
    finally:
        progress.close()
    if summary.launched == 0:
        console.print(f"campaign {campaign.name}: nothing to launch, every run has an outcome or no attempts left")
    else:
        counts = ", ".join(f"{v} {k}" for k, v in sorted(summary.statuses.items()))
        console.print(f"campaign {campaign.name}: launched {summary.launched} runs; {counts}")
    console.print(f"tracking store: {campaign.tracking_uri}")


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


@app.command()
def analyze(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    out: Path = typer.Option(Path("rcpforge-analysis"), "--out", help="folder for the RCP files and table"),
) -> None:
    """Write MLCommons RCP files per recipe and the RCP table; print the table."""
    campaign = _load(campaign_file)
    from analysis.load import NoSuchCampaign, load_runs
    from analysis.rcp_table import rcp_records, rcp_table, write_rcp_file, write_table_csv

    try:
        runs = load_runs(campaign.tracking_uri, campaign.name)
    except NoSuchCampaign as err:
        _fail(str(err))
    table = rcp_table(runs, campaign.benchmark, campaign.submission_runs)
    written = []
    for recipe in campaign.recipes:
        records = rcp_records(runs, recipe.name, campaign.benchmark, campaign.hparams)
        if records:
            path = out / f"rcps_{campaign.name}_{recipe.name}.json"
            write_rcp_file(path, records)
            written.append(path)
    write_table_csv(out / "rcp_table.csv", table)
    _print_table(table, f"RCP table: {campaign.name} (benchmark {campaign.benchmark}, N = {campaign.submission_runs}, samples to converge)")
    for path in written:
        console.print(f"wrote {path}")
    console.print(f"wrote {out / 'rcp_table.csv'}")
    incomplete = [r for r in table.to_pylist() if r["converged"] < r["runs"]]
    for r in incomplete:
        err_console.print(
            f"note: {r['recipe']} bs {r['batch_size']}: {r['converged']} of {r['runs']} runs converged; "
            "no RCP is written for an incomplete cell"
        )


def _print_table(table, title: str) -> None:
    view = Table(title=title)
    for col in ("recipe", "batch size", "runs", "conv.", "not conv.", "diverged", "olympic mean", "stdev", "min acc. mean", "max speedup"):
        view.add_column(col, justify="left" if col == "recipe" else "right")
    for r in table.to_pylist():
        view.add_row(
            r["recipe"], str(r["batch_size"]), str(r["runs"]), str(r["converged"]), str(r["not_converged"]),
            str(r["diverged"]), _fmt(r["olympic_mean"]), _fmt(r["stdev"]), _fmt(r["min_acceptable_mean"]),
            _fmt(r["max_speedup"], 4),
        )
    console.print(view)


@app.command()
def recipes(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """List the precision recipes with their formats and options."""
    from trainers.recipes import RECIPES

    rows = [r.summary() for r in RECIPES.values()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    view = Table(title="recipes")
    for col in ("name", "x", "W", "dY", "options", "description"):
        view.add_column(col)
    for r in rows:
        view.add_row(r["name"], r["x"], r["w"], r["dy"], ", ".join(r["options"]) or "-", r["description"])
    console.print(view)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
