"""The one MLLOG reader, both ways in, against the oracle `read_submission_file`."""

from __future__ import annotations

import json

from hypothesis import event, given, settings
from hypothesis import strategies as st
from mlperf_logging.rcp_checker import rcp_checker

from rcpforge.trainers.contract.mllog.read import NOT_CONVERGED, CheckerStops, follow_file, read_result_file


def _line(key: str, value, **metadata) -> str:
    event = {"key": key, "value": value, "metadata": {"lineno": 1, **metadata}}
    return ":::MLLOG " + json.dumps(event)


prefixes = st.sampled_from(["", "[rank0]: ", "junk :::MLLOG ", "\x1b[0m"])
benchmarks = st.sampled_from(["resnet", "bert", "llama31_8b", "dlrmv4", "stable_diffusion"])
numbers = st.one_of(st.integers(0, 10**6), st.floats(0, 100, allow_nan=False))
lines = st.one_of(
    st.builds(lambda b: _line("submission_benchmark", b), benchmarks),
    st.builds(lambda b: _line("global_batch_size", b), st.integers(1, 4096)),
    st.builds(lambda v, e, s: _line("eval_accuracy", v, epoch_num=e, samples_count=s), numbers, numbers, numbers),
    st.builds(lambda s, m, v: _line("eval_accuracy", v, samples_count=s, step_num=s, metric=m),
              numbers, st.sampled_from(["FID", "CLIP"]), numbers),
    st.builds(lambda v: _line("train_samples", v), numbers),
    st.builds(lambda s: _line("run_stop", None, status=s), st.sampled_from(["success", "aborted"])),
    # what makes the checker raise: an eval without its unit, a half-written line
    st.builds(lambda v: _line("eval_accuracy", v), numbers),
    st.builds(lambda n: _line("eval_accuracy", 0.5, epoch_num=1.0)[:n], st.integers(10, 60)),
    st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), max_size=30),
)



@st.composite
def runs(draw):
    """A plausible run (benchmark and batch size, evals, a run_stop) with noise mixed in."""
    head = [_line("submission_benchmark", draw(benchmarks)), _line("global_batch_size", draw(st.integers(1, 4096)))]
    evals = [_line("eval_accuracy", 0.5, epoch_num=e, samples_count=s) for e, s in
             draw(st.lists(st.tuples(numbers, numbers), min_size=1, max_size=4))]
    stop = [_line("run_stop", None, status=draw(st.sampled_from(["success", "success", "aborted"])))]
    ordered = head + evals + stop
    at = draw(st.integers(0, len(ordered)))
    ordered = ordered[:at] + draw(st.lists(lines, max_size=2)) + ordered[at:]
    return [(draw(prefixes), line) for line in ordered]


@settings(max_examples=400, deadline=None)
@given(st.one_of(runs(), st.lists(st.tuples(prefixes, lines), max_size=14)), st.sampled_from(["6.0.0", "3.1.0"]), st.booleans())
def test_file_api_and_line_api_agree_with_the_checker(tmp_path_factory, content, ruleset, train_samples):
    path = tmp_path_factory.mktemp("r") / "result_0.txt"
    path.write_text("".join(p + line + "\n" for p, line in content), encoding="latin-1", errors="replace")
    try:
        expected = rcp_checker.read_submission_file(str(path), ruleset, train_samples)
    except Exception:  # noqa: BLE001 - the checker stops: so must the file API, naming file:line
        try:
            read_result_file(str(path), ruleset, train_samples)
        except CheckerStops as stop:
            assert stop.where.startswith(f"{path}:")
        else:
            raise AssertionError("the checker raises on this file, the file API did not")
        event("the checker stops")
        return
    not_converged, epochs, bs, benchmark = expected
    event("converged" if not not_converged else "not converged")
    got = read_result_file(str(path), ruleset, train_samples)
    assert (got.not_converged, got.bs, got.benchmark) == (not_converged, bs, benchmark)
    assert got.epochs == epochs or (not_converged and epochs == NOT_CONVERGED == got.epochs)
    if not train_samples:  # the live follower reads as the checker does without --bert_train_samples
        live = follow_file(path)
        assert (live.batch_size, live.benchmark, int(not live.converged)) == (bs, benchmark, not_converged)
        assert live.epochs == epochs
