"""`rcpforge status`: a campaign's progress, from the tracking store and Slurm."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import typer
from rich.markup import escape

from rcpforge.analysis.hardware import cell_name, mixed_line
from rcpforge.orchestrator.backends import slurm_limit_lines
from rcpforge.orchestrator.cli import render
from rcpforge.orchestrator.cli.app import app, console, fail, stored_campaign_or_fail
from rcpforge.orchestrator.cost import compute_unit


@app.command()
def status(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    watch: bool = typer.Option(False, "--watch", help="follow the campaign live until no run is left to do "
                                                      "(or Ctrl-C); plain lines when not on a terminal"),
    interval: float = typer.Option(5.0, "--interval", help="seconds between two refreshes of --watch"),
) -> None:
    """Per (recipe, batch size): runs pending, running, converged, not converged,
    diverged, failed, the Slurm job states of runs on Slurm, the compute spent (GPU- or
    core-hours, and US dollars with a cost: section) and an ETA; the same for the whole
    campaign."""
    if watch and as_json:
        fail("--watch and --json: choose one (--watch without a terminal prints one plain line per refresh)")
    if not interval > 0:
        fail(f"--interval: the seconds between two refreshes, more than 0; got {interval:g}")
    campaign = stored_campaign_or_fail(campaign_file)
    if watch:
        _watch(campaign, interval)
        return
    from rcpforge.orchestrator.status import campaign_status
    from rcpforge.orchestrator.tracking import TrackingUnavailable
    from rcpforge.trainers.contract.redact import redact_uri

    try:
        found = campaign_status(campaign)
    except TrackingUnavailable as err:
        fail(escape(str(err)))
    if as_json:
        print(json.dumps({"campaign": campaign.name, "tracking_uri": redact_uri(campaign.tracking_uri),
                          "world_size": found.world_size, "cells": [c.as_dict() for c in found.cells],
                          "slurm_limits": slurm_limit_lines(campaign),
                          "totals": found.totals, "failed_runs": found.failures}, indent=2))
        return
    compute = compute_unit(campaign)
    outside = sum(sum(c.outside.values()) for c in found.cells)
    console.print(render.status_table(campaign, found, compute, outside))
    if outside:
        console.print(f"{outside} runs in the store are not runs of this campaign file (imported, or made by an "
                      "earlier version of it): `rcpforge analyze` counts them in their cells", highlight=False)
    for line in render.failure_lines(found.failures):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    for cell in found.cells:
        if mixed := mixed_line(cell_name(cell.model, cell.recipe, cell.batch_size), cell.accelerators):
            console.print(f"warning: {mixed}", highlight=False, markup=False, soft_wrap=True)
    console.print(render.totals_line(found, compute))
    pending = sum(c.counts["pending"] for c in found.cells)
    if pending and not any(c.counts["running"] for c in found.cells):
        # Nothing in the store runs, so unless an orchestrator is between two launches,
        # none will start: a detached campaign (an adaptive one at each look) needs `run` again.
        console.print(f"{pending} runs pending and none running: unless a `rcpforge run` of this campaign is going "
                      f"on, `rcpforge run {campaign_file}` launches them (with --detach on Slurm, once per look of "
                      "an adaptive campaign)", highlight=False, markup=False)
    waiting = sum((c.waiting for c in found.cells), Counter())
    if waiting:  # in Slurm's words: a limit (QOSMaxJobsPerUserLimit, AssocGrpGRES), Resources, Priority, ...
        console.print(f"Slurm keeps {sum(waiting.values())} runs pending, by its reason: "
                      + ", ".join(f"{n} {why}" for why, n in waiting.most_common()), highlight=False, markup=False)
    for line in slurm_limit_lines(campaign):
        console.print(f"slurm limits: {line}", highlight=False, markup=False)
    console.print(f"tracking store: {redact_uri(campaign.tracking_uri)}")


def _watch(campaign, interval: float) -> None:
    from rcpforge.orchestrator.cli.watch import watch
    from rcpforge.orchestrator.tracking import TrackingUnavailable

    try:
        watch(campaign, interval, console, compute_unit(campaign))
    except TrackingUnavailable as err:
        fail(escape(str(err)))
