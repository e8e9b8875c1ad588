"""`rcpforge run --dry-run` (issue 38): per distinct configuration (recipe x batch size),
the argv, environment, working folder and MLLOG file of one run and each gang task's
variables, with nothing launched and nothing written; and what it shows is what the
real launch starts (a command program that writes down how it was started, a 2-rank gang
on the local backend, a real SQLite store)."""

from __future__ import annotations

import json
import os
import re

from tests.conftest import ROOT, run_cli
from tests.helpers.campaigns import tiny_campaign, write_campaign

RECORDING = ROOT / "tests" / "helpers" / "recording_program.py"
# chosen as the run starts: a dry run names it instead
PORT_VARS = {"MASTER_PORT", "RCPFORGE_MASTER_PORT"}


def recording_campaign() -> dict:
    """2 batch sizes x 1 seed of one recipe, each run a gang of 2 ranks."""
    data = tiny_campaign(recipes=["bf16"], seeds=1, batch_sizes=[16, 64],
                         backend={"kind": "local", "workers": 2}, launch={"processes_per_node": 2})
    data["trainer"] = {"kind": "command", "metric_key": "eval_accuracy", "unit": "samples",
                       "argv": ["{python}", str(RECORDING), "{output_dir}", "--bs={batch_size}", "--rank={node_rank}"],
                       "env": {"OMP_NUM_THREADS": "1", "MY_SEED": "{seed}"}, "workdir": "work"}
    data["target"] = {"metric": "eval_accuracy", "mode": "max", "value": 1.0}
    data["budget"] = {"max_tokens": 1_000_000, "eval_every_tokens": 16}
    data["hparams"] = {bs: {} for bs in data["batch_sizes"]}
    data["rcp"] = {"benchmark": "byo_epochs", "submission_runs": 3}
    return data


def tree(folder) -> dict[str, tuple[int, int]]:
    """Every path under `folder` with its size and modification time."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            info = os.stat(path)
            out[os.path.relpath(path, folder)] = (info.st_size, info.st_mtime_ns)
    return out


def test_dry_run_shows_what_the_launch_starts_and_writes_nothing(tmp_path):
    (tmp_path / "work").mkdir()
    path = write_campaign(tmp_path, recording_campaign())
    before = tree(tmp_path)
    proc = run_cli("run", str(path), "--dry-run", "--json", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert tree(tmp_path) == before  # no store, no ledger, no lock, no run folder
    shown = json.loads(proc.stdout)
    configs = shown["configurations"]
    assert [(c["batch_size"], c["seed"], c["runs"]) for c in configs] == [(16, 0, 1), (64, 0, 1)]
    assert [[t["variables"]["RANK"] for t in c["tasks"]] for c in configs] == [["0", "1"], ["0", "1"]]

    # the real launch: what each task's program saw is what the dry run said
    proc = run_cli("run", str(path), timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for config in configs:
        for task in config["tasks"]:
            n = task["task"]
            folder = os.path.join(config["output_dir"], f"rank{n}") if n else config["output_dir"]
            seen = json.loads(open(os.path.join(folder, "started.json")).read())
            assert seen["argv"] == task.get("argv", config["argv"])
            assert seen["cwd"] == config["workdir"] == str(tmp_path / "work")
            expected = {**task["variables"], **config["env"], **task.get("env", {})}
            assert {k: seen["env"].get(k) for k in expected if k not in PORT_VARS} == \
                {k: v for k, v in expected.items() if k not in PORT_VARS}
            assert seen["env"]["MY_SEED"] == "0" and seen["env"]["RCPFORGE_BATCH_SIZE"] == str(config["batch_size"])
            assert config["mllog_file"] is None
            assert os.path.exists(config["result_file"])


def test_dry_run_of_the_tiny_lm_shows_its_in_process_settings(tmp_path):
    path = write_campaign(tmp_path, tiny_campaign(launch={"processes_per_node": 2}))
    before = tree(tmp_path)
    proc = run_cli("run", str(path), "--dry-run", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert tree(tmp_path) == before
    out = proc.stdout
    assert "12 runs in 4 configurations" in out
    assert len(re.findall(r"^\s+in process:\s+trainer tinylm", out, re.M)) == 4
    assert '"d_model": 32' in out and '"lr": 0.02' in out
    assert len(re.findall(r"^\s+task 1 of 2: .*\bRANK=1 LOCAL_RANK=1", out, re.M)) == 4


def test_json_without_dry_run_is_refused_in_one_line(tmp_path):
    path = write_campaign(tmp_path, recording_campaign())
    proc = run_cli("run", str(path), "--json", timeout=60)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("warning:")]  # byo_epochs's note
    assert len(errors) == 1 and errors[0].startswith("error: --json") and "--dry-run" in errors[0], proc.stderr
    assert not (tmp_path / "rcpforge-mlflow.db").exists()


def test_dry_run_warns_of_a_script_argv_names_that_is_not_there(tmp_path):
    """`run` fails the first run on it as a configuration error; the dry run says so first."""
    data = recording_campaign()
    data["trainer"] = dict(data["trainer"], argv=["{python}", "no_such_train.py", str(RECORDING),
                                                  "{output_dir}/made_by_the_run.yaml"])
    (tmp_path / "work").mkdir()
    path = write_campaign(tmp_path, data)
    proc = run_cli("run", str(path), "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # it may exist where a cluster runs it
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: trainer.argv")]
    assert len(warnings) == 1, proc.stderr  # once, however many configurations name it
    assert "'no_such_train.py', which does not exist in " + str(tmp_path / "work") in warnings[0], warnings
    shown = json.loads(run_cli("run", str(path), "--dry-run", "--json").stdout)
    # the recording program exists; a file in the run's own folder is its output, not an input
    assert all(c["missing_inputs"] == ["no_such_train.py"] for c in shown["configurations"])
    fixed = dict(data["trainer"], argv=["{python}", str(RECORDING), "{output_dir}"])
    clean = run_cli("run", str(write_campaign(tmp_path, {**data, "trainer": fixed})), "--dry-run")
    assert "warning: trainer.argv" not in clean.stderr, clean.stderr
