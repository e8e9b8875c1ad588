"""The `command` trainer with real processes: small stdlib scripts that misbehave in
every way the issue lists. The oracle for values to converge is the RCP checker."""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from mlperf_logging.rcp_checker import rcp_checker

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import CampaignError, parse_campaign
from rcpforge.trainers.command.trainer import OUTPUT_LOG, CommandTrainer, run_values
from rcpforge.trainers.contract import Budget, ErrorKind, EvalPoint, Reporter, RunSpec, RunStatus, Target
from rcpforge.trainers.registry import validate_trainer_settings
from tests.helpers.campaigns import tiny_campaign
from tests.helpers.processes import alive

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
class FakeReporter(Reporter):
    output_dir: Path
    campaign_dir: Path
    benchmark: str = "cmd_test"
    points: list[EvalPoint] = field(default_factory=list)

    def eval_point(self, point: EvalPoint) -> None:
        self.points.append(point)


def _run(tmp_path: Path, body: str, *, max_tokens: int = 10**9, hparams=None, benchmark="cmd_test", **settings):
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
    reporter = FakeReporter(tmp_path / "run", tmp_path, benchmark)
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
    assert result.status is RunStatus.failed  # a hung machine is not an outcome: the attempt is retried
    assert result.error.endswith("wall-clock budget of 1.5 s spent (trainer.max_wall_s)")
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
    assert result.error_kind is ErrorKind.configuration  # every run would fail alike: the campaign stops


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


@pytest.mark.parametrize("name", ["max_samples", "seed", "batch_size", "output_dir"])
def test_a_hyperparameter_named_like_a_built_in_placeholder_is_refused_naming_both(name):
    """A campaign file written before the placeholder existed: the built-in would win in argv
    while MLflow and the RCP file recorded the hyperparameter's value."""
    data = _campaign_with(["prog", "--x", f"{{{name}}}"])
    data["hparams"] = {16: {"lr": 0.1, name: 12288}, 64: {"lr": 0.2, name: 12288}}
    with pytest.raises(CampaignError) as info:
        parse_campaign(data)
    message = str(info.value)
    assert f"hparams.16.{name}: a hyperparameter named like the built-in placeholder {{{name}}}" in message
    assert f"rename the hyperparameter (e.g. my_{name})" in message
    # refused even where argv does not name it (yet)
    data["trainer"]["argv"] = ["prog"]
    with pytest.raises(CampaignError, match=f"hparams.16.{name}: a hyperparameter named like"):
        parse_campaign(data)


def test_a_hyperparameter_named_like_a_recipe_options_placeholder_is_refused():
    data = _campaign_with(["prog", "{recipe_block}"])
    data["recipes"] = [{"mine": {"block": 16}}]
    data["hparams"] = {16: {"lr": 0.1, "recipe_block": 32}, 64: {"lr": 0.2, "recipe_block": 32}}
    with pytest.raises(CampaignError, match=r"hparams.16.recipe_block: .*placeholder \{recipe_block\} of recipe mine"):
        parse_campaign(data)


