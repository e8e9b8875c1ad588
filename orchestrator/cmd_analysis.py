"""`rcpforge analyze` and `rcpforge export`: what a campaign's runs mean, and the runs
themselves as a table."""

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
    out: Path = typer.Option(Path("rcpforge-analysis"), "--out", help="folder for the RCP files, tables and reports"),
    reference: str = typer.Option("bf16", "--reference", help="the reference recipe of the convergence factors"),
    seed: int = typer.Option(0, "--seed", help="seed of the bootstrap and Monte Carlo"),
    resamples: int = typer.Option(10_000, "--resamples", min=100, help="bootstrap resamples"),
    reference_rcps: str = typer.Option(
        None, "--reference-rcps",
        help="derive the candidates' RCPs from this RCP file (or ruleset, for the campaign's benchmark) instead of the campaign's reference RCPs",
    ),
) -> None:
    """Write the RCP table, RCP files per recipe, factors, selection statistics and a summary."""
    campaign = load_campaign_or_fail(campaign_file)
    from analysis.analyze import AnalysisRequest, analyze_runs
    from analysis.selection import SelectionSettings

    raw_reference = _reference_rcps_or_fail(reference_rcps, campaign.benchmark) if reference_rcps else None
    runs = _load_or_fail(campaign)
    request = AnalysisRequest(
        campaign=campaign.name, benchmark=campaign.benchmark, submission_runs=campaign.submission_runs,
        recipes=[r.name for r in campaign.recipes], hparams=campaign.hparams, reference=reference,
        resamples=resamples, seed=seed, selection=SelectionSettings(seed=seed), reference_rcps=raw_reference,
    )
    result = analyze_runs(runs, request, out)
    table = result.table
    _print_table(table, f"RCP table: {campaign.name} (benchmark {campaign.benchmark}, N = {campaign.submission_runs}, samples to converge)")
    for path in result.written:
        console.print(f"wrote {path}")
    for note in result.notes:
        err_console.print(f"note: {note}")
    incomplete = [r for r in table.to_pylist() if r["converged"] < r["runs"]]
    for r in incomplete:
        err_console.print(
            f"note: {r['recipe']} bs {r['batch_size']}: {r['converged']} of {r['runs']} runs converged; "
            "no RCP is written for an incomplete cell"
        )


def _reference_rcps_or_fail(source: str, benchmark: str) -> dict:
    import json

    from analysis.rcp_set import RULESETS, RcpError, ruleset_file

    try:
        path = ruleset_file(source, benchmark) if source in RULESETS else Path(source)
        raw = json.loads(path.read_text())
    except (OSError, ValueError, RcpError) as err:
        fail(f"--reference-rcps {source!r}: cannot read RCPs ({err})")
    if not isinstance(raw, dict) or not all(isinstance(r, dict) and "BS" in r and "Benchmark" in r for r in raw.values()):
        fail(f"--reference-rcps {source!r}: not an MLCommons RCP file (records need Benchmark and BS)")
    return raw


def _load_or_fail(campaign):
    from analysis.load import NoSuchCampaign, load_campaign_runs

    try:
        return load_campaign_runs(campaign.tracking_uri, campaign.name)
    except NoSuchCampaign as err:
        fail(str(err))


@app.command()
def export(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    parquet: Path = typer.Option(..., "--parquet", help="write the runs table (one row per run) to this Parquet file"),
) -> None:
    """Export a campaign's runs as a table."""
    campaign = load_campaign_or_fail(campaign_file)
    from analysis.load import write_parquet

    runs = _load_or_fail(campaign)
    write_parquet(runs, parquet)
    console.print(f"wrote {parquet} ({runs.num_rows} runs)")


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
