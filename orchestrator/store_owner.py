"""Which tracking store owns a campaign's runs folder (`rcpforge-runs/<campaign>/`).

A campaign's runs are keyed in its store: a second store knows none of them and would
launch every run again, into the same folders. That happens when two campaign files of
one name beside each other track in two stores, or when one file's `tracking.uri` is
changed after its first runs. So the first `run` or `tune` records its store in the
folder (OWNER_FILE) and a later one with another store is refused, naming both.

What is recorded is the store as a person may see it (no password: a rotated password
is the same store), and a SQLite store as its path relative to the runs folder (a
campaign folder moved or copied whole keeps its store)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rcpforge.sweeps.tracking_spec import SQLITE
from rcpforge.trainers.contract.redact import redact_uri

OWNER_FILE = ".tracking-store.json"


class OtherStore(RuntimeError):
    """The runs folder belongs to another store: one line naming both and the fix."""


def store_record(uri: str, runs_folder: Path) -> str:
    """How the folder records `uri`: a SQLite file relative to the folder, else the URI
    without its password."""
    if uri.startswith(SQLITE + "/"):
        path, sep, query = uri[len(SQLITE):].partition("?")
        return f"{SQLITE}{os.path.relpath(path, runs_folder)}{sep}{query}"
    return redact_uri(uri)


def claim_runs_folder(runs_folder: Path, uri: str) -> None:
    """Record `uri` as the owner of `runs_folder` if none is yet; OtherStore if another is."""
    wanted = store_record(uri, runs_folder)
    owner = runs_folder / OWNER_FILE
    try:
        recorded = json.loads(owner.read_text())["store"]
    except FileNotFoundError:
        runs_folder.mkdir(parents=True, exist_ok=True)
        owner.write_text(json.dumps({"store": wanted, "as_given": redact_uri(uri)}) + "\n")
        return
    except (OSError, ValueError, KeyError, TypeError):
        return  # unreadable: written by hand or cut short; the runs' own records still hold
    if recorded != wanted:
        raise OtherStore(
            f"the runs folder {runs_folder} holds runs tracked in {_shown(recorded, runs_folder)}, but this "
            f"campaign now tracks in {redact_uri(uri)}: a second store would launch every run again into the "
            f"same folders; set tracking.uri back to that store, or give the campaign another name "
            f"(or move {runs_folder} away) to start anew")


def _shown(record: str, runs_folder: Path) -> str:
    if record.startswith(SQLITE) and not record.startswith(SQLITE + "/"):
        path, sep, query = record[len(SQLITE):].partition("?")
        return f"{SQLITE}{os.path.normpath(runs_folder / path)}{sep}{query}"
    return record
