"""`rcpforge status --watch`: a campaign followed live, read again every few seconds from
the tracking store and the backend's job states as `status` reads them (so on every
backend and store, from any machine that reaches the store), until no run is left to do
or Ctrl-C. On a terminal, the status table redrawn in place, each running run with its
latest eval point; elsewhere (a pipe, a log file) one plain line per refresh."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from rcpforge.orchestrator.cli import render
from rcpforge.orchestrator.status import COLUMNS, CampaignStatus, campaign_status
from rcpforge.sweeps.spec import Campaign


def finished(found: CampaignStatus) -> bool:
    """No run of the campaign is left to do: each has an outcome or has failed on every
    attempt it had."""
    return found.totals["runs_to_do"] == 0


def _now() -> datetime:
    return datetime.now(UTC)


def plain_line(campaign: Campaign, found: CampaignStatus, unit: str, at: datetime) -> str:
    """One refresh as one line of `key=value` fields (the names of `status --json`), in a
    fixed order: a time stamp, the campaign, its runs in each state, the compute spent, its
    cost in US dollars (with a `cost:` section), the runs to do and the ETA in seconds."""
    counts = {c: sum(cell.counts[c] for cell in found.cells) for c in COLUMNS}
    t = found.totals
    fields = {"campaign": campaign.name, "runs": sum(cell.runs for cell in found.cells), **counts,
              unit: f"{t[unit]:.6g}", **({"cost_usd": f"{t['cost_usd']:.6g}"} if "cost_usd" in t else {}),
              "runs_to_do": t["runs_to_do"], "eta_s": "null" if t["eta_s"] is None else f"{t['eta_s']:.0f}"}
    return f"{at.strftime('%Y-%m-%dT%H:%M:%SZ')} " + " ".join(f"{k}={v}" for k, v in fields.items())


def watch(campaign: Campaign, interval: float, console: Console, unit: str) -> None:
    """Refresh every `interval` seconds until the campaign has no run left to do, or until
    Ctrl-C."""
    pressed: list[bool] = []
    found = None
    try:
        with _ctrl_c(pressed), _shown(campaign, console, unit, interval) as show:
            found = campaign_status(campaign)
            show(found)
            while not finished(found) and not _waited(interval, pressed):
                found = campaign_status(campaign)
                show(found)
    except KeyboardInterrupt:  # a second Ctrl-C, in the middle of a read
        pressed.append(True)
    if pressed:  # the operator has seen enough: not an error
        left = "" if found is None else f"; {found.totals['runs_to_do']} runs still to do"
        console.print(f"stopped watching{left}", highlight=False)
    else:
        console.print(f"campaign {campaign.name}: no run left to do", highlight=False)


@contextmanager
def _ctrl_c(pressed: list[bool]) -> Iterator[None]:
    """Ctrl-C (SIGINT) as a note in `pressed` that the loop reads between two refreshes,
    so it never cuts a refresh short in the middle of drawing it; a second one interrupts
    whatever runs."""

    def note(signum, frame) -> None:
        if pressed:
            raise KeyboardInterrupt
        pressed.append(True)

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _waited(interval: float, pressed: list[bool]) -> bool:
    """Wait `interval` seconds, or less if Ctrl-C comes first; whether it came."""
    until = time.monotonic() + interval
    while not pressed and (left := until - time.monotonic()) > 0:
        time.sleep(min(left, 0.1))
    return bool(pressed)


@contextmanager
def _shown(campaign: Campaign, console: Console, unit: str, interval: float) -> Iterator[Callable]:
    """How each refresh is shown: the live view on a terminal, else a plain line."""
    if not console.is_terminal:
        yield lambda found: console.print(plain_line(campaign, found, unit, _now()), highlight=False,
                                          markup=False, soft_wrap=True)
        return
    with Live(console=console, auto_refresh=False) as live:
        yield lambda found: live.update(_view(campaign, found, unit, interval), refresh=True)


def _view(campaign: Campaign, found: CampaignStatus, unit: str, interval: float) -> Group:
    """The status table with each running run's latest eval, the failed runs' reasons,
    the campaign's totals, and when this was read."""
    outside = sum(sum(c.outside.values()) for c in found.cells)
    said = f"{_now().strftime('%H:%M:%S')} UTC, every {interval:g} s; Ctrl-C stops watching (not the campaign)"
    return Group(render.status_table(campaign, found, unit, outside, live=True),
                 *(Text(line) for line in render.failure_lines(found.failures)),
                 Text(render.totals_line(found, unit)), Text(said, style="dim"))
