"""The `rcpforge` command line in this process (typer's CliRunner): for tests of how a
command answers bad input, which need no fresh interpreter."""

from __future__ import annotations

from click.testing import Result
from typer.testing import CliRunner


def invoke(*args: str) -> Result:
    from rcpforge.orchestrator.cli import app

    return CliRunner().invoke(app, list(args))


def one_line_usage_error(result: Result, *fragments: str) -> str:
    """A command's answer to bad input: exit 2, one line holding every fragment, no
    traceback; the line is returned."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
