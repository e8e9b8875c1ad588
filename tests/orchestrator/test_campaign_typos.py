"""Every command that takes a campaign file answers a misspelt field in it (issue 38) with
one line naming the field and the closest valid name, exit 2, before anything is read or
written: the file tree is as it was. The commands are found on the CLI app itself, so a
new command that takes a campaign file is covered the day it is added."""

from __future__ import annotations

import pytest
import typer

from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.cli import invoke, one_line_usage_error
from tests.orchestrator.test_reading_commands import _tree


def _campaign_commands() -> list[str]:
    from rcpforge.orchestrator.cli import app

    commands = typer.main.get_command(app).commands
    return sorted(name for name, command in commands.items() if any(p.name == "campaign_file" for p in command.params))


COMMANDS = _campaign_commands()
# What a command needs besides the campaign file to get as far as reading it.
EXTRA = {"export": ("--parquet", "{tmp}/runs.parquet")}
TYPOS = [((), "sedes", "seeds"), (("budget",), "eval_every_tokns", "eval_every_tokens")]


def test_the_commands_that_take_a_campaign_file_are_all_here():
    assert COMMANDS == ["analyze", "export", "plan", "policy", "report", "run", "status", "tune"]


@pytest.mark.parametrize(("where", "typo", "meant"), TYPOS, ids=[t[1] for t in TYPOS])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_misspelt_campaign_field_is_one_line_with_the_closest_name_and_nothing_written(command, where, typo,
                                                                                         meant, tmp_path):
    data = tiny_campaign(name="typos")
    parent = data
    for part in where:
        parent = parent[part]
    parent[typo] = parent.pop(meant)
    path = write_campaign(tmp_path, data)
    before = _tree(tmp_path)
    field = ".".join((*where, typo))
    args = [a.format(tmp=tmp_path) for a in EXTRA.get(command, ())]
    one_line_usage_error(invoke(command, str(path), *args),
                         f"{field}: is not a known field; did you mean `{meant}`?")
    assert _tree(tmp_path) == before
