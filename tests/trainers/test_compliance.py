"""trainers/contract/mllog/compliance.py sorts the compliance checker's verdict on a result
file key by key: written files, the checker itself reading them (mlperf-logging 4.1.68)."""

from __future__ import annotations

from rcpforge.trainers.contract.mllog.compliance import check_file, refusal_lines
from tests.analysis.mllog_dirs import mllog


def _file(tmp_path, lines: list[str]):
    path = tmp_path / "result_0.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_missing_rejected_added_and_an_accepted_alternative_are_told_apart(tmp_path):
    path = _file(tmp_path, [
        mllog("submission_benchmark", "llama31_8b"), mllog("submission_division", "closed"),
        mllog("tensor_parallelism", 0),  # the rules want at least 1
        mllog("config_filename", "camp.yaml", file="rcpforge"),  # appended by rcpforge
        mllog("micro_batch_size", 2), mllog("micro_batch_size", 4),  # twice, with two values
        mllog("epoch_start", None, epoch_num=0),  # block_start's alternative
    ])
    verdict = check_file(path, "6.1.0")
    state = {k.key: k.state for k in verdict.keys}
    assert state["tensor_parallelism"] == "rejected" and state["micro_batch_size"] == "rejected"
    assert state["config_filename"] == "added" and state["submission_division"] == "logged"
    assert state["pipeline_parallelism"] == "missing" and state["submission_org"] == "missing"
    assert state["block_start"] == "logged" and state["epoch_start"] == "logged"  # one of the two will do
    assert state["eval_accuracy"] == "missing"
    # the division's rules applied after the common ones, as the checker queues them
    assert verdict.rules[:2] == ["common.yaml", "closed_common.yaml"]
    assert state["gradient_accumulation_steps"] == "missing"  # a key of the division's rules
    lines = refusal_lines(verdict, events=False)
    assert lines[0].startswith("missing submission_org, submission_platform,") and "eval_accuracy" not in lines[0]
    assert any(line.startswith("rejected tensor_parallelism = 0: ") and "v['value'] >= 1" in line for line in lines)


def test_a_benchmark_the_ruleset_lacks_stops_at_the_common_and_division_rules(tmp_path):
    # the checker itself raises on it (no closed_<benchmark>.yaml): the verdict is the rules it has
    path = _file(tmp_path, [mllog("submission_benchmark", "my_study"), mllog("submission_division", "closed")])
    verdict = check_file(path, "6.1.0")
    assert verdict.rules == ["common.yaml", "closed_common.yaml"]
    assert {k.key: k.state for k in verdict.keys}["submission_benchmark"] == "rejected"
