"""The commands that only read a campaign's runs never make its store: before the first
`rcpforge run`, or with a mistyped SQLite file in tracking.uri, status, analyze, report
and export answer in one line (exit 2) that names the campaign and the store and says to
run it first; plan predicts from no runs. Either way the file system is as it was (an
MLflow open would have made the database, and `status` would then have shown every run
as still to do). check and round --no-import, which read files and no store, answer a
missing or mistyped input and an output path of the wrong kind the same way. (A tracking
server and a PostgreSQL database without the campaign: test_reading_stores.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.cli import invoke, one_line_usage_error

READERS = [("status",), ("status", "--watch"), ("analyze", "--out", "{tmp}/analysis"),
           ("report", "--out", "{tmp}/report.html"), ("export", "--parquet", "{tmp}/runs.parquet"),
           ("export", "--results", "{tmp}/results")]
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


# check and round --no-import read files, not a store: a folder or an RCP file that is
# not there (missing, mistyped), or an output path of the wrong kind, is one line and
# leaves every file as it was. `{tmp}/results` holds a file that is no result file.
FILE_READERS = {
    "check: no such folder": (("check", "{tmp}/no_such_results", "--rcps", "5.1.0"), "is not a folder"),
    "check: mistyped RCP file": (("check", "{tmp}/results", "--rcps", "{tmp}/rcps.jsn"),
                                 "is neither an RCP file nor a ruleset"),
    "check: no result files": (("check", "{tmp}/results", "--rcps", "5.1.0"), "no result_*.txt files"),
    "round: no such folder": (("round", "{tmp}/no_such_round", "--rcps", "5.0.0", "--no-import"),
                              "no such directory"),
    "round: mistyped RCP file": (("round", "{tmp}/results", "--rcps", "{tmp}/rcps.jsn", "--no-import"),
                                 "neither an RCP file nor a ruleset"),
    "round: --parquet a folder": (("round", "{tmp}/results", "--rcps", "5.0.0", "--no-import", "--parquet",
                                   "{tmp}/results"), "--parquet {tmp}/results is a folder, and --parquet names a file"),
    "round: --html under a file": (("round", "{tmp}/results", "--rcps", "5.0.0", "--no-import", "--html",
                                    "{tmp}/rcps.json/round.html"), "{tmp}/rcps.json is a file, not a folder"),
}


@pytest.mark.parametrize("case", sorted(FILE_READERS))
def test_check_and_round_without_import_answer_bad_paths_in_one_line_and_make_nothing(case, tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "notes.txt").write_text("not a result file")
    (tmp_path / "rcps.json").write_text("{}")
    command, fragment = FILE_READERS[case]
    before = _tree(tmp_path)
    one_line_usage_error(invoke(*(a.format(tmp=tmp_path) for a in command)), fragment.format(tmp=tmp_path))
    assert _tree(tmp_path) == before
