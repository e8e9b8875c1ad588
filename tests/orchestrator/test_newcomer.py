"""A newcomer's first hour, as docs/commands.md and the README's tour walk it: every command on
one small campaign (an instant command trainer, two recipes, two batch sizes), then the
project's own files round-tripped: export's results directories imported into a new
campaign, checked against the RCP file analyze wrote and read by rcp-stats. Every step
must end with the documented exit code and none may print a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcpforge.orchestrator.cli import app
from tests.helpers.campaigns import write_campaign

PROGRAM = Path(__file__).resolve().parents[1] / "helpers" / "factor_program.py"


def _campaign() -> dict:
    return {
        "name": "newcomer",
        "trainer": {"kind": "command", "unit": "samples", "tokens_per_sample": 4, "metric_key": "eval_accuracy",
                    "argv": ["{python}", str(PROGRAM), "{batch_size}", "{seed}", "{recipe_slowdown}",
                             "{max_tokens}", "4", "{benchmark}"]},
        "target": {"metric": "eval_accuracy", "mode": "max", "value": 0.9},
        "budget": {"max_tokens": 64 * 4 * 4 * 200, "eval_every_tokens": 64 * 4 * 4},
        "recipes": [{"bf16": {"slowdown": 1.0}}, {"fp8_like": {"slowdown": 1.05}}],
        "batch_sizes": [16, 64],
        "seeds": 6,
        "hparams": {16: {}, 64: {}},
        "backend": {"kind": "local", "workers": 2},
        "rcp": {"benchmark": "rcpforge_newcomer", "submission_runs": 3},
    }


def _cli(*args: str, code: int = 0, stdout: bool = False) -> str:
    """The command's output (standard output only with `stdout`, for its JSON)."""
    result = CliRunner().invoke(app, list(args))
    output = result.output
    assert "Traceback" not in output, (args, output[-3000:])
    assert result.exit_code == code, (args, result.exit_code, output[-3000:], result.exception)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        pytest.fail(f"{args}: {type(result.exception).__name__}: {result.exception}")
    return result.stdout if stdout else output


def test_every_command_of_the_readme_and_the_round_trips(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default store of import, as a newcomer's
    path = str(write_campaign(tmp_path, _campaign()))
    out = tmp_path / "analysis"

    _cli("recipes")
    _cli("plan", path)
    assert "24 runs in the campaign" in _cli("run", path)
    assert "nothing to launch" in _cli("run", path)  # done once and only once
    cells = json.loads(_cli("status", path, "--json", stdout=True))["cells"]
    assert sum(c["converged"] for c in cells) == 24
    _cli("analyze", path, "--out", str(out), "--resamples", "200")
    _cli("report", path, "--out", str(tmp_path / "report.html"))
    _cli("export", path, "--parquet", str(tmp_path / "runs.parquet"), "--results", str(tmp_path / "results"))

    # the project's own files: analyze's RCP file, read as the checker's tools read it
    rcps = out / "rcps_newcomer_bf16.json"
    stats = json.loads(_cli("rcp-stats", str(rcps), "--json", stdout=True))
    assert {r["batch_size"] for r in stats} == {16, 64}
    verdict = json.loads(_cli("check", str(tmp_path / "results" / "bf16" / "bs64"), "--rcps", str(rcps), "--json",
                               stdout=True))
    assert verdict["passed"], verdict  # the reference's own runs pass its own RCP
    # export's folder as a round: each (recipe, batch size) a submission, grouped like with like
    rows = json.loads(_cli("round", "--no-import", str(tmp_path / "results"), "--rcps", str(rcps), "--json",
                           stdout=True))
    assert sorted(r["dir"] for r in rows) == ["bf16/bs16", "bf16/bs64", "fp8_like/bs16", "fp8_like/bs64"]
    assert all(r["passed"] for r in rows if r["dir"].startswith("bf16")) and len({r["group"] for r in rows}) == 2
    # export's folder imported as a new campaign, whole: every run back
    imported = _cli("import", str(tmp_path / "results"), "--campaign", "reimported")
    assert "24 runs imported" in imported
    again = _cli("import", str(tmp_path / "results"), "--campaign", "reimported")
    assert "0 runs imported, 24 already there" in again

    # mistakes: one line each, the usage code
    for args in (("status", str(tmp_path / "nosuch.yaml")),
                 ("check", str(tmp_path / "results" / "bf16" / "bs64"), "--rcps", str(tmp_path / "runs.parquet")),
                 ("analyze", path, "--reference", "nosuch")):
        lines = [line for line in _cli(*args, code=2).splitlines() if line.strip()]
        assert len([line for line in lines if line.startswith("error:")]) == 1, (args, lines)
