from __future__ import annotations

import io

from rich.console import Console

from rcpforge.orchestrator.ledger import make_plan
from rcpforge.orchestrator.progress import RunProgress
from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.contract import RunResult, RunStatus
from tests.helpers.campaigns import tiny_campaign


def _feed(console: Console):
    specs = expand(parse_campaign(tiny_campaign(seeds=2)))
    progress = RunProgress(console)
    progress.on_plan(make_plan(specs, {}, max_attempts=2, retry_failed=False))
    outcomes = [
        RunResult(status=RunStatus.converged, tokens_to_target=40960, samples_to_target=5120, tokens_trained=40960),
        RunResult(status=RunStatus.not_converged, tokens_trained=400000),
        RunResult(status=RunStatus.failed, error="Traceback...\nRuntimeError: boom"),
    ]
    for spec, result in zip(specs, outcomes):
        progress.on_event("start", spec, None)
        progress.on_event("end", spec, result)
    progress.on_event("retry", specs[2], outcomes[2])
    progress.close()
    return specs


def test_plain_output_is_one_line_per_finished_run():
    out = io.StringIO()
    specs = _feed(Console(file=out, force_terminal=False, width=200))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("8 runs in the campaign") and lines[0].endswith("8 to launch")
    assert lines[1] == f"[1/8] {specs[0].run_name}: converged at 40,960 tokens (0.0s)"
    assert lines[2].startswith(f"[2/8] {specs[1].run_name}: not_converged after 400,000 tokens")
    assert lines[3] == f"[3/8] {specs[2].run_name}: failed: RuntimeError: boom"
    assert lines[4] == f"retry  {specs[2].run_name}"


def test_terminal_output_has_a_bar_per_cell_with_its_counts():
    out = io.StringIO()
    _feed(Console(file=out, force_terminal=True, width=200, color_system=None))
    screen = out.getvalue()
    for cell in ("bf16 bs16", "bf16 bs64", "fp8_tensorwise bs16", "fp8_tensorwise bs64"):
        assert cell in screen
    # the first cell (bf16 bs16, 2 runs) got one converged and one not converged run
    assert "conv 1  not 1  div 0  fail 0  441k tokens" in screen
    # the failed run was retried: its cell now waits for 3 runs
    assert "1/3" in screen


def test_an_outcomes_note_is_on_its_line_and_a_failure_shows_its_reason():
    from rcpforge.orchestrator.progress import describe
    from rcpforge.trainers.contract import ErrorKind, RunResult, RunStatus

    warned = RunResult(status=RunStatus.converged, tokens_to_target=640, samples_to_target=160, wall_s=1.0,
                       error="warning: the run disclosed lowest_numerical_precision_in_linear 'nvfp4'")
    assert describe(warned) == ("converged at 640 tokens (1.0s); warning: the run disclosed "
                                "lowest_numerical_precision_in_linear 'nvfp4'")
    crashed = RunResult(status=RunStatus.failed, error="last lines of output:\nTraceback (most recent call last):\n"
                        "  File \"train.py\", line 3\nValueError: lr must be positive\n"
                        "process ended without run_stop (exit code 1); output in /x/output.log")
    # the program's exception, not only that it ended
    assert describe(crashed) == ("failed: ValueError: lr must be positive (process ended without run_stop "
                                 "(exit code 1); output in /x/output.log)")
    # a configuration error's reason is the campaign's closing line: said once, there
    misconfigured = crashed.model_copy(update={"error_kind": ErrorKind.configuration})
    assert describe(misconfigured) == "failed: a configuration error; the campaign stops (why: the last line)"
