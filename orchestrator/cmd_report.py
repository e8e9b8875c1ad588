"""`rcpforge report`: a campaign's results as one self-contained HTML file or markdown."""

from __future__ import annotations

from pathlib import Path

import typer

from orchestrator.cli_app import app, console, fail, load_campaign_or_fail


@app.command()
def report(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    out: Path = typer.Option(Path("report.html"), "--out", help="the report file"),
    fmt: str = typer.Option("html", "--format", help="html (one self-contained file) or md (PNG files beside it)"),
    reference: str = typer.Option("bf16", "--reference", help="the reference recipe of the convergence factors"),
    seed: int = typer.Option(0, "--seed", help="seed of the bootstrap and Monte Carlo (same as analyze's)"),
) -> None:
    """Write the campaign report: settings, RCP table, curves, distributions, RCP curve."""
    if fmt not in ("html", "md"):
        fail(f"--format must be html or md, got {fmt!r}")
    campaign = load_campaign_or_fail(campaign_file)
    from analysis.campaign_report import build_sections
    from analysis.curves import load_curves, telemetry_metrics
    from analysis.load import NoSuchCampaign, load_runs
    from analysis.rcp_table import rcp_table
    from analysis.report import write_report

    try:
        runs = load_runs(campaign.tracking_uri, campaign.name)
    except NoSuchCampaign as err:
        fail(str(err))
    if runs.num_rows == 0:
        fail(f"campaign {campaign.name} has no runs yet; run `rcpforge run {campaign_file}` first")
    table = rcp_table(runs, campaign.benchmark, campaign.submission_runs)
    run_ids = runs["run_id"].to_pylist()
    telemetry = telemetry_metrics(campaign.tracking_uri, run_ids)
    curves = load_curves(campaign.tracking_uri, run_ids, [campaign.target.metric, *telemetry])
    found, selections = None, None
    if reference in {r.name for r in campaign.recipes}:
        from analysis.analyze import AnalysisRequest, selections_of
        from analysis.factors import factors
        from analysis.selection import SelectionSettings

        found = factors(runs, reference, campaign.benchmark, seed=seed)
        request = AnalysisRequest(
            campaign=campaign.name, benchmark=campaign.benchmark, submission_runs=campaign.submission_runs,
            recipes=[r.name for r in campaign.recipes], hparams=campaign.hparams, reference=reference, seed=seed,
            selection=SelectionSettings(seed=seed),
        )
        selections = selections_of(runs, table, request)
    sections = build_sections(campaign, runs, table, curves, telemetry, found, selections, reference)
    path = write_report(out, f"rcpforge report: {campaign.name}", sections, fmt)
    console.print(f"wrote {path} ({len(sections)} sections)")
