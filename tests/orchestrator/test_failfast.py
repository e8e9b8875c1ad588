"""No silent surprises (issue 38): a configuration error (the unit rule, a program file
that does not exist, a program that fails alike before any MLLOG line on two runs' first
attempts) is not retried and stops the campaign with one line (exit 2), the store saying
its kind; a transient crash mid-run keeps its retries; after the fix, `rcpforge run`
completes with each run counted once. Instant command programs
(tests/helpers/failing_program.py), the real CLI, a real SQLite store."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_ATTEMPTS, TAG_ERROR_KIND, TAG_RUN_KEY, TAG_STATUS
from tests.cluster.helpers import runs_of
from tests.conftest import ROOT, run_cli
from tests.helpers.campaigns import tiny_campaign, write_campaign

FAILING = ROOT / "tests" / "helpers" / "failing_program.py"


def failing_campaign(mode: str, program: str = str(FAILING), benchmark: str = "llama31_8b",
                     backend: dict | None = None) -> dict:
    """Six runs (batch sizes 16 and 64, three seeds), one worker: one run at a time."""
    data = tiny_campaign(recipes=["bf16"], seeds=3, backend=backend or {"kind": "local", "workers": 1})
    data["trainer"] = {"kind": "command", "metric_key": "eval_accuracy", "unit": "samples",
                       "argv": ["{python}", program, mode, "{batch_size}", "{seed}", "{benchmark}", "{output_dir}"]}
    data["target"] = {"metric": "eval_accuracy", "mode": "max", "value": 1.0}
    data["budget"] = {"max_tokens": 1_000_000, "eval_every_tokens": 16}
    data["hparams"] = {bs: {} for bs in data["batch_sizes"]}
    data["rcp"] = {"benchmark": benchmark} if benchmark == "llama31_8b" else {"benchmark": benchmark,
                                                                               "submission_runs": 3}
    return data


def stopped(tmp_path, data: dict, most_attempts: int, misconfigured: int = 1):
    """Run the campaign: it stops with one line (exit 2), no run past `most_attempts`
    attempts, `misconfigured` runs of kind configuration, the other runs not launched."""
    path = write_campaign(tmp_path, data)
    proc = run_cli("run", str(path), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # MLflow's own log lines (dated) aside
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not re.match(r"\d{4}/\d\d/\d\d ", line)]
    assert len(lines) == 1 and "stopped on a configuration error" in lines[0], proc.stderr
    if misconfigured == 1:  # a run that says it is misconfigured: its reason is said once, on that line
        assert "failed: a configuration error; the campaign stops (why: the last line)" in proc.stdout, proc.stdout
    campaign = load_campaign(path)
    _, runs = runs_of(campaign)
    launched = [r for r in runs if int(r.data.tags.get(TAG_ATTEMPTS, "0")) > 0]
    kinds = Counter(r.data.tags.get(TAG_ERROR_KIND) for r in launched)
    assert kinds == {"configuration": misconfigured}, kinds
    assert max(int(r.data.tags[TAG_ATTEMPTS]) for r in launched) <= most_attempts
    assert all(r.data.tags[TAG_STATUS] == "failed" for r in launched)
    return path, campaign, lines[0]


def test_unit_rule_stops_the_campaign_and_a_fixed_file_completes_it_once(tmp_path):
    path, campaign, line = stopped(tmp_path, failing_campaign("epochs"), most_attempts=1)
    assert "has no metadata samples_count" in line and "rcpforge run" in line
    # the eval line the run stopped on is the failure's subject, not an "unreadable line skipped"
    assert "unreadable" not in line and len(line) < 600 + len(str(path)), line
    # the fix: rcp.benchmark one the checker counts in epoch_num (same run keys)
    write_campaign(tmp_path, failing_campaign("epochs", benchmark="byo_epochs"))
    proc = run_cli("run", str(path), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, runs = runs_of(campaign)
    keys = Counter(r.data.tags[TAG_RUN_KEY] for r in runs)
    assert len(keys) == 6 and set(keys.values()) == {1}, keys
    assert Counter(r.data.tags[TAG_STATUS] for r in runs) == {"converged": 6}
    assert not any(TAG_ERROR_KIND in r.data.tags for r in runs)


def test_a_metric_key_the_program_never_logs_stops_the_campaign_naming_what_it_logs(tmp_path):
    data = failing_campaign("fine", benchmark="byo_epochs")  # a program the checker reads as it is
    data["trainer"].update(metric_key="eval_acc", unit="epochs")  # it logs eval_accuracy, in epochs
    _, _, line = stopped(tmp_path, data, most_attempts=1)
    assert "trainer.metric_key 'eval_acc' is never logged by the program: its eval lines log 'eval_accuracy'; " \
           "did you mean 'eval_accuracy'?" in line, line


def test_a_program_that_does_not_exist_stops_the_campaign(tmp_path):
    path, _, line = stopped(tmp_path, failing_campaign("epochs", program=str(tmp_path / "no_such.py")),
                            most_attempts=1)
    assert "no_such.py" in line and "does not exist" in line
    # status says which kind of failure and why, in words and in --json
    shown = run_cli("status", str(path), timeout=60)
    assert shown.returncode == 0, shown.stderr
    said = [x for x in shown.stdout.splitlines() if x.startswith("failed (")]
    assert len(said) == 1 and said[0].startswith("failed (configuration): trainer.argv names") and \
        "no_such.py" in said[0] and "[1 run: bf16-bs16-s0]" in said[0], shown.stdout
    failed = json.loads(run_cli("status", str(path), "--json", timeout=60).stdout)["failed_runs"]
    assert [(f["run"], f["kind"], f["attempts"]) for f in failed] == [("bf16-bs16-s0", "configuration", 1)]
    assert "does not exist" in failed[0]["reason"]


def test_a_program_that_cannot_be_started_stops_the_campaign(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho never\n")  # not executable: argv[0] cannot be started
    data = failing_campaign("epochs")
    data["trainer"]["argv"] = [str(script), "{seed}"]
    _, _, line = stopped(tmp_path, data, most_attempts=1)
    assert f"cannot start '{script}'" in line and "Permission denied" in line and "trainer.argv" in line


def test_two_runs_failing_alike_before_any_mllog_line_stop_it(tmp_path):
    # one worker: the first run's two attempts, then the second run's first; then it stops
    _, _, line = stopped(tmp_path, failing_campaign("early"), most_attempts=2, misconfigured=2)
    assert "before their first MLLOG line" in line and "cannot read the dataset index" in line


def test_a_crash_after_mllog_lines_is_still_retried(tmp_path):
    # every run crashes once mid-run; seed 0's on every attempt: a transient failure
    path = write_campaign(tmp_path, failing_campaign("crash", benchmark="byo_epochs"))
    proc = run_cli("run", str(path), timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # the campaign finished, 2 runs without an outcome
    _, runs = runs_of(load_campaign(path))
    assert {r.data.tags[TAG_ATTEMPTS] for r in runs} == {"2"}
    assert Counter((r.data.tags[TAG_STATUS], r.data.tags.get(TAG_ERROR_KIND)) for r in runs) == {
        ("converged", None): 4, ("failed", "transient"): 2}


def test_the_attempt_budget_is_the_stores_across_a_fix_and_a_killed_orchestrator(tmp_path):
    """Two runs one at a time, max_attempts 3: the first's configuration error (a free
    attempt), the fix, its next attempt killed with the orchestrator, then a restart where
    every attempt crashes: the budget read back from the store gives the first run attempts
    3 and 4 (three of its own after the free one), as an orchestrator never killed would,
    the second its 3, and neither any more after that."""
    def one_run(mode: str, benchmark: str) -> dict:
        data = failing_campaign(mode, benchmark=benchmark, backend={"kind": "local", "workers": 1, "max_attempts": 3})
        data.update(seeds=1)
        return data

    path, campaign, _ = stopped(tmp_path, one_run("stall", "llama31_8b"), most_attempts=1)
    write_campaign(tmp_path, one_run("stall", "byo_epochs"))  # the fix
    proc = subprocess.Popen([sys.executable, "-m", "rcpforge.orchestrator.cli", "run", str(path)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    marker = campaign.run_dir(expand(campaign)[0]).parent / "stalled"
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)  # attempt 2 is running: killed with its orchestrator
    proc.wait(timeout=30)
    assert marker.exists(), "attempt 2 never started"

    for _ in range(2):  # the restart, then a run with nothing left to try
        again = run_cli("run", str(path), timeout=120)
        assert again.returncode == 3, again.stdout + again.stderr
        _, runs = runs_of(campaign)
        assert sorted((r.info.run_name, r.data.tags[TAG_ATTEMPTS], r.data.tags[TAG_STATUS],
                       r.data.tags.get(TAG_ERROR_KIND)) for r in runs) == [
            ("bf16-bs16-s0", "4", "failed", "transient"), ("bf16-bs64-s0", "3", "failed", "transient")]
    assert "nothing to launch" in again.stdout
