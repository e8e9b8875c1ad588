"""`rcpforge report`: a campaign's results as one self-contained HTML file or markdown."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from rcpforge.orchestrator.cli.analysis import analysis_request, extrapolate_or_fail
from rcpforge.orchestrator.cli.app import (
    app,
    console,
    fail,
    output_path_or_fail,
    reference_or_fail,
    stored_campaign_or_fail,
)
from rcpforge.trainers.contract.redact import redact, redact_uri

FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md"}


def report_format(out: Path, fmt: str | None) -> str:
    """The format asked for, else the one --out's name says; a name that says none fails."""
    if fmt is not None:
        if fmt not in ("html", "md"):
            fail(f"--format must be html or md, got {fmt!r}")
        return fmt
    inferred = FORMATS.get(out.suffix.lower())
    if inferred is None:
        fail(f"--out {out}: cannot tell the format from the name; end it in .html or .md, or pass --format html|md")
    return inferred


@app.command()
def report(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    out: Path = typer.Option(Path("report.html"), "--out", help="the report file, .html or .md (its format)"),
    fmt: str = typer.Option(None, "--format", show_default="from --out: .html or .md",
                            help="html (one self-contained file) or md (PNG files beside it, named after --out)"),
    reference: str = typer.Option(None, "--reference", show_default="bf16, or adaptive.reference",
                                  help="the reference recipe of the convergence factors"),
    seed: int = typer.Option(0, "--seed", help="seed of the bootstrap and Monte Carlo (same as analyze's)"),
    extrapolate_to: float = typer.Option(
        None, "--extrapolate-to", metavar="PARAMS",
        help="with runs of several models: show each recipe's factor predicted at this parameter count, labelled "
             "an extrapolation"),
    reference_points: str = typer.Option(
        "mlperf-fp4", "--reference-points",
        help="public factors drawn (never fitted) on the factor-against-size plot: a YAML/JSON file, "
             "mlperf-fp4 (the shipped MLPerf FP4 figures on llama31_8b) or none"),
) -> None:
    """Write the campaign report: factors, RCP table, selection, today's honest rejection per RCP, curves,
    distributions, RCP curve, precision maps, cost, settings."""
    fmt = report_format(out, fmt)
    output_path_or_fail(out, "--out", folder=False)
    extrapolate_or_fail(extrapolate_to)
    points = _points_or_fail(reference_points)
    campaign = stored_campaign_or_fail(campaign_file)
    reference = reference_or_fail(campaign, reference)  # before the runs are read
    from rcpforge.analysis.analyze import scale_of
    from rcpforge.analysis.campaign_report import CampaignFacts, build_axis_sections
    from rcpforge.analysis.curves import load_curves, telemetry_metrics
    from rcpforge.analysis.load import NoSuchCampaign, load_runs
    from rcpforge.analysis.report import write_report
    from rcpforge.orchestrator.models_analysis import model_parts
    from rcpforge.orchestrator.status import campaign_status

    try:
        runs = load_runs(campaign.tracking_uri, campaign.name)
    except NoSuchCampaign as err:
        fail(str(err))
    if runs.num_rows == 0:
        fail(f"campaign {campaign.name} has no runs yet; run `rcpforge run {campaign_file}` first")
    telemetry = telemetry_metrics(campaign.tracking_uri, campaign.name)
    curves = load_curves(campaign.tracking_uri, campaign.name, [campaign.target.metric, *telemetry])
    request = analysis_request(campaign, reference, seed, extrapolate_to=extrapolate_to)
    # without prices the settings read as before the cost: section existed
    settings = redact(campaign.model_dump(mode="json", exclude={"base_dir", *(() if campaign.cost else ("cost",))}),
                      shown=True)
    settings["tracking"] = {"uri": redact_uri(campaign.tracking_uri)}
    spent = campaign_status(campaign)
    facts = CampaignFacts(request, settings, campaign.target.metric, campaign.target.value, campaign.batch_sizes,
                          [c.as_dict() for c in spent.cells], spent.totals)
    if campaign.models is None:
        sections = _sections(campaign, facts, runs, curves, telemetry, points)
    else:  # each model's report apart (its RCPs, its factors against its own reference), and the trend across
        sections = build_axis_sections(facts, model_parts(campaign, runs, request), curves, telemetry,
                                       scale_of(runs, request), points)
    path = write_report(out, f"rcpforge report: {campaign.name}", sections, fmt)
    console.print(f"wrote {path} ({len(sections)} sections)")


def _sections(campaign, facts, runs, curves, telemetry: list[str], points: list) -> list:
    """The report of a campaign without a model axis: one RCP table, one set of factors."""
    from rcpforge.analysis.analyze import comparisons, scale_of
    from rcpforge.analysis.campaign_report import build_sections
    from rcpforge.analysis.layer_map import load_layer_maps
    from rcpforge.analysis.rcp_table import rcp_table

    request = facts.request
    table = rcp_table(runs, campaign.benchmark, campaign.submission_runs)
    found, pairs, selections = None, None, None
    if request.reference in request.recipes:
        found, pairs, selections = comparisons(runs, table, request)
    return build_sections(facts, runs, table, curves, telemetry, found, selections,
                          load_layer_maps(campaign.tracking_uri, runs), pairs, scale_of(runs, request), points)


def _points_or_fail(source: str) -> list:
    """--reference-points: the shipped MLPerf FP4 file, none, or a file of the user's."""
    from rcpforge.analysis.scale_points import MLPERF_FP4, PointsError, load_points

    if source == "none":
        return []
    path = MLPERF_FP4 if source == "mlperf-fp4" else Path(source)
    if source != "mlperf-fp4" and not path.is_file():
        fail(f"--reference-points {source!r}: no such file; give a YAML/JSON file, mlperf-fp4 or none")
    try:
        return load_points(path)
    except PointsError as err:
        fail(escape(str(err)))