def test_once_renamed_the_recorded_hyperparameters_are_what_the_program_receives(tmp_path):
    data = _campaign_with(["prog", "--steps", "{my_max_samples}", "--budget", "{max_samples}"])
    data["hparams"] = {16: {"lr": 0.1, "my_max_samples": 12288}, 64: {"lr": 0.2, "my_max_samples": 12288}}
    spec = next(s for s in expand(parse_campaign(data)) if s.batch_size == 16)
    values = run_values(spec, tmp_path, tmp_path, "bench", tokens_per_sample=8)
    assert spec.hparams["my_max_samples"] == 12288 and values["my_max_samples"] == "12288"
    assert values["max_samples"] == str(spec.budget.max_tokens // 8)  # the built-in, under its own name


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


def test_eval_lines_without_the_unit_the_checker_reads_fail_the_run_with_the_fix(tmp_path):
    # A custom benchmark is read in epoch_num: an LLM-style program that logs only
    # samples_count would be recorded not converged by the checker (1e9) without a word.
    # After the line the program goes on logging evals until it is stopped (or its 30 s
    # wall clock ends): a run stopped at the line has seen none of them.
    result, rep = _run(tmp_path, '''
        header(32, bench="my_llm")
        mllog("eval_accuracy", 0.95, samples_count=1000)
        for i in range(1, 100_000):
            mllog("eval_accuracy", 0.95, samples_count=1000 + i)
            time.sleep(0.01)
    ''', benchmark="my_llm")
    assert result.status is RunStatus.failed
    assert result.error.startswith("MLLOG eval line 'eval_accuracy' has no metadata epoch_num")
    assert "'my_llm'" in result.error and "set rcp.benchmark to the checker's name" in result.error
    assert "must agree" not in result.error  # the program logs the campaign's benchmark: no clash
    assert rep.points == []  # stopped at the line: no eval after it reached the run
    with pytest.raises(KeyError, match="epoch_num"):  # the oracle: the checker cannot read the line either
        _checker(rep.output_dir / "result.txt")


@pytest.mark.parametrize(("campaign_benchmark", "origin"), [
    ("llama31_8b", "(the campaign's rcp.benchmark)"),
    ("c", "(rcp.benchmark unset, so the campaign's name)"),
])
def test_a_program_logging_another_benchmark_than_the_campaign_is_told_the_clash(tmp_path, campaign_benchmark,
                                                                                 origin):
    # The campaign's benchmark is set (or is its name); the program logs its own name, read in
    # epoch_num: "set rcp.benchmark" would be a fix already in place, so the line names the clash.
    result, _ = _run(tmp_path, '''
        header(32, bench="my_llm")
        mllog("eval_accuracy", 0.95, samples_count=1000)
        mllog("run_stop", status="success")
    ''', benchmark=campaign_benchmark)
    assert result.status is RunStatus.failed and result.error_kind is ErrorKind.configuration
    error = result.error
    assert error.startswith("MLLOG eval line 'eval_accuracy' has no metadata epoch_num: the program logs "
                            "submission_benchmark 'my_llm' (its MLLOG), which the checker reads in epoch_num"), error
    assert f"but the campaign's benchmark is {campaign_benchmark!r} {origin}" in error, error
    assert f"make the program log submission_benchmark {campaign_benchmark!r}" in error
    assert "set rcp.benchmark: my_llm and log epoch_num" in error
    assert "set rcp.benchmark to the checker's name" not in error


def test_a_program_logging_no_benchmark_is_told_to_log_the_campaigns(tmp_path):
    result, _ = _run(tmp_path, '''
        mllog("global_batch_size", 32)
        mllog("eval_accuracy", 0.95, samples_count=1000)
        mllog("run_stop", status="success")
    ''', benchmark="llama31_8b")
    assert result.status is RunStatus.failed
    assert "the program logs no submission_benchmark (its MLLOG)" in result.error, result.error
    assert "campaign's benchmark is 'llama31_8b' (the campaign's rcp.benchmark), read in samples_count" in result.error
    assert "set rcp.benchmark: " not in result.error


def test_the_same_program_under_a_benchmark_counted_in_samples_converges(tmp_path):
    result, _ = _run(tmp_path, '''
        header(32, bench="llama31_8b")
        mllog("eval_accuracy", 0.95, samples_count=1000)
        mllog("run_stop", status="success")
    ''')
    assert result.status is RunStatus.converged and result.samples_to_target == 1000


def test_print_without_flush_reaches_rcpforge_while_the_program_runs(tmp_path, monkeypatch):
    # PYTHONUNBUFFERED: a program that only print()s its MLLOG lines (no flush) is
    # followed live; a block-buffered pipe would hold every line until it exits. The
    # program goes on only once rcpforge has seen its first eval (the reporter leaves a
    # file), so it converges only if that line arrived while it ran.
    seen = tmp_path / "seen"
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)  # rcpforge's own setting, not the caller's
    script = f'''
        import json, os, sys, time
        def line(key, value=None, **meta):
            print(":::MLLOG " + json.dumps({{"namespace": "", "time_ms": 0, "event_type": "POINT_IN_TIME",
                                            "key": key, "value": value, "metadata": meta}}))
        line("submission_benchmark", "llama31_8b"); line("global_batch_size", 32)
        line("eval_accuracy", 0.5, samples_count=100)
        for _ in range(2000):  # a safety limit, not a timing: 20 s, then give up unconverged
            if os.path.exists({str(seen)!r}):
                break
            time.sleep(0.01)
        else:
            sys.exit(3)
        line("eval_accuracy", 0.95, samples_count=200); line("run_stop", status="success")
    '''
    (tmp_path / "plain.py").write_text(textwrap.dedent(script))
    trainer = validate_trainer_settings({"kind": "command", "argv": ["{python}", "plain.py"], "stop_grace_s": 1})
    spec = RunSpec(campaign="c", recipe="bf16", batch_size=32, seed=1, hparams={"lr": 0.1},
                   target=Target(metric="eval_accuracy", mode="max", value=0.9),
                   budget=Budget(max_tokens=10**9, eval_every_tokens=1), trainer=trainer)

    class Answering(FakeReporter):
        def eval_point(self, point: EvalPoint) -> None:
            seen.touch()
            super().eval_point(point)

    result = CommandTrainer().train(spec, Answering(tmp_path / "run", tmp_path))
    assert result.status is RunStatus.converged, result.error


