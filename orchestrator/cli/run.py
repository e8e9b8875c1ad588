"""`rcpforge run`: launch a campaign's runs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from rcpforge.orchestrator.cli.app import (
    EXIT_NO_OUTCOME,
    EXIT_USAGE,
    app,
    console,
    err_console,
    fail,
    load_campaign_or_fail,
)
from rcpforge.orchestrator.smoke import SMOKE_EVALS, SMOKE_WALL_S
from rcpforge.trainers.contract.mllog.compliance import DISCLOSURE_RULESET
from rcpforge.trainers.contract.redact import redact_uri
from rcpforge.trainers.contract.schema import TAG_ERROR


@app.command()
def run(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    workers: Optional[int] = typer.Option(None, min=1, help="worker processes (default: backend.workers)"),
    retry_failed: bool = typer.Option(False, help="launch again the runs that failed on every attempt"),
    backend: Optional[str] = typer.Option(
        None, help="where runs execute: local, ray or slurm (default: backend.kind of the campaign)"
    ),
    detach: bool = typer.Option(
        False, help="submit the runs and return (Slurm only); `rcpforge status` follows them"
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="show what one run of each recipe x batch size would start (argv, "
                                 "environment, folders, each gang task's variables); launch and write nothing"
    ),
    as_json: bool = typer.Option(False, "--json", help="with --dry-run: one JSON document"),
    smoke: bool = typer.Option(
        False, "--smoke", help="one short run of each recipe x batch size, recorded apart from the campaign, then "
                               "what the MLCommons checkers will say of its MLLOG; exit 0 only when nothing is missing"
    ),
    smoke_evals: int = typer.Option(SMOKE_EVALS, min=1, help="with --smoke: the evals each smoke run may take"),
    smoke_wall_s: float = typer.Option(SMOKE_WALL_S, min=1, help="with --smoke: a program's seconds at most"),
    smoke_ruleset: str = typer.Option(DISCLOSURE_RULESET, help="with --smoke: the compliance checker's ruleset"),
) -> None:
    """Launch every run of the campaign that has no outcome yet."""
    campaign = load_campaign_or_fail(campaign_file, waits_for_store=True, launches=not dry_run)
    if backend is not None:
        campaign = _with_backend(campaign, backend)
    if as_json and not dry_run:
        fail("--json: only with --dry-run (a launch's output is its progress lines); add --dry-run or drop --json")
    if dry_run:
        _dry_run(campaign, as_json)
        return
    if smoke:
        from rcpforge.orchestrator.cli.smoke import smoke_or_fail

        smoke_or_fail(campaign, campaign_file, smoke_evals, smoke_wall_s, smoke_ruleset, workers, detach, retry_failed)
        return
    from rcpforge.cluster.backend import BackendError
    from rcpforge.orchestrator.campaign import CampaignBusy, run_campaign
    from rcpforge.orchestrator.progress import RunProgress
    from rcpforge.orchestrator.tracking import TrackingUnavailable
    from rcpforge.sweeps.secrets import MissingSecret

    progress = RunProgress(console)
    try:
        summary = run_campaign(
            campaign, workers=workers, retry_failed=retry_failed, on_event=progress.on_event,
            on_plan=progress.on_plan, detach=detach, on_look=progress.on_look, on_notice=progress.notice,
        )
    except (CampaignBusy, BackendError, TrackingUnavailable, MissingSecret) as err:
        fail(escape(str(err)))  # an error text may hold [brackets] that rich would take as markup
    except KeyboardInterrupt:
        progress.close()
        err_console.print("interrupted: runs in flight were stopped; `rcpforge run` again resumes the campaign")
        raise typer.Exit(130)
    finally:
        progress.close()
    _report(campaign, campaign_file, summary)


def _report(campaign, campaign_file: Path, summary) -> None:
    """What the launch did; a stop on a configuration error, or runs without an outcome,
    exit non-zero."""
    if summary.stopped is not None:
        _stopped(campaign, campaign_file, summary)
    if summary.detached:
        console.print(
            f"campaign {campaign.name}: submitted {summary.launched} runs to Slurm and detached; "
            f"`rcpforge status {campaign_file}` shows progress"
        )
        if summary.not_launched:
            console.print(f"{summary.not_launched} more runs wait for room under the cluster's limits (see `rcpforge "
                          f"status {campaign_file}`): `rcpforge run {campaign_file} --detach` again sends what fits "
                          "then, or run without --detach to send them as others end", highlight=False, markup=False)
        if summary.adaptive is not None and not summary.adaptive.finished:
            # Looks are barriers taken by an orchestrator: detached, none is there to take the next.
            look = max((e.look for e in summary.adaptive.looks), default=0) + 1
            console.print(f"adaptive: look {look} waits for these runs; once they have an outcome, "
                          f"`rcpforge run {campaign_file} --detach` again takes it and submits the next "
                          "runs (a detached campaign goes no further by itself)", highlight=False, markup=False)
    elif summary.launched == 0 and not summary.plan.elsewhere:
        console.print(f"campaign {campaign.name}: nothing to launch, every run has an outcome or no attempts left")
    else:
        counts = ", ".join(f"{v} {k}" for k, v in sorted(summary.statuses.items()))
        console.print(f"campaign {campaign.name}: launched {summary.launched} runs; {counts}")
    console.print(f"tracking store: {redact_uri(campaign.tracking_uri)}")
    # this launch's failures and the earlier ones it did not launch again
    failed = summary.statuses.get("failed", 0) + len(summary.plan.gave_up if summary.plan else [])
    if failed and not summary.detached:
        err_console.print(f"{failed} runs have no outcome (failed on every attempt; each run's error is its "
                          f"{TAG_ERROR} tag in MLflow); `rcpforge run --retry-failed {campaign_file}` launches "
                          "them again", highlight=False, markup=False)
        raise typer.Exit(EXIT_NO_OUTCOME)


def _stopped(campaign, campaign_file: Path, summary) -> None:
    """A configuration error stopped the campaign: one line, why and what to fix (exit 2)."""
    err_console.print(
        f"campaign {campaign.name} stopped on a configuration error ({summary.not_launched} runs not launched"
        f"{f', {summary.cancelled} stopped' if summary.cancelled else ''}): {summary.stopped}; fix it and "
        f"`rcpforge run {campaign_file}` again", highlight=False, markup=False, soft_wrap=True,
    )
    raise typer.Exit(EXIT_USAGE)


def _dry_run(campaign, as_json: bool) -> None:
    """What the launch would start, from the code that launches (orchestrator/dryrun.py)."""
    from rcpforge.orchestrator.backends import slurm_limit_lines
    from rcpforge.orchestrator.dryrun import dry_run

    configs = dry_run(campaign)
    limits = slurm_limit_lines(campaign)
    _warn_missing_inputs(configs)
    if as_json:
        print(json.dumps({"campaign": campaign.name, "backend": campaign.backend.kind, "dry_run": True,
                          "configurations": configs, **({"slurm_limits": limits} if limits else {})}, indent=2))
        return
    runs = sum(c["runs"] for c in configs)
    out = [f"campaign {campaign.name}: dry run on backend {campaign.backend.kind}, nothing launched or written; "
           f"{runs} runs in {len(configs)} configurations, one run of each shown"]
    for config in configs:
        model = f"model {config['model']}, " if config.get("model") else ""
        out += [f"{model}{config['recipe']}, batch size {config['batch_size']} ({config['runs']} runs; shown: seed "
                f"{config['seed']}, run {config['run_name']})", f"  folder:      {config['output_dir']}"]
        if "argv" in config:
            out += [f"  argv:        {shlex.join(config['argv'])}", f"  workdir:     {config['workdir']}",
                    f"  MLLOG from:  {config['mllog_file'] or 'the program stdout and stderr'}, kept in "
                    f"{config['result_file']}",
                    f"  environment: {_words(config['env'])}"]
        else:
            out += [f"  in process:  trainer {config['trainer']} in the worker, MLLOG written to "
                    f"{config['result_file']}", f"  settings:    {json.dumps(config['settings'])}",
                    f"  hparams:     {json.dumps(config['hparams'])}",
                    f"  recipe:      {json.dumps(config['recipe_options'])}",
                    f"  budget:      {json.dumps(config['budget'])}, target {json.dumps(config['target'])}"]
        for task in config["tasks"]:
            out.append(f"  task {task['task']} of {len(config['tasks'])}: "
                       + " ".join(f"{k}={v}" for k, v in task["variables"].items()))
            out += [f"    {key}: {_words(value)}" for key, value in task.items() if key not in ("task", "variables")]
    out += [f"slurm limits: {line}" for line in limits]
    console.print("\n".join(out), highlight=False, markup=False, soft_wrap=True)


def _warn_missing_inputs(configs) -> None:
    """A file argv names that is not here: the first launch here would fail on it as a
    configuration error. A warning, not an error: on a cluster it may be there."""
    from rcpforge.trainers.command.inputs import missing_input_message

    missing = {(arg, config["workdir"]) for config in configs for arg in config.get("missing_inputs", ())}
    for arg, workdir in sorted(missing):
        err_console.print(f"[yellow]warning:[/yellow] {escape(missing_input_message(arg, Path(workdir)))} "
                          "(a run started where it is missing fails as a configuration error)",
                          highlight=False, soft_wrap=True)


def _words(value) -> str:
    """An argv or a set of variables as a shell would take them; anything else as it is."""
    if isinstance(value, list):
        return shlex.join(value)
    if isinstance(value, dict):
        return " ".join(f"{k}={shlex.quote(str(v))}" for k, v in value.items())
    return str(value)


def _with_backend(campaign, kind: str):
    from rcpforge.sweeps.backends import with_kind

    try:
        return campaign.model_copy(update={"backend": with_kind(campaign.backend, kind)})
    except ValueError as err:
        fail(str(err))
