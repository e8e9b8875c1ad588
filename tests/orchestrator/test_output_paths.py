"""An output path of the wrong kind (a file where a command writes a folder, a folder where
it writes a file, a path under a file) is one line naming the flag, exit 2, before the
campaign's store is opened: nothing is written or left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.cli import invoke, one_line_usage_error

# (command, flag, whether the flag names a folder)
OUTPUTS = [
    ("analyze", "--out", True),
    ("report", "--out", False),
    ("export", "--parquet", False),
    ("export", "--results", True),
]


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize(("command", "flag", "folder"), OUTPUTS)
@pytest.mark.parametrize("mistake", ["other kind", "under a file"])
def test_an_output_path_of_the_wrong_kind_is_one_line_and_writes_nothing(command, flag, folder, mistake, tmp_path):
    path = write_campaign(tmp_path, tiny_campaign(name="outputs"))
    if mistake == "other kind":
        out = tmp_path / ("results" if folder else "out.html")  # .html: report tells its format by the name
        out.write_text("a file of the user's\n") if folder else out.mkdir()
        expect = ("is a file, and" if folder else "is a folder, and")
    else:
        (tmp_path / "notes.txt").write_text("a file of the user's\n")
        out = tmp_path / "notes.txt" / ("folder" if folder else "report.html")
        expect = "notes.txt is a file, not a folder"
    before = _tree(tmp_path)
    line = one_line_usage_error(invoke(command, str(path), flag, str(out)), flag, expect)
    assert "give" in line
    assert _tree(tmp_path) == before  # no store, no temporary file, nothing
    assert not (tmp_path / "rcpforge-mlflow.db").exists()


def test_a_package_folder_that_is_a_file_is_one_line(tmp_path):
    path = write_campaign(tmp_path, tiny_campaign(name="outputs"))
    (tmp_path / "pkg").write_text("x")
    before = _tree(tmp_path)
    result = invoke("export", str(path), "--package", str(tmp_path / "pkg"), "--submitter", "org", "--system", "sys")
    one_line_usage_error(result, "--package", "pkg is a file, and --package names a folder")
    assert _tree(tmp_path) == before
