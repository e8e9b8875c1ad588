"""`rcpforge analyze`: RCP files and the RCP table of a campaign."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from orchestrator.cli_app import app, console, err_console, fail, load_campaign_or_fail


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


@app.command()
def analyze(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    out: Path = typer.Option(Path("rcpforge-analysis"), "--out", help="folder for the RCP files and table"),
) -> None:
    """Write MLCommons RCP files per recipe and the RCP table; print the table."""
    campaign = load_campaign_or_fail(campaign_file)
    from analysis.load import NoSuchCampaign, load_runs
    from analysis.rcp_table import rcp_records, rcp_table, write_rcp_file, write_table_csv

    try:
        runs = load_runs(campaign.tracking_uri, campaign.name)
    except NoSuchCampaign as err:
        fail(str(err))
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


# `check` and `rcp-stats` live beside; importing them here registers them without
# touching the shared import line in orchestrator/cli.py.
from orchestrator import cmd_check  # noqa: E402,F401
