"""`rcpforge status`: a campaign's progress, from the tracking store and Slurm."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from rich.markup import escape

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
    from orchestrator.status import COLUMNS, campaign_status
    from orchestrator.tracking import TrackingUnavailable
    from trainers.contract.uri import redact_uri

    try:
        found = campaign_status(campaign)
    except TrackingUnavailable as err:
        fail(escape(str(err)))
    if as_json:
        print(json.dumps({"campaign": campaign.name, "tracking_uri": redact_uri(campaign.tracking_uri),
                          "world_size": found.world_size, "cells": [c.as_dict() for c in found.cells],
                          "totals": found.totals}, indent=2))
        return
    compute = "gpu_hours" if campaign.launch.gpus_per_process else "core_hours"
    view = Table(title=f"campaign {campaign.name}")
    adaptive = campaign.adaptive is not None
    outside = sum(sum(c.outside.values()) for c in found.cells)
    for col in ("recipe", "batch size", "runs", *(c.replace("_", " ") for c in COLUMNS), "slurm jobs",
                compute.replace("_", "-"), "ETA", *(("stopped",) if adaptive else ()),
                *(("not in this file",) if outside else ())):
        # a recipe's name is never cut (grid variants differ at their ends: ...-sr_on, ...-sr_off)
        view.add_column(col, overflow="fold",
                        min_width=max((len(c.recipe) for c in found.cells), default=6) if col == "recipe" else None)
    for c in found.cells:
        slurm = ", ".join(f"{n} {s.lower()}" for s, n in sorted(c.slurm.items())) or "-"
        stopped = (f"{c.adaptive['stop_reason']} at look {c.adaptive['stopped_at_look']}"
                   if c.adaptive.get("stop_reason") else "goes on",) if adaptive else ()
        listed = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(c.outside.items())) or "-"
        others = (listed,) if outside else ()
        view.add_row(c.recipe, str(c.batch_size), str(c.runs), *(str(c.counts[k]) for k in COLUMNS), slurm,
                     f"{c.estimate[compute]:.3g}", _duration(c.estimate["eta_s"]), *stopped, *others)
    console.print(view)
    if outside:
        console.print(f"{outside} runs in the store are not runs of this campaign file (imported, or made by an "
                      "earlier version of it): `rcpforge analyze` counts them in their cells", highlight=False)
    t = found.totals
    console.print(f"campaign: {t[compute]:.3g} {compute.replace('_', '-')} spent, {t['runs_to_do']} runs to do, "
                  f"ETA {_duration(t['eta_s'])} at {t['concurrency']} runs at once")
    pending = sum(c.counts["pending"] for c in found.cells)
    if pending and not any(c.counts["running"] for c in found.cells):
        # Nothing in the store runs, so unless an orchestrator is between two launches,
        # none will start: a detached campaign (an adaptive one at each look) needs `run` again.
        console.print(f"{pending} runs pending and none running: unless a `rcpforge run` of this campaign is going "
                      f"on, `rcpforge run {campaign_file}` launches them (with --detach on Slurm, once per look of "
                      "an adaptive campaign)", highlight=False, markup=False)
    console.print(f"tracking store: {redact_uri(campaign.tracking_uri)}")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown (no run finished yet)"
    if seconds < 1:
        return "done" if seconds == 0 else "<1s"
    hours, rest = divmod(int(round(seconds)), 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
