"""`rcpforge plan`: the runs and compute each comparison needs for a precision
(`orchestrator/sizing.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from rcpforge.orchestrator.cli import render
from rcpforge.orchestrator.cli.app import app, console, fail, load_campaign_or_fail, reference_or_fail


@app.command()
def plan(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    precision: list[float] = typer.Option(
        None, "--precision", help="a relative half-width of the factor's interval to plan for, e.g. 0.03 "
                                  "for +-3% (repeatable; default 0.02, 0.03, 0.05)"),
    pilot: int = typer.Option(0, "--pilot", min=0, help="first run seeds 0..K-1 of every cell (they count "
                                                        "toward the campaign later)"),
    reference: str = typer.Option(None, "--reference", show_default="bf16, or adaptive.reference",
                                  help="the recipe the others are compared with"),
    slope_precision: list[float] = typer.Option(
        None, "--slope-precision", help="with runs of several models: a half-width of the slope's 95% interval "
                                        "(log factor per log parameters) to plan for (repeatable; default 0.01, "
                                        "0.02, 0.05)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output: one JSON document"),
) -> None:
    """Predict, from the runs recorded so far (or a pilot), the runs per recipe and the
    compute each candidate's factor needs for each precision, under the campaign's design;
    with runs of several models, also the runs per model the trend's slope needs."""
    campaign = load_campaign_or_fail(campaign_file)
    precisions = tuple(precision) if precision else None
    if precisions and any(not 0 < p < 1 for p in precisions):
        fail(f"--precision: each is a relative half-width between 0 and 1 (0.03 is +-3%), got {list(precisions)}")
    if slope_precision and any(not p > 0 for p in slope_precision):
        fail(f"--slope-precision: each is a positive half-width of the slope (0.02 is +-0.02), got {slope_precision}")
    reference = reference_or_fail(campaign, reference)
    from rcpforge.analysis.load_sql import campaign_in_store
    from rcpforge.analysis.scale_plan import SLOPE_PRECISIONS
    from rcpforge.orchestrator.sizing import PRECISIONS, campaign_totals, size_comparisons
    from rcpforge.orchestrator.tracking import Tracking, TrackingUnavailable, absent_sqlite_store

    try:
        if pilot:
            _run_pilot(campaign, pilot)
        ledger, slopes = {}, []  # a store not made yet, or without the campaign, records nothing; planning makes none
        if absent_sqlite_store(campaign.tracking_uri) is None and campaign_in_store(campaign.tracking_uri,
                                                                                     campaign.name):
            ledger = Tracking(campaign.tracking_uri, campaign.tracking.retry_s).campaign_ledger(campaign.name)
            slopes = _slope_sizes(campaign, reference, tuple(slope_precision or SLOPE_PRECISIONS))
    except TrackingUnavailable as err:
        fail(escape(str(err)))
    from rcpforge.orchestrator.cost import compute_unit, plan_dollars, usd_per_hour

    rows = size_comparisons(campaign, ledger, reference, precisions or PRECISIONS)
    totals = campaign_totals(rows, reference)
    unit = compute_unit(campaign)
    design = "adaptive" if campaign.adaptive is not None else "fixed"
    cells, price = [r.as_dict() for r in rows], usd_per_hour(campaign)
    if price is not None:
        plan_dollars(cells, totals, price)
    if as_json:
        print(json.dumps({"campaign": campaign.name, "reference": reference, "design": design,
                          "hours_unit": unit, "cells": cells, "totals": totals,
                          "slopes": [r.as_dict() for r in slopes]}, indent=2))
        return
    _print_sizes(rows, totals, [f"{p:g}" for p in (precisions or PRECISIONS)], unit, design, reference, campaign)
    if slopes:
        _print_slopes(slopes, [f"{p:g}" for p in (slope_precision or SLOPE_PRECISIONS)], reference)


def _slope_sizes(campaign, reference: str, goals: tuple[float, ...]) -> list:
    """The runs per model each trend's slope needs, where the runs have more than one model."""
    from rcpforge.analysis.load_sql import load_campaign_runs
    from rcpforge.analysis.scale import has_model_axis
    from rcpforge.analysis.scale_plan import size_slopes

    runs = load_campaign_runs(campaign.tracking_uri, campaign.name)
    return size_slopes(runs, reference, campaign.benchmark, goals) if has_model_axis(runs) else []


def _print_slopes(rows, goals: list[str], reference: str) -> None:
    console.print(render.slope_sizes_table(rows, goals, reference))
    for r in rows:
        if r.reason:
            console.print(f"{r.recipe} bs{r.batch_size} slope: {r.reason}", highlight=False, markup=False)
    console.print("slope: log factor per log parameters; runs per model and recipe (both the candidate's and the "
                  "reference's, on every model) predicted from the spread of the runs so far", highlight=False)


def _print_sizes(rows, totals: dict, goals: list[str], unit: str, design: str, reference: str, campaign) -> None:
    """The sizing table, each comparison's reason where it has no prediction, the
    campaign's totals per precision (in US dollars too, with a `cost:` section)."""
    from rcpforge.orchestrator.cost import usd_per_hour

    price = usd_per_hour(campaign)
    console.print(render.sizes_table(rows, goals, unit, design, reference, campaign, price))
    for r in rows:
        if r.reason:
            console.print(f"{r.candidate} bs{r.batch_size}: {r.reason}", highlight=False, markup=False)
    for goal, t in totals.items():
        if t["runs"] is None:
            console.print(f"campaign at +-{float(goal):.0%}: out of reach for some comparison", highlight=False)
        else:
            money = f" ({render.usd(t['cost_usd'])})" if "cost_usd" in t else ""
            each = "each model and batch size's" if campaign.models else "each batch size's"
            console.print(f"campaign at +-{float(goal):.0%}: {t['runs']} runs ({each} {reference} runs "
                          f"once), about {t['hours']:.3g} {unit.replace('_', '-')}{money}", highlight=False)
    console.print("predictions from the spread of the runs so far; compute: both recipes' runs at their mean cost "
                  "so far", highlight=False)


def _run_pilot(campaign, seeds: int) -> None:
    """Seeds 0..seeds-1 of every cell, as a fixed campaign: the same run keys, so the
    campaign counts them later and never runs them twice."""
    from rcpforge.orchestrator.campaign import run_campaign
    from rcpforge.orchestrator.progress import RunProgress

    pilot = campaign.model_copy(update={"seeds": {"default": seeds}, "adaptive": None})
    progress = RunProgress(console)
    try:
        run_campaign(pilot, on_event=progress.on_event, on_plan=progress.on_plan)
    finally:
        progress.close()