def test_an_mllog_file_is_followed_as_the_program_writes_it(tmp_path):
    # The program logs its MLLOG to a file only (mllog.config(filename=...)); its stdout
    # has other lines, including an MLLOG-looking one that must not count twice.
    result, rep = _run(tmp_path, '''
        out = sys.argv[3]
        print(":::MLLOG " + json.dumps({"key": "eval_accuracy", "value": 0.99, "metadata": {"epoch_num": 1}}))
        with open(os.path.join(out, "logs", "mllog.txt"), "w") as fh:
            def put(key, value=None, **meta):
                fh.write(":::MLLOG " + json.dumps({"namespace": "", "time_ms": 0, "event_type": "POINT_IN_TIME",
                                                   "key": key, "value": value, "metadata": meta}) + "\\n")
                fh.flush()
            put("submission_benchmark", "cmd_test"); put("global_batch_size", 32)
            put("eval_accuracy", 0.5, epoch_num=100, samples_count=100)
            time.sleep(1.5)
            fh.write(":::MLLOG {\\"key\\": \\"eval_acc")  # half a line: waits for its end
            fh.flush(); time.sleep(0.5)
            fh.write("uracy\\", \\"value\\": 0.95, \\"metadata\\": {\\"epoch_num\\": 300, \\"samples_count\\": 300}}\\n")
            put("run_stop", status="success")
    ''', mllog_file="logs/mllog.txt")
    assert result.status is RunStatus.converged and result.samples_to_target == 300
    assert [p.samples for p in rep.points] == [100, 300]
    assert _checker(rep.output_dir / "result.txt")[:3] == (0, 300, 32)
    assert "0.99" in (rep.output_dir / OUTPUT_LOG).read_text()  # stdout still kept, not read as MLLOG


def test_recipe_options_and_budgets_in_samples_reach_the_program(tmp_path):
    trainer = {"kind": "command", "tokens_per_sample": 4, "argv": [
        "{python}", "-c", "import sys; print(sys.argv[1:])", "{recipe}", "{recipe_block}", "{recipe_sr}",
        "{max_samples}", "{eval_every_samples}"]}
    campaign = parse_campaign(tiny_campaign(
        trainer=trainer, recipes=[{"te_nvfp4": {"block": 16, "sr": True, "precision": "nvfp4"}},
                                  {"fp32": {"block": 0, "sr": False}}],
        budget={"max_tokens": 4000, "eval_every_tokens": 400}))
    spec = next(s for s in expand(campaign) if s.recipe == "te_nvfp4")

    values = run_values(spec, tmp_path, tmp_path, "b", 4)
    assert (values["recipe"], values["recipe_block"], values["recipe_sr"]) == ("te_nvfp4", "16", "true")
    assert (values["max_samples"], values["eval_every_samples"]) == ("1000", "100")


@pytest.mark.parametrize("recipes, message", [
    ([{"te_nvfp4": {"block": 16}}, "fp32"], "campaign: trainer.argv[1]: placeholder {recipe_block} is option 'block' of recipe te_nvfp4 but not of fp32"),
    ([{"bad name": {}}], "recipes: label 'bad name'"),
    ([{"x": {"block": [16, 16]}}], "recipes.x.block: options of a command trainer's recipe are scalars"),
    ([{"x": {"precision": "fp6"}}], "recipes.x.precision: 'fp6' is not an MLPerf precision name"),
    ([{"x": {"lowest_numerical_precision_in_attn": "bf16"}}],
     "recipes.x.lowest_numerical_precision_in_attn: 'bf16' is not an MLPerf precision name"),
    ([{"x": {"tensor_parallelism": 0}}], "recipes.x.tensor_parallelism: 0: MLPerf's tensor_parallelism is a whole number of at least 1"),
])
def test_bad_recipe_labels_are_refused_naming_the_field(recipes, message):
    trainer = {"kind": "command", "argv": ["prog", "{recipe_block}"]}
    with pytest.raises(CampaignError) as err:
        parse_campaign(tiny_campaign(trainer=trainer, recipes=recipes))
    assert message in str(err.value)


