"""`rcpforge tune`: Optuna search of hyperparameters per (recipe, batch size)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from rcpforge.orchestrator.cli import render
from rcpforge.orchestrator.cli.app import EXIT_NO_OUTCOME, app, console, err_console, fail, load_campaign_or_fail


@app.command()
def tune(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file, with a `tune:` section"),
    recipe: Optional[list[str]] = typer.Option(None, "--recipe", help="tune only this recipe (repeatable)"),
    batch_size: Optional[list[int]] = typer.Option(None, "--batch-size", help="tune only this batch size (repeatable)"),
    trials: Optional[int] = typer.Option(None, min=1, help="finished trials per cell, earlier runs of the study included (default: tune.trials)"),
    workers: Optional[int] = typer.Option(None, min=1, help="trials in flight at once (default: backend.workers)"),
) -> None:
    """Tune hyperparameters per (recipe, batch size) on tokens-to-target; write
    hparams.<recipe>.yaml beside the campaign. Running it again continues the studies."""
    campaign = load_campaign_or_fail(campaign_file, waits_for_store=True)
    from rcpforge.trainers.contract.redact import redact_uri
    from rcpforge.orchestrator.tune.launcher import select_cells, tune_campaign
    from rcpforge.sweeps.tune_study import TuneError, storage_url
    from rcpforge.sweeps.tune_table import table_path

    try:
        cells = select_cells(campaign, recipe, batch_size)
        storage = storage_url(campaign)
    except TuneError as err:
        fail(str(err))

    def on_event(cell, number, outcome, value) -> None:
        if outcome == "start":
            return
        shown = "" if value is None else f" objective {value:,.0f}"
        console.print(f"{cell.recipe} bs {cell.batch_size} trial {number}: {outcome}{shown}", highlight=False)

    from rcpforge.cluster.backend import BackendError
    from rcpforge.orchestrator.tracking import TrackingUnavailable
    from rcpforge.sweeps.secrets import MissingSecret

    try:
        summaries = tune_campaign(campaign, cells, trials=trials, workers=workers, on_event=on_event)
    except (TuneError, BackendError, MissingSecret) as err:
        fail(escape(str(err)))
    except TrackingUnavailable as err:
        fail(escape(str(err)))
    except KeyboardInterrupt:
        err_console.print("interrupted: trials in flight were stopped; `rcpforge tune` again continues the studies")
        raise typer.Exit(130)
    console.print(render.tuning_table(campaign.name, summaries))
    for name in sorted({s.cell.recipe for s in summaries if s.best_trial is not None}):
        console.print(f"wrote {table_path(campaign.base_dir, name)}")
    for s in summaries:
        if s.best_trial is not None and not s.best_converged:
            err_console.print(f"note: {s.cell.recipe} bs {s.cell.batch_size}: no trial converged within the budget; "
                              "widen the search space or raise budget.max_tokens")
    console.print(f"optuna storage: {redact_uri(storage)}")
    broken = [s for s in summaries if s.trials == 0 and s.failed]
    for s in summaries:
        if s.failed:
            err_console.print(f"note: {s.cell.recipe} bs {s.cell.batch_size}: {s.failed} trials failed; "
                              f"the latest: {s.last_error}", highlight=False, soft_wrap=True)
    if broken:
        raise typer.Exit(EXIT_NO_OUTCOME)
