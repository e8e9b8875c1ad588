"""`rcpforge status`: a campaign's progress, from the tracking store and Slurm."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from rich.markup import escape

from orchestrator.cli.app import app, console, fail, load_campaign_or_fail


@app.command()
def status(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Per (recipe, batch size): runs pending, running, converged, not converged,
    diverged, failed, and the Slurm job states of runs on Slurm."""
    campaign = load_campaign_or_fail(campaign_file)
    from orchestrator.status import COLUMNS, campaign_status
    from orchestrator.tracking import TrackingUnavailable
    from trainers.contract.uri import redact_uri

    try:
        cells = campaign_status(campaign)
    except TrackingUnavailable as err:
        fail(escape(str(err)))
    if as_json:
        print(json.dumps({"campaign": campaign.name, "tracking_uri": redact_uri(campaign.tracking_uri),
                          "cells": [c.as_dict() for c in cells]}, indent=2))
        return
    view = Table(title=f"campaign {campaign.name}")
    for col in ("recipe", "batch size", "runs", *(c.replace("_", " ") for c in COLUMNS), "slurm jobs"):
        view.add_column(col)
    for c in cells:
        slurm = ", ".join(f"{n} {s.lower()}" for s, n in sorted(c.slurm.items())) or "-"
        view.add_row(c.recipe, str(c.batch_size), str(c.runs), *(str(c.counts[k]) for k in COLUMNS), slurm)
    console.print(view)
    console.print(f"tracking store: {redact_uri(campaign.tracking_uri)}")
