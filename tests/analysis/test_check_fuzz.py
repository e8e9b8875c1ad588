"""Fuzzed MLLOG streams through `rcpforge check`'s reading path (the real Typer command,
in-process so that a thousand examples stay fast; CliRunner keeps an uncaught exception
as `result.exception`): every input gets a verdict (exit 0 or
1 and one JSON object) or a one-line error (exit 2), never a traceback."""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rcpforge.orchestrator.cli import app

KEYS = ["submission_benchmark", "global_batch_size", "eval_accuracy", "eval_error", "run_stop", "train_samples", "run_start"]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10**12), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["success", "aborted", "resnet", "bert", "llama31_8b", "stable_diffusion", "FID", "CLIP", "[/red]", "[bold"]),
    st.text(max_size=8), st.lists(st.integers(0, 9), max_size=2), st.dictionaries(st.sampled_from(["a", "FID"]), st.integers(), max_size=1),
)
metadata = st.dictionaries(st.sampled_from(["epoch_num", "samples_count", "status", "step_num", "metric", "file"]), scalars, max_size=4)
records = st.fixed_dictionaries({"key": st.sampled_from(KEYS), "value": scalars, "metadata": metadata})


def _dump(record) -> str:
    return json.dumps(record, allow_nan=True)


lines = st.one_of(
    records.map(lambda r: ":::MLLOG " + _dump(r)),
    st.builds(lambda r, n: (":::MLLOG " + _dump(r))[:n], records, st.integers(0, 80)),  # half-written
    st.builds(lambda p, r: p + ":::MLLOG " + _dump(r), st.sampled_from(["[1,0]<stdout>: ", "x :::MLLOG ", "\x00\x1b[0m"]), records),
    st.sampled_from([":::MLLOG [1, 2]", ":::MLLOG null", ":::MLLOG \"run_stop\"", ":::MLLOG {}", ":::MLLOG {\"key\": \"run_stop\"}"]),
    st.text(max_size=30),
)
lines_bytes = st.one_of(lines.map(lambda s: s.encode("utf-8", "surrogatepass")), st.binary(max_size=30))


def _line(key, value, **meta) -> bytes:
    return (":::MLLOG " + _dump({"key": key, "value": value, "metadata": meta})).encode()


@st.composite
def plausible(draw, benchmark, bs):
    """A run as a trainer logs it, with a few fuzzed lines inserted anywhere."""
    unit = draw(st.sampled_from(["epoch_num", "samples_count"]))
    body = [_line("submission_benchmark", benchmark), _line("global_batch_size", bs)]
    body += [_line("eval_accuracy", 0.5, **{unit: v, "epoch_num": v}) for v in draw(st.lists(st.floats(0.5, 100), min_size=1, max_size=4))]
    body.append(_line("run_stop", None, status=draw(st.sampled_from(["success", "success", "success", "aborted"]))))
    for noise in draw(st.lists(lines_bytes, max_size=1)):
        body.insert(draw(st.integers(0, len(body))), noise)
    return b"\n".join(body)


@st.composite
def submissions(draw):
    benchmark = draw(st.sampled_from(["resnet", "resnet", "llama31_8b", "llama31_8b", "bert", "fuzz", "[/red]"]))
    bs = draw(st.sampled_from([1, 8, 16, 32, 64, 256, 3072, "[/bold]"]))
    return draw(st.lists(plausible(benchmark, bs), min_size=3, max_size=8))


files = st.one_of(submissions(), submissions(), submissions(), st.lists(st.lists(lines_bytes, max_size=10).map(lambda ls: b"\n".join(ls)), max_size=4))
rcps = st.one_of(
    st.sampled_from(["6.0.0", "5.1.0"]),
    st.builds(lambda bench, bs, vals: {"r": {"Benchmark": bench, "BS": bs, "Hyperparams": {}, "Epochs to converge": vals,
                                             "Samples to converge": vals}},
              st.sampled_from(["resnet", "llama31_8b", "fuzz"]), st.integers(1, 64),
              st.lists(st.floats(1, 100), min_size=3, max_size=6)),
    st.sampled_from(["{", "[]", '{"r": {}}']),
)

runner = CliRunner()


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(files, rcps, st.booleans(), st.sampled_from([[], ["--submission-runs", "3"], ["--submission-runs", "3"], ["--rcp-pass", "full"], ["--bert-train-samples"]]))
def test_any_stream_gets_a_verdict_or_one_line_error(tmp_path_factory, contents, rcp, as_json, extra):
    folder = tmp_path_factory.mktemp("fuzz")
    for i, content in enumerate(contents):
        (folder / f"result_{i}.txt").write_bytes(content)
    if isinstance(rcp, str) and not rcp[0].isdigit() or isinstance(rcp, dict):
        rcp_path = folder / "rcps.json"
        rcp_path.write_text(rcp if isinstance(rcp, str) else json.dumps(rcp))
        rcp = str(rcp_path)
    result = runner.invoke(app, ["check", str(folder), "--rcps", rcp, *(["--json"] if as_json else []), *extra])
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert result.exit_code in (0, 1, 2), result.output
    if result.exit_code == 2:
        errors = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(errors) == 1 and errors[0].startswith("error: "), result.stderr
        event("one-line error")
        return
    if not as_json:
        assert result.stdout.startswith("PASSED " if result.exit_code == 0 else "FAILED "), result.stdout
        event("text verdict")
        return
    verdict = json.loads(result.stdout)
    assert verdict["passed"] == (result.exit_code == 0)
    assert isinstance(verdict["message"], str) and verdict["message"]
    # NaN is the checker's own factor when olympic scoring leaves no run to average
    assert isinstance(verdict["norm_factor"], float) and (verdict["norm_factor"] >= 1 or math.isnan(verdict["norm_factor"]))
    event("passed" if verdict["passed"] else ("checker stops" if verdict["checker_error"] else "failed"))
