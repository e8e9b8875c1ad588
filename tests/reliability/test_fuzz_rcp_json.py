"""Fuzzing RCP JSON files through the CLI's reading path (`rcp-stats FILE --json`,
`check DIR --rcps FILE`): every input gives a result or a one-line `error:`, never a
traceback. In-process (typer's CliRunner) for speed; one subprocess test shows the real
CLI answers the same."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rcpforge.orchestrator.cli import app
from tests.analysis.mllog_dirs import write_results

RECORD = {"Benchmark": "resnet", "Creator": "t", "When": "now", "Platform": "x", "Precision": "bf16",
          "BS": 1024, "Hyperparams": {"lr": 1.0}, "Epochs to converge": [34, 35, 35, 36, 36, 37, 37, 38, 38, 39]}
VALID = {"resnet_ref_1024": RECORD, "resnet_ref_2048": dict(RECORD, BS=2048, **{"Epochs to converge": [60] * 10})}

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=10))
junk = st.one_of(scalars, st.lists(scalars, max_size=12), st.dictionaries(st.text(max_size=6), scalars, max_size=3))


@st.composite
def rcp_bodies(draw):
    """Mostly mutated valid files (so the reading goes deep), some arbitrary JSON."""
    if draw(st.integers(0, 9)) == 0:
        return draw(junk)
    body = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(sorted(body) or ["new"]))
        record = body.get(name)
        action = draw(st.sampled_from(["drop_key", "replace", "replace_record", "add_record", "epochs"]))
        if action == "replace_record" or not isinstance(record, dict) or not record:
            body[name] = draw(junk)
        elif action == "drop_key":
            record.pop(draw(st.sampled_from(sorted(record))), None)
        elif action == "replace":
            record[draw(st.sampled_from(sorted(record)))] = draw(junk)
        elif action == "epochs":
            record["Epochs to converge"] = draw(st.lists(st.one_of(st.floats(allow_nan=True), st.integers(-5, 10**9)),
                                                         max_size=12))
        else:
            body[draw(st.text(max_size=8))] = dict(record, BS=draw(junk))
    return body


def _assert_result_or_one_line_error(result, json_out: bool = True) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output + result.stderr
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    else:
        assert result.exit_code in (0, 1), (result.exit_code, result.stderr)
        if json_out:
            json.loads(result.stdout)


def _write(path: Path, body) -> Path:
    path.write_text(json.dumps(body, allow_nan=True))
    return path


@settings(max_examples=int(__import__("os").environ.get("RCPF_FUZZ_EXAMPLES", "1000")), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rcp_bodies())
def test_rcp_stats_reads_any_rcp_json(tmp_path, body):
    path = _write(tmp_path / "rcps.json", body)
    result = CliRunner().invoke(app, ["rcp-stats", str(path), "--json"])
    _assert_result_or_one_line_error(result)
    if result.exit_code == 0:
        assert isinstance(json.loads(result.stdout), list)


@settings(max_examples=int(__import__("os").environ.get("RCPF_FUZZ_EXAMPLES", "1000")), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(rcp_bodies(), st.text(max_size=80)))
def test_check_reads_any_rcp_json(tmp_path, body):
    results = tmp_path / "results"
    if not results.exists():
        write_results(results, "resnet", 1024, [34.5, 35, 36, 37, 38])
    path = tmp_path / "rcps.json"
    path.write_text(body) if isinstance(body, str) else _write(path, body)
    result = CliRunner().invoke(app, ["check", str(results), "--rcps", str(path), "--json"])
    _assert_result_or_one_line_error(result)


@pytest.mark.parametrize("body", ['{"x": {"BS": 1}}', "[1, 2", json.dumps(VALID)])
def test_the_real_cli_answers_as_in_process(tmp_path, cli, body):
    path = tmp_path / "rcps.json"
    path.write_text(body)
    inproc = CliRunner().invoke(app, ["rcp-stats", str(path), "--json"])
    real = cli("rcp-stats", str(path), "--json")
    assert real.returncode == inproc.exit_code
    assert "Traceback" not in real.stderr
    assert real.stdout == inproc.stdout
    assert real.stderr.strip().splitlines()[:1] == inproc.stderr.strip().splitlines()[:1]
