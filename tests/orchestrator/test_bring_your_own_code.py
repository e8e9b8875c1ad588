"""Issue 14's done-when, end to end through the real command line: a submitter's own
PyTorch training script (`tests/helpers/byo_train.py`, logging through
`mlperf_logging.mllog` into a file) under recipe labels with options, run, analyzed,
checked and exported as a package that `mlperf_logging.package_checker` reads; and a
program that only `print()`s its MLLOG lines, followed live into MLflow."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest
import yaml

from rcpforge.analysis.load import load_runs
from rcpforge.orchestrator.tracking import Tracking
from rcpforge.trainers.contract.schema import METRIC_TIME_TO_TRAIN, TAG_DISCLOSED
from tests.conftest import ROOT, run_cli

SCRIPT = ROOT / "tests" / "helpers" / "byo_train.py"
LABELS = {"fp32": {"precision": "fp32"}, "te_nvfp4": {"precision": "nvfp4", "block": 16}}


def _campaign(folder: Path) -> Path:
    data = {
        "name": "byo",
        "trainer": {
            "kind": "command",
            "argv": ["{python}", str(SCRIPT), "--recipe", "{recipe}", "--precision", "{recipe_precision}",
                     "--bs", "{batch_size}", "--lr", "{lr}", "--seed", "{seed}", "--max-samples", "{max_samples}",
                     "--eval-every", "{eval_every_samples}", "--target", "{target_value}",
                     "--benchmark", "{benchmark}", "--mllog-file", "{output_dir}/mllog.txt"],
            "env": {"OMP_NUM_THREADS": "1"},
            "mllog_file": "mllog.txt",
            "max_wall_s": 300,
        },
        "target": {"metric": "eval_accuracy", "mode": "max", "value": 0.9},
        "budget": {"max_tokens": 20_000, "eval_every_tokens": 64},
        "recipes": [{name: opts} for name, opts in LABELS.items()],
        "batch_sizes": [16, 64],
        "seeds": 3,
        "hparams": {16: {"lr": 0.003}, 64: {"lr": 0.003}},
        "backend": {"kind": "local", "workers": 2},
        "rcp": {"benchmark": "byo_mlp", "submission_runs": 3},
    }
    path = folder / "campaign.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def byo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("byo")
    path = _campaign(folder)
    proc = run_cli("run", str(path), cwd=folder)
    assert proc.returncode == 0, proc.stderr
    return folder, path, proc


def test_every_run_of_the_script_converges_with_its_labels_options(byo):
    folder, path, proc = byo
    # The campaign names a benchmark the checker reads in epoch_num, and the script logs it:
    # a launch checks that on each eval line itself, and does not warn of it beforehand.
    assert "warning:" not in proc.stderr
    uri = f"sqlite:///{folder / 'rcpforge-mlflow.db'}"
    runs = load_runs(uri, "byo").to_pylist()
    assert len(runs) == 12 and {r["status"] for r in runs} == {"converged"}
    tracking = Tracking(uri)
    for run in runs:
        mlflow_run = tracking.client.raw.get_run(run["run_id"])
        tags, metrics = mlflow_run.data.tags, mlflow_run.data.metrics
        # The label's options reached the program (it echoes them into its MLLOG) ...
        result = tracking.result_file(run["run_id"], folder / "downloads" / run["run_id"])
        echoed = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in result.read_text().splitlines()
                  if '"recipe_options"' in line]
        assert echoed[0]["value"] == {"recipe": run["recipe"], "block": LABELS[run["recipe"]].get("block")}
        # ... its disclosure is recorded, matching the declared precision (no warning) ...
        assert tags[TAG_DISCLOSED + "lowest_numerical_precision_in_linear"] == LABELS[run["recipe"]]["precision"]
        assert tags[TAG_DISCLOSED + "tensor_parallelism"] == "1" and "rcpforge.warning" not in tags
        # ... and the MLPerf time to train is the run's own, within its wall time.
        assert 0 < metrics[METRIC_TIME_TO_TRAIN] <= metrics["run_wall_s"]
        # The values to converge are the checker's reading of the file.
        from mlperf_logging.rcp_checker import rcp_checker

        assert rcp_checker.read_submission_file(str(result), "6.0.0", False)[1] == run["samples_to_target"]


def test_analyze_check_and_export_a_package_the_package_checker_reads(byo):
    folder, path, _ = byo
    out = folder / "analysis"
    proc = run_cli("analyze", str(path), "--out", str(out), "--reference", "fp32", "--resamples", "200", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    assert "te_nvfp4" in proc.stdout and "fp32" in proc.stdout
    rcp_file = next(out.glob("*fp32*.json"))
    proc = run_cli("export", str(path), "--results", str(folder / "results"), cwd=folder)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("check", str(folder / "results" / "te_nvfp4" / "bs64"), "--rcps", str(rcp_file),
                   "--submission-runs", "3", "--json", cwd=folder)
    assert "Traceback" not in proc.stderr, proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["benchmark"] == "byo_mlp" and isinstance(verdict["passed"], bool), verdict
    package = folder / "package"
    proc = run_cli("export", str(path), "--package", str(package), "--submitter", "acme", "--system", "box",
                   cwd=folder)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (package / "results").iterdir()) == [
        "box_fp32_bs16", "box_fp32_bs64", "box_te_nvfp4_bs16", "box_te_nvfp4_bs64"]
    checker = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(package), "training",
                              "6.1.0", "--log_output", str(folder / "checker.log")],
                             capture_output=True, text=True, timeout=300, cwd=folder)
    said = checker.stdout + checker.stderr
    assert "Traceback" not in said and "FileNotFoundError" not in said and "No such file" not in said, said
    assert "System description checker passed" in said


PRINTING = '''
import json, os, sys, time
def line(key, value=None, **meta):
    print(":::MLLOG " + json.dumps({"namespace": "", "time_ms": int(time.time() * 1000),
                                    "event_type": "POINT_IN_TIME", "key": key, "value": value, "metadata": meta}))
line("submission_benchmark", "llama31_8b"); line("global_batch_size", int(sys.argv[1]))
line("run_start")
line("eval_accuracy", 0.5, samples_count=100)
go = os.path.join(sys.argv[2], "go")
deadline = time.time() + 90
while not os.path.exists(go):   # the test lets it go once it saw the first eval in MLflow
    if time.time() > deadline:
        sys.exit(3)
    time.sleep(0.2)
line("eval_accuracy", 0.95, samples_count=200); line("run_stop", status="success")
'''


def test_a_program_printing_its_mllog_is_followed_live_into_mlflow(tmp_path):
    (tmp_path / "printing.py").write_text(PRINTING)
    data = {
        "name": "printing", "trainer": {"kind": "command", "argv": ["{python}", "printing.py", "{batch_size}",
                                                                     "{campaign_dir}"], "stop_grace_s": 2},
        "target": {"metric": "eval_accuracy", "mode": "max", "value": 0.9},
        "budget": {"max_tokens": 10_000, "eval_every_tokens": 100},
        "recipes": ["their_fp8"], "batch_sizes": [16, 32], "seeds": 1, "hparams": {16: {}, 32: {}},
        "rcp": {"benchmark": "llama31_8b"}, "backend": {"kind": "local", "workers": 2},
    }
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONUNBUFFERED", None)  # the test's own setting must not make it pass
    proc = subprocess.Popen([sys.executable, "-m", "rcpforge.orchestrator.cli", "run", str(path)], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    uri = f"sqlite:///{tmp_path / 'rcpforge-mlflow.db'}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            live = _first_points(uri)
            if len(live) == 2 and all(len(points) == 1 for points in live):
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        else:
            pytest.fail("the printed eval points never reached MLflow while the programs ran")
        (tmp_path / "go").write_text("")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    runs = load_runs(uri, "printing").to_pylist()
    assert sorted(r["status"] for r in runs) == ["converged", "converged"]
    assert {r["samples_to_target"] for r in runs} == {200}


def _first_points(uri: str) -> list[list]:
    """The eval_accuracy steps of each run of the campaign so far, read from MLflow's own
    tables, read-only. Not through an MLflow client: one opened while the campaign still
    creates the store runs the schema's migrations too, and the two migrations break each
    other (the campaign then dies on "No such index", as it did with mlflow 3.17)."""
    db = uri.removeprefix("sqlite:///")
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            rows = conn.execute(
                "SELECT r.run_uuid, m.step FROM metrics m JOIN runs r ON r.run_uuid = m.run_uuid "
                "JOIN experiments e ON e.experiment_id = r.experiment_id "
                "WHERE e.name = 'printing' AND m.key = 'eval_accuracy'").fetchall()
    except sqlite3.Error:  # no store yet, or its tables are still being made
        return []
    points: dict[str, list[int]] = {}
    for run, step in rows:
        points.setdefault(run, []).append(step)
    return list(points.values())
