"""The unit-rule warning (issue 38) is shown only while it can still apply: before any
run, and while a run of the campaign broke the rule; not by a launch, which checks the
rule itself on the first eval line (issue 52); not once the campaign's runs logged
the key the checker reads (every eval line of a run is checked against it, so a run whose
evals were read did). Instant command programs (tests/helpers/failing_program.py), the
real CLI in this process, a real SQLite store."""

from __future__ import annotations

from tests.helpers.campaigns import write_campaign
from tests.helpers.cli import invoke
from tests.orchestrator.test_failfast import failing_campaign

# The program logs epoch_num only. Under llama31_8b (read in samples_count) with
# trainer.unit: epochs it breaks the rule; under a benchmark read in epoch_num with
# trainer.unit: samples it keeps it.
UNIT_EPOCHS = "trainer.unit is epochs"
LOG_EPOCH_NUM = "with trainer.unit: samples the program must log epoch_num"


def _campaign(tmp_path, unit: str, benchmark: str):
    data = failing_campaign("epochs", benchmark=benchmark)
    data["trainer"]["unit"] = unit
    data["seeds"] = 1  # two runs (batch sizes 16 and 64): enough, and fast
    return write_campaign(tmp_path, data)


def _warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("warning:")]


def test_the_unit_warning_is_shown_while_it_can_apply_and_not_after(tmp_path):
    path = _campaign(tmp_path, "samples", "byo_epochs")  # read in epoch_num; the program logs it
    before = invoke("plan", str(path))  # no store yet: nothing says the program logs the key
    assert before.exit_code == 0, before.output
    assert [LOG_EPOCH_NUM in w for w in _warnings(before.output)] == [True], before.output
    assert not (tmp_path / "rcpforge-mlflow.db").exists()

    dry = invoke("run", str(path), "--dry-run")  # what a submitter looks at before a launch
    assert [LOG_EPOCH_NUM in w for w in _warnings(dry.output)] == [True], dry.output
    ran = invoke("run", str(path))
    assert ran.exit_code == 0, ran.output
    # a launch checks the rule on the first eval line itself (a run that breaks it stops the
    # campaign with the fix: tests/orchestrator/test_failfast.py), so it does not warn of it
    assert _warnings(ran.output) == [], ran.output
    for command in (("status",), ("plan",), ("analyze", "--out", str(tmp_path / "analysis")), ("run",)):
        result = invoke(command[0], str(path), *command[1:])
        assert result.exit_code == 0, result.output
        assert _warnings(result.output) == [], (command, result.output)  # every run logged epoch_num

    _campaign(tmp_path, "epochs", "llama31_8b")  # now read in samples_count, which the program does not log
    changed = invoke("plan", str(path))
    assert [UNIT_EPOCHS in w for w in _warnings(changed.output)] == [True], changed.output


def test_a_run_that_broke_the_rule_keeps_the_warning_until_it_logs_the_key():
    """The settling rule on the store's rows, one run key each way."""
    from rcpforge.orchestrator.campaign_warnings import unit_rule_settled

    broke = "MLLOG eval line 'eval_accuracy' has no metadata epoch_num: the checker reads ..."
    runs = [{"run_key": "a", "tokens_trained": 64.0, "error": None},
            {"run_key": "b", "tokens_trained": 0.0, "error": broke},
            {"run_key": "b", "tokens_trained": 48.0, "error": None},
            {"run_key": "c", "tokens_trained": 16.0, "error": broke},
            {"run_key": "d", "tokens_trained": 0.0, "error": "process ended without run_stop"}]
    assert unit_rule_settled(runs, {"a", "b"})  # b broke it, then ran again (the file fixed) and logged the key
    assert not unit_rule_settled(runs, {"a", "b", "c"})  # c broke it and has not run since
    assert not unit_rule_settled(runs, {"c", "d"})  # no evals read: d says nothing either way
    assert not unit_rule_settled(runs, {"x"})  # runs of another version of the file say nothing