def test_a_tinylm_campaign_keeps_refusing_unknown_recipe_names():
    with pytest.raises(CampaignError, match="recipes: unknown recipe 'te_nvfp4'"):
        parse_campaign(tiny_campaign(recipes=["bf16", "te_nvfp4"]))


def test_a_campaign_warns_where_the_unit_and_benchmark_disagree():
    custom = parse_campaign(tiny_campaign(trainer={"kind": "command", "argv": ["prog"]}))
    assert len(custom.warnings) == 1 and "read by the checker from each eval's epoch_num" in custom.warnings[0]
    llm = parse_campaign(tiny_campaign(trainer={"kind": "command", "argv": ["prog"]}, rcp={"benchmark": "llama31_8b"}))
    assert llm.warnings == []
    epochs = parse_campaign(tiny_campaign(trainer={"kind": "command", "argv": ["prog"], "unit": "epochs"},
                                          rcp={"benchmark": "llama31_8b"}))
    assert "trainer.unit is epochs" in epochs.warnings[0]


def test_a_disclosed_precision_that_contradicts_the_labels_is_a_warning_tag(tmp_path):
    from rcpforge.orchestrator.execute import _result_file_facts

    result = tmp_path / "result.txt"
    lines = [{"key": "run_start", "time_ms": 1_000}, {"key": "lowest_numerical_precision_in_linear", "value": "nvfp4"},
             {"key": "tensor_parallelism", "value": 2}, {"key": "run_stop", "time_ms": 4_500}]
    result.write_text("".join(":::MLLOG " + json.dumps({"event_type": "POINT_IN_TIME", "metadata": {}, **e}) + "\n"
                              for e in lines))
    spec = RunSpec(campaign="c", recipe="vendor_fp8", recipe_options={"precision": "fp8"}, batch_size=32, seed=1,
                   hparams={}, target=Target(metric="eval_accuracy", mode="max", value=0.9),
                   budget=Budget(max_tokens=100, eval_every_tokens=1), trainer={"kind": "command", "argv": ["x"]})
    measured, tags = _result_file_facts(result, spec)
    assert measured == {"time_to_train_s": 3.5}
    assert tags["rcpforge.mllog.tensor_parallelism"] == "2"
    assert "disclosed lowest_numerical_precision_in_linear 'nvfp4'" in tags["rcpforge.warning"]
    agreeing = spec.model_copy(update={"recipe_options": {"precision": "nvfp4"}})
    assert "rcpforge.warning" not in _result_file_facts(result, agreeing)[1]


def test_a_metric_key_the_program_never_logs_is_a_configuration_error_naming_what_it_logs(tmp_path):
    # the program logs its metric as eval_acc; the campaign reads eval_accuracy
    result, rep = _run(tmp_path, '''
        header(32)
        for s in range(1, 100_000):
            mllog("eval_loss", 2.0, epoch_num=s)
            mllog("eval_acc", 0.5, epoch_num=s)
            time.sleep(0.01)
    ''')
    assert result.status is RunStatus.failed and result.error_kind is ErrorKind.configuration
    assert result.error.startswith("trainer.metric_key 'eval_accuracy' is never logged by the program: its eval "
                                   "lines log 'eval_acc', 'eval_loss'; did you mean 'eval_acc'?"), result.error
    assert rep.points == []  # stopped at the second eval, not at its wall clock


def test_a_run_stop_success_without_an_eval_of_the_metric_key_is_no_convergence(tmp_path):
    # the checker reads the eval_accuracy line and the run_stop; the campaign's key is another
    result, rep = _run(tmp_path, '''
        header(32)
        evals(1000, acc=0.95)
        mllog("run_stop", status="success")
    ''', unit="samples", metric_key="eval_score")
    assert result.status is RunStatus.failed and result.error_kind is ErrorKind.configuration
    assert result.error.startswith("trainer.metric_key 'eval_score' is never logged by the program: its eval lines "
                                   "log 'eval_accuracy'"), result.error
    assert rep.points == []
