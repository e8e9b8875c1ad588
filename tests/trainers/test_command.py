"""The `command` trainer with real processes: small stdlib scripts that misbehave in
every way the issue lists. The oracle for values to converge is the RCP checker."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from mlperf_logging.rcp_checker import rcp_checker

from sweeps.spec import CampaignError, parse_campaign
from tests.helpers.campaigns import tiny_campaign
from tests.helpers.processes import alive
from trainers.command.trainer import OUTPUT_LOG, CommandTrainer
from trainers.contract import Budget, EvalPoint, RunSpec, RunStatus, Target
from trainers.registry import validate_trainer_settings

# What the scripts print: helpers to emit MLLOG lines with only the standard library.
PRELUDE = textwrap.dedent('''
    import json, os, signal, sys, time
    def mllog(key, value=None, prefix="", **metadata):
        event = {"namespace": "", "time_ms": 0, "event_type": "POINT_IN_TIME", "key": key,
                 "value": value, "metadata": metadata}
        sys.stdout.write(prefix + ":::MLLOG " + json.dumps(event) + "\\n"); sys.stdout.flush()
    def header(bs, bench="cmd_test"):
        mllog("submission_benchmark", bench); mllog("global_batch_size", bs)
    def evals(*samples, acc=0.5):
        for s in samples:
            mllog("eval_accuracy", acc, epoch_num=s, samples_count=s)
''')


@dataclass
class FakeReporter:
    output_dir: Path
    campaign_dir: Path
    benchmark: str = "cmd_test"
    points: list[EvalPoint] = field(default_factory=list)

    def eval_point(self, point: EvalPoint) -> None:
        self.points.append(point)


def _run(tmp_path: Path, body: str, *, max_tokens: int = 10**9, hparams=None, **settings):
    (tmp_path / "script.py").write_text(PRELUDE + textwrap.dedent(body))
    trainer = validate_trainer_settings(
        {"kind": "command", "argv": ["{python}", "script.py", "{batch_size}", "{lr}", "{output_dir}"],
         "max_wall_s": 30, "stop_grace_s": 1, **settings}
    )
    spec = RunSpec(
        campaign="c", recipe="bf16", batch_size=32, seed=1, hparams=hparams or {"lr": 0.25},
        target=Target(metric="eval_accuracy", mode="max", value=0.9),
        budget=Budget(max_tokens=max_tokens, eval_every_tokens=1), trainer=trainer,
    )
    reporter = FakeReporter(tmp_path / "run", tmp_path)
    return CommandTrainer().train(spec, reporter), reporter


def _checker(path: Path):
    return rcp_checker.read_submission_file(str(path), "6.0.0", False)


def test_converges_with_the_value_the_checker_reads(tmp_path):
    result, rep = _run(tmp_path, '''
        bs, lr, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
        assert os.environ["RCPFORGE_LR"] == lr == "0.25" and os.environ["RCPFORGE_BATCH_SIZE"] == "32"
        assert os.environ["RCPFORGE_OUTPUT_DIR"] == out and os.environ["EXTRA"] == "bs=32"
        header(bs)
        print("step 10 loss 3.2")
        mllog("eval_accuracy", 0.4, prefix="[rank0]: ", epoch_num=1000.0004, samples_count=1000)
        mllog("eval_accuracy", 0.95, prefix="[rank0]: ", epoch_num=2000.0004, samples_count=2000)
        mllog("run_stop", prefix="[rank0]: ", status="success")
    ''', env={"EXTRA": "bs={batch_size}"}, tokens_per_sample=8)
    assert result.status is RunStatus.converged, result.error
    not_converged, value, bs, _ = _checker(rep.output_dir / "result.txt")
    assert (not_converged, bs) == (0, 32)
    assert result.samples_to_target == value == 2000  # epoch_num rounded to 3 decimals
    assert result.tokens_to_target == 2000 * 8
    assert [(p.samples, p.tokens, p.metrics["eval_accuracy"]) for p in rep.points] == [(1000, 8000, 0.4), (2000, 16000, 0.95)]


def test_garbage_and_binary_bytes_on_stdout(tmp_path):
    result, rep = _run(tmp_path, '''
        out = sys.stdout.buffer
        out.write(bytes(range(256)) + b"\\n"); out.write(b"\\xff\\xfe\\x00:::MLLOG {not json\\n")
        out.write(b"x" * 3_000_000 + b"\\n"); out.flush()
        header(32)
        out.write(b"\\x00\\x01"); out.flush()
        evals(512)
        mllog("run_stop", status="success")
    ''')
    assert result.status is RunStatus.converged and result.samples_to_target == 512
    assert "1 unreadable MLLOG lines skipped" in result.error
    raw = (rep.output_dir / OUTPUT_LOG).read_bytes()
    assert bytes(range(256)) in raw and len(raw) > 3_000_000
    assert _checker(rep.output_dir / "result.txt")[:2] == (0, 512)


def test_a_half_written_line_then_exit_is_a_failure_with_the_tail(tmp_path):
    result, rep = _run(tmp_path, '''
        header(32); evals(100, 200)
        print("about to crash")
        sys.stdout.write(':::MLLOG {"namespace": "", "key": "run_st'); sys.stdout.flush()
        os._exit(3)
    ''')
    assert result.status is RunStatus.failed
    assert "exit code 3" in result.error and "about to crash" in result.error
    assert "1 unreadable MLLOG lines skipped" in result.error
    assert [p.samples for p in rep.points] == [100, 200]
    # the kept result file is readable by the checker: the cut line is not in it
    assert _checker(rep.output_dir / "result.txt")[:3] == (1, 1e9, 32)


def test_a_half_written_line_before_run_stop_does_not_hide_it(tmp_path):
    result, _ = _run(tmp_path, '''
        header(32); evals(100)
        sys.stdout.write(':::MLLOG {"key": "eval_accuracy", "val\\n')
        evals(300); mllog("run_stop", status="success")
    ''')
    assert result.status is RunStatus.converged and result.samples_to_target == 300


def test_a_process_killed_by_a_signal_fails(tmp_path):
    result, rep = _run(tmp_path, '''
        header(32); evals(64)
        print("last words", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    ''')
    assert result.status is RunStatus.failed
    assert "killed by SIGKILL" in result.error and "last words" in result.error
    assert rep.points[-1].samples == 64


def test_a_hang_without_output_is_stopped_at_the_wall_clock_budget(tmp_path):
    result, rep = _run(tmp_path, '''
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it
        child = os.fork()
        if child == 0:
            time.sleep(600); os._exit(0)
        open(sys.argv[3] + "/pids", "w").write(f"{os.getpid()} {child}")
        header(32); evals(10)
        time.sleep(600)
    ''', max_wall_s=1.5, stop_grace_s=0.5)
    assert result.status is RunStatus.not_converged
    assert "wall-clock budget of 1.5 s" in result.error
    for pid in map(int, (rep.output_dir / "pids").read_text().split()):
        assert not alive(pid)  # the program and the child it forked are gone
    checker = _checker(rep.output_dir / "result.txt")
    assert checker[:2] == (1, 1e9)
    assert '"rcpforge_reason": "wall-clock budget' in (rep.output_dir / "result.txt").read_text()


def test_the_token_budget_stops_a_program_past_max_tokens(tmp_path):
    result, rep = _run(tmp_path, '''
        header(32)
        for s in range(100, 10**9, 100):
            evals(s); time.sleep(0.01)
    ''', max_tokens=1000, tokens_per_sample=2)
    assert result.status is RunStatus.not_converged
    assert "token budget" in result.error
    assert rep.points[-1].tokens == 1200 and rep.points[-2].tokens == 1000


def test_run_stop_aborted_is_not_converged(tmp_path):
    result, _ = _run(tmp_path, 'header(32); evals(10, 20); mllog("run_stop", status="aborted")')
    assert result.status is RunStatus.not_converged and result.samples_to_target is None


def test_a_missing_program_is_a_failure(tmp_path):
    result, _ = _run(tmp_path, "", argv=["no-such-program-rcpforge", "{seed}"])
    assert result.status is RunStatus.failed
    assert "cannot start 'no-such-program-rcpforge'" in result.error and "No such file" in result.error


def _campaign_with(argv, **extra):
    data = tiny_campaign(trainer={"kind": "command", "argv": argv, **extra}, recipes=["bf16"])
    data["hparams"] = {16: {"lr": 0.1, "warmup": 5}, 64: {"lr": 0.2}}
    return data


def test_placeholders_that_name_no_field_fail_validation():
    with pytest.raises(CampaignError, match=r"trainer\.argv\[2\]: placeholder \{lrr\} names no field; valid placeholders: .*\blr\b"):
        parse_campaign(_campaign_with(["prog", "{seed}", "{lrr}"]))
    with pytest.raises(CampaignError, match=r"trainer\.env\.X: placeholder \{bogus\}"):
        parse_campaign(_campaign_with(["prog"], env={"X": "{bogus}"}))
    with pytest.raises(CampaignError, match=r"placeholder \{warmup\} is a hyperparameter of some batch sizes but not of 64"):
        parse_campaign(_campaign_with(["prog", "{warmup}"]))
    with pytest.raises(CampaignError, match=r"format specs"):
        parse_campaign(_campaign_with(["prog", "{lr:.3f}"]))
    ok = parse_campaign(_campaign_with(["prog", "{{literal}}", "{lr}", "{output_dir}", "{python}"]))
    assert ok.trainer["argv"][1] == "{{literal}}" and ok.trainer["unit"] == "samples"


def test_the_cli_refuses_a_bad_placeholder_before_any_run(tmp_path, cli):
    from tests.helpers.campaigns import write_campaign

    path = write_campaign(tmp_path, _campaign_with(["prog", "{nope}"]))
    proc = cli("run", str(path))
    assert proc.returncode == 2
    assert "placeholder {nope} names no field" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "rcpforge-mlflow.db").exists()


def test_llm_benchmarks_count_samples_count_as_the_checker_does(tmp_path):
    result, rep = _run(tmp_path, '''
        header(32, bench="llama31_8b")
        mllog("eval_accuracy", 0.5, epoch_num=0.25, samples_count=4096)
        mllog("eval_accuracy", 0.9, epoch_num=0.5, samples_count=8192)
        mllog("run_stop", status="success")
    ''')
    assert _checker(rep.output_dir / "result.txt") == (0, 8192, 32, "llama31_8b")
    assert result.samples_to_target == 8192


def test_unit_epochs_keeps_the_epochs_in_the_curve_and_samples_as_samples(tmp_path):
    result, rep = _run(tmp_path, '''
        header(32, bench="resnet")
        mllog("eval_accuracy", 0.5, epoch_num=1.5, samples_count=3000)
        mllog("eval_accuracy", 0.8, epoch_num=2.25, samples_count=4500)
        mllog("run_stop", status="success")
    ''', unit="epochs")
    assert _checker(rep.output_dir / "result.txt") == (0, 2.25, 32, "resnet")
    assert result.status is RunStatus.converged and result.samples_to_target == 4500
    assert rep.points[-1].metrics["epoch_num"] == 2.25
