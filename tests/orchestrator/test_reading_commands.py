"""The commands that only read a campaign's runs never make its store: before the first
`rcpforge run`, or with a mistyped SQLite file in tracking.uri, status, analyze, report
and export answer in one line (exit 2) that names the campaign and the store and says to
run it first; plan predicts from no runs. Either way the file system is as it was (an
MLflow open would have made the database, and `status` would then have shown every run
as still to do)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.cli import invoke, one_line_usage_error

READERS = [("status",), ("analyze", "--out", "{tmp}/analysis"), ("report", "--out", "{tmp}/report.html"),
           ("export", "--parquet", "{tmp}/runs.parquet"), ("export", "--results", "{tmp}/results")]
STORES = {
    "none yet": None,  # the default store beside the campaign file, not made yet
    "mistyped": "sqlite:///{tmp}/stores/rcpforge-mlfow.db",  # a folder that does not exist either
    "empty file": "sqlite:///{tmp}/empty.db",  # left by an earlier open that failed
}


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def _campaign(tmp_path: Path, store: str) -> Path:
    uri = STORES[store]
    data = tiny_campaign(name="readers")
    if uri is not None:
        data["tracking"] = {"uri": uri.format(tmp=tmp_path)}
    if store == "empty file":
        (tmp_path / "empty.db").write_bytes(b"")
    return write_campaign(tmp_path, data)


@pytest.mark.parametrize("store", sorted(STORES))
@pytest.mark.parametrize("command", READERS, ids=lambda c: " ".join(c[:2]))
def test_a_reading_command_on_a_store_not_made_is_one_line_and_makes_nothing(command, store, tmp_path):
    path = _campaign(tmp_path, store)
    before = _tree(tmp_path)
    args = [a.format(tmp=tmp_path) for a in command[1:]]
    one_line_usage_error(invoke(command[0], str(path), *args), "no runs of campaign readers at",
                         "(no such store yet)", f"`rcpforge run {path}` first, or check tracking.uri")
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("store", sorted(STORES))
def test_plan_on_a_store_not_made_predicts_from_no_runs_and_makes_nothing(store, tmp_path):
    path = _campaign(tmp_path, store)
    before = _tree(tmp_path)
    result = invoke("plan", str(path))
    assert result.exit_code == 0, result.output
    assert "runs per recipe to reach each precision" in result.output
    assert _tree(tmp_path) == before
