"""The `rcpforge` Typer app and what every command shares. Commands live in
`orchestrator/cli/<group>.py`, one module per command group, and register on `app`. Heavy imports
(torch, mlflow) happen inside commands, so `--help` and campaign validation stay fast."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Precision-vs-convergence campaigns and MLPerf RCPs.")
# Off a terminal (CI, Slurm logs) rich would wrap at 80 columns and cut table cells.
console = Console() if Console().is_terminal else Console(width=160, soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

# The exit codes scripts can rely on (docs/commands.md, "Exit codes"). A run that failed and then
# succeeded on a retry is a success.
EXIT_FAILED_CHECK = 1  # `rcpforge check`: the submission fails against the RCPs
EXIT_USAGE = 2  # bad input: a flag, a campaign file, a tracking URI; one line says which and the fix
EXIT_NO_OUTCOME = 3  # the campaign finished, but some runs have no outcome (failed on every attempt)


def fail(message: str) -> NoReturn:
    """One line on stderr, exit status 2: how every command reports bad input."""
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_USAGE)


def output_path_or_fail(path: Path, flag: str, *, folder: bool) -> None:
    """One line, before anything is read or written, for an output path of the wrong kind:
    a file where `flag` names a folder, a folder where it names a file, or a file on the
    way to it."""
    kind, other = ("a folder", "a file") if folder else ("a file", "a folder")
    if path.exists() and path.is_dir() != folder:
        fail(f"{flag} {escape(str(path))} is {other}, and {flag} names {kind}; "
             f"give the path of {kind} (a new one, or {'an existing folder' if folder else 'a file to replace'})")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                fail(f"{flag} {escape(str(path))}: {escape(str(parent))} is a file, not a folder; give another path")
            break


def load_campaign_or_fail(path: Path, *, waits_for_store: bool = False, launches: bool = False):
    """The campaign, its tracking URI checked, its warnings that still apply shown. A
    command that only reads gives a tracking server READ_RETRY_S to answer; one that runs
    the campaign (`waits_for_store`) rides out an outage for the campaign's tracking.retry_s.
    A launch (`launches`) leaves out the campaign's warnings about what its program will log:
    the launch checks that on the first run's lines and stops the campaign with the fix."""
    campaign = _checked_campaign_or_fail(path, waits_for_store)
    _warn(campaign, path, campaign_warnings=not launches)
    return campaign


def _checked_campaign_or_fail(path: Path, waits_for_store: bool):
    from rcpforge.sweeps.spec import CampaignError, load_campaign

    try:
        campaign = load_campaign(path)
    except CampaignError as err:
        fail(str(err))
    tracking_uri_or_fail(campaign.tracking_uri, "tracking.uri", probe=not waits_for_store)
    return campaign


def _warn(campaign, path: Path, *, campaign_warnings: bool = True) -> None:
    from rcpforge.sweeps.secrets import literal_warning

    literal = literal_warning([trainer for trainer, _ in campaign.trainers()])
    if literal:  # once per command: the file holds credentials in the open
        err_console.print(f"[yellow]warning:[/yellow] {path}: {escape(literal)}", highlight=False)
    if campaign_warnings:
        warn_campaign(campaign, path)


def warn_campaign(campaign, path: Path) -> None:
    """The campaign's warnings that its recorded runs have not settled yet."""
    if campaign.warnings:  # only then is the store read for them (orchestrator/campaign_warnings.py)
        from rcpforge.orchestrator.campaign_warnings import warnings_that_apply

        for warning in warnings_that_apply(campaign):
            err_console.print(f"[yellow]warning:[/yellow] {path}: {escape(warning)}", highlight=False)


def tracking_uri_or_fail(uri: str, field: str, *, probe: bool = True) -> None:
    """One line naming the URI and the fix for a tracking URI that cannot work here, or
    (with `probe`) a tracking server or database server that does not answer soon."""
    from rcpforge.orchestrator.tracking import TrackingUnavailable, TrackingUriError, check_tracking_uri, probe_store

    try:
        check_tracking_uri(uri)
        if probe:
            probe_store(uri)
    except TrackingUriError as err:
        fail(f"{field} {escape(str(err))}")
    except TrackingUnavailable as err:
        fail(escape(str(err)))


def stored_campaign_or_fail(path: Path):
    """The campaign of a command that reads its runs (status, analyze, report, export): a
    store that does not exist yet, or holds no experiment of the campaign, is one line, and
    stays as it was (`rcpforge.campaign.require_in_store`, as `rcpforge.load` asks)."""
    from rcpforge import RcpforgeError
    from rcpforge.campaign import require_in_store
    from rcpforge.orchestrator.tracking import TrackingUnavailable

    campaign = _checked_campaign_or_fail(path, waits_for_store=False)
    try:
        require_in_store(campaign.tracking_uri, campaign.name, f"run `rcpforge run {path}` first, or check tracking.uri")
    except (RcpforgeError, TrackingUnavailable) as err:
        fail(escape(str(err)))
    _warn(campaign, path)  # after that one line: a store without the campaign is the answer
    return campaign


def campaign_handle(campaign, *, adaptive: bool = False):
    """The API's handle (`rcpforge.Campaign`) of a campaign file's campaign; `adaptive`:
    with an adaptive campaign's looks and stops, read from its tracking store."""
    from rcpforge.campaign import from_spec
    from rcpforge.orchestrator.adaptive import read_adaptive_record
    from rcpforge.orchestrator.tracking import TrackingUnavailable

    try:
        return from_spec(campaign, read_adaptive_record(campaign) if adaptive else None)
    except TrackingUnavailable as err:
        fail(escape(str(err)))


def load_runs_or_fail(campaign):
    """The campaign's runs table, or one line saying there is no such campaign."""
    from rcpforge.analysis.load import NoSuchCampaign

    try:
        return campaign_handle(campaign).runs_arrow()
    except NoSuchCampaign as err:
        fail(str(err))


def reference_or_fail(campaign, reference: str | None) -> str:
    """`--reference`, or the campaign's default reference: one of its recipes."""
    from rcpforge import RcpforgeError
    from rcpforge.campaign import checked_reference

    try:
        return checked_reference([r.name for r in campaign.recipes], campaign.reference if reference is None else reference)
    except RcpforgeError as err:
        fail(escape(str(err)))
