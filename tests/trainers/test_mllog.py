"""MLLOG reading and writing against the oracle: `mlperf_logging.rcp_checker` itself."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from mlperf_logging.rcp_checker import rcp_checker

from rcpforge.trainers.contract import Budget, EvalPoint, RunResult, RunSpec, RunStatus, Target
from rcpforge.trainers.contract.mllog.read import SAMPLES_BENCHMARKS
from rcpforge.trainers.contract.mllog.read import follow_file as read_result_file
from rcpforge.trainers.contract.mllog.write import MllogWriter


def _line(key: str, value, **metadata) -> str:
    event = {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": key, "value": value,
             "metadata": {"file": "x.py", "lineno": 1, **metadata}}
    return ":::MLLOG " + json.dumps(event)


prefixes = st.sampled_from(["", "[rank0]: ", "0: ", "junk :::MLLOG ", "\x1b[0m"])
benchmarks = st.sampled_from(["resnet", "bert", "rcpforge_tiny", "llama31_8b", "llama2_70b_lora", "dlrmv4"])
counts = st.one_of(st.integers(0, 10**7), st.floats(0, 1000, allow_nan=False).map(lambda x: round(x, 5)))
lines = st.one_of(
    st.builds(lambda b: _line("submission_benchmark", b), benchmarks),
    st.builds(lambda b: _line("global_batch_size", b), st.integers(1, 4096)),
    st.builds(lambda v, e, s: _line("eval_accuracy", v, epoch_num=e, samples_count=s),
              st.floats(0, 1, allow_nan=False), counts, counts),
    st.builds(lambda s: _line("run_stop", None, status=s), st.sampled_from(["success", "aborted"])),
    st.builds(lambda: _line("run_start", None)),
    st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), max_size=40),
)


@st.composite
def result_files(draw):
    """A run's lines in a plausible order (benchmark and batch size somewhere early,
    evals, maybe a run_stop, maybe more lines), with prefixes and garbage between."""
    body = draw(st.lists(lines, max_size=8))
    evals = [_line("eval_accuracy", 0.5, epoch_num=e, samples_count=s) for e, s in draw(st.lists(st.tuples(counts, counts), min_size=1, max_size=6))]
    stop = [_line("run_stop", None, status=draw(st.sampled_from(["success", "success", "aborted"])))]
    head = [_line("submission_benchmark", draw(benchmarks)), _line("global_batch_size", draw(st.integers(1, 4096)))]
    ordered = draw(st.permutations(head)) + evals + stop + body
    position = draw(st.integers(0, len(ordered)))
    ordered = ordered[:position] + draw(st.lists(lines, max_size=3)) + ordered[position:]
    return [(draw(prefixes), line) for line in ordered]


@settings(max_examples=300, deadline=None)
@given(st.one_of(result_files(), st.lists(st.tuples(prefixes, lines), max_size=25)))
def test_reading_agrees_with_the_checker(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("r") / "result_0.txt"
    path.write_text("".join(p + line + "\n" for p, line in content), encoding="latin-1", errors="replace")
    try:
        expected = rcp_checker.read_submission_file(str(path), "6.0.0", False)
    except NameError:
        return  # the checker crashes on run_stop success before any eval; nothing to agree with
    reading = read_result_file(path)
    not_converged, value, bs, benchmark = expected
    assert (reading.batch_size, reading.benchmark) == (bs, benchmark)
    assert reading.converged == (not not_converged)
    if reading.converged:
        assert reading.value_to_converge == value


def test_half_written_and_binary_lines_are_skipped(tmp_path):
    good = [_line("submission_benchmark", "resnet"), _line("global_batch_size", 32),
            _line("eval_accuracy", 0.5, epoch_num=3.14159, samples_count=100),
            _line("run_stop", None, status="success")]
    path = tmp_path / "result_0.txt"
    path.write_text("\n".join(good) + "\n")
    reference = rcp_checker.read_submission_file(str(path), "6.0.0", False)
    noisy = [good[0], "\xff\xfe\x00 garbage", good[1], good[2][:40], "\x00" * 10 + good[2], good[3], good[2][:-7]]
    path.write_bytes(("\n".join(noisy)).encode("latin-1"))
    reading = read_result_file(path)
    assert (int(not reading.converged), reading.value_to_converge, reading.batch_size, reading.benchmark) == reference
    assert reference[1] == 3.142  # the checker rounds epoch_num to 3 decimals
    assert reading.unreadable == 2


def _spec(bs: int = 64, **hparams) -> RunSpec:
    return RunSpec(
        campaign="c", recipe="bf16", batch_size=bs, seed=3, hparams={"lr": 0.01, **hparams},
        target=Target(metric="eval_excess_loss", mode="min", value=0.4),
        budget=Budget(max_tokens=10_000, eval_every_tokens=1000), trainer={"kind": "tinylm"},
    )


def _write(path: Path, benchmark: str, samples: list[int], status: RunStatus, spec: RunSpec | None = None) -> None:
    writer = MllogWriter(path, benchmark, spec or _spec())
    for s in samples:
        writer.eval_point(EvalPoint(tokens=s * 16, samples=s, metrics={}), 0.5)
    writer.stop(RunResult(status=status, samples_to_target=samples[-1] if status is RunStatus.converged else None))


def test_written_files_give_the_checker_our_samples(tmp_path):
    for benchmark in ("rcpforge_tiny", "llama31_8b"):  # epoch_num and samples_count readers
        folder = tmp_path / benchmark
        _write(folder / "result_0.txt", benchmark, [1024, 2048, 3072], RunStatus.converged)
        _write(folder / "result_1.txt", benchmark, [1024, 2048], RunStatus.converged)
        _write(folder / "result_2.txt", benchmark, [1024, 2048, 4096], RunStatus.not_converged)
        files = sorted(str(p) for p in folder.glob("result_*.txt"))
        bs, epochs, bench = rcp_checker.get_submission_epochs(files, "6.0.0", False)
        assert (bs, bench) == (64, benchmark)
        assert epochs == [3072, 2048, 1e9]
    assert "llama31_8b" in SAMPLES_BENCHMARKS and "rcpforge_tiny" not in SAMPLES_BENCHMARKS


def test_a_rewritten_file_holds_only_the_last_attempt(tmp_path):
    path = tmp_path / "result.txt"
    _write(path, "b", [100, 200], RunStatus.failed)
    _write(path, "b", [100, 200, 300], RunStatus.converged)
    text = path.read_text()
    assert text.count('"key": "eval_accuracy"') == 3 and text.count('"key": "run_stop"') == 1
    assert text.count('"key": "submission_benchmark"') == 1


def test_hyperparameters_that_the_checker_would_misread_are_not_logged(tmp_path):
    path = tmp_path / "result_0.txt"
    _write(path, "b", [100], RunStatus.converged, _spec(bs=8, global_batch_size_scale=2, warmup=5))
    text = path.read_text()
    assert "global_batch_size_scale" not in text and '"key": "warmup"' in text
    assert '"key": "opt_base_learning_rate", "value": 0.01' in text
    assert rcp_checker.read_submission_file(str(path), "6.0.0", False) == (0, 100, 8, "b")
