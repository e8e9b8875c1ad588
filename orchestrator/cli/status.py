"""`rcpforge status`: a campaign's progress, from the tracking store and Slurm."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from orchestrator.cli import render
from orchestrator.cli.app import app, console, fail, stored_campaign_or_fail


@app.command()
def status(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Per (recipe, batch size): runs pending, running, converged, not converged,
    diverged, failed, the Slurm job states of runs on Slurm, the compute spent (GPU- or
    core-hours) and an ETA; the same for the whole campaign."""
    campaign = stored_campaign_or_fail(campaign_file)
    from orchestrator.status import campaign_status
    from orchestrator.tracking import TrackingUnavailable
    from trainers.contract.uri import redact_uri

    try:
        found = campaign_status(campaign)
    except TrackingUnavailable as err:
        fail(escape(str(err)))
    if as_json:
        print(json.dumps({"campaign": campaign.name, "tracking_uri": redact_uri(campaign.tracking_uri),
                          "world_size": found.world_size, "cells": [c.as_dict() for c in found.cells],
                          "totals": found.totals, "failed_runs": found.failures}, indent=2))
        return
    compute = "gpu_hours" if campaign.launch.gpus_per_process else "core_hours"
    outside = sum(sum(c.outside.values()) for c in found.cells)
    console.print(render.status_table(campaign, found, compute, outside))
    if outside:
        console.print(f"{outside} runs in the store are not runs of this campaign file (imported, or made by an "
                      "earlier version of it): `rcpforge analyze` counts them in their cells", highlight=False)
    for line in render.failure_lines(found.failures):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    t = found.totals
    console.print(f"campaign: {t[compute]:.3g} {compute.replace('_', '-')} spent, {t['runs_to_do']} runs to do, "
                  f"ETA {render.duration(t['eta_s'])} at {t['concurrency']} runs at once")
    pending = sum(c.counts["pending"] for c in found.cells)
    if pending and not any(c.counts["running"] for c in found.cells):
        # Nothing in the store runs, so unless an orchestrator is between two launches,
        # none will start: a detached campaign (an adaptive one at each look) needs `run` again.
        console.print(f"{pending} runs pending and none running: unless a `rcpforge run` of this campaign is going "
                      f"on, `rcpforge run {campaign_file}` launches them (with --detach on Slurm, once per look of "
                      "an adaptive campaign)", highlight=False, markup=False)
    console.print(f"tracking store: {redact_uri(campaign.tracking_uri)}")

