"""MLLOG in and out through real campaigns: real worker processes, a real MLflow SQLite
store, the real CLI, and the MLCommons RCP checker (in process and as its command line)
as the oracle."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlperf_logging.rcp_checker import rcp_checker

from rcpforge.analysis.load import load_runs
from rcpforge.analysis.rcp import olympic_mean, rcp_stats
from rcpforge.analysis.rcp_table import rcp_table
from rcpforge.orchestrator.campaign import run_campaign
from rcpforge.sweeps.spec import load_campaign
from tests.conftest import ROOT, run_cli
from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.rules61 import disclosed, disclosure_complaints
from rcpforge.trainers.contract import EvalPoint, Reporter, RunResult, RunSpec
from rcpforge.trainers.tinylm.settings import TinyLMHParams, TinyLMSettings
from rcpforge.trainers.contract.schema import TAG_ATTEMPTS
from rcpforge.trainers.contract.mllog.read import DISCLOSURE_KEYS

EXAMPLES = ROOT / "sweeps" / "examples"
N = 4  # submission runs of the tiny campaign's benchmark
# The checker's command line, with a campaign's benchmark added to its table of
# submission run counts (it knows only the MLPerf benchmarks).
CHECKER_CLI = (
    "import sys; from mlperf_logging.rcp_checker import rcp_checker as r; "
    "r.submission_runs['training'][sys.argv[1]] = int(sys.argv[2]); "
    "sys.argv = ['rcp_checker'] + sys.argv[3:]; r.main()"
)


def _checker_reads(client: MlflowClient, run_id: str, tmp: Path):
    path = client.download_artifacts(run_id, "result.txt", str(tmp / run_id))
    return rcp_checker.read_submission_file(path, "6.0.0", False)


def _runs(campaign) -> list[dict]:
    return load_runs(campaign.tracking_uri, campaign.name).to_pylist()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """12 tiny-LM runs: bf16 and fp8 at batch sizes 16 and 64, 3 seeds each."""
    folder = tmp_path_factory.mktemp("tiny")
    # N = 4 with 3 runs a cell: the t-test has a degree of freedom (N = 3 would leave none).
    path = write_campaign(folder, tiny_campaign(rcp={"benchmark": "rcpforge_tiny", "submission_runs": N}))
    campaign = load_campaign(path)
    summary = run_campaign(campaign)
    assert summary.statuses["converged"] == 12, summary.statuses
    return path, campaign


@pytest.fixture(scope="module")
def exported(tiny, tmp_path_factory):
    """The tiny campaign's results directories and RCP files, written by the CLI."""
    path, _ = tiny
    folder = tmp_path_factory.mktemp("exported")
    results, out = folder / "results", folder / "analysis"
    proc = run_cli("export", str(path), "--results", str(results))
    assert proc.returncode == 0, proc.stderr
    assert run_cli("analyze", str(path), "--out", str(out)).returncode == 0
    return results, out


def test_every_tinylm_run_writes_the_result_file_the_checker_reads(tiny, tmp_path):
    _, campaign = tiny
    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    for run in _runs(campaign):
        not_converged, value, bs, benchmark = _checker_reads(client, run["run_id"], tmp_path)
        assert (not_converged, bs, benchmark) == (0, run["batch_size"], "rcpforge_tiny")
        assert value == run["samples_to_target"]


def test_exported_tiny_lm_files_pass_the_61_disclosure_rules(tiny, exported):
    """One of each disclosure key (the 6.1 rules): the precision map's, data parallel,
    and the campaign file's name; mlperf-logging's 6.1 compliance checker is the oracle."""
    path, _ = tiny
    results, _ = exported
    files = sorted(results.glob("*/bs*/result_*.txt"))
    assert len(files) == 12
    for file in files:
        found = disclosed(file)
        assert {k: len(v) for k, v in found.items()} == dict.fromkeys(DISCLOSURE_KEYS, 1), file
        assert found["config_filename"] == [path.name]
        assert found["lowest_numerical_precision_in_linear"] == [{"bf16": "bfloat16", "fp8_tensorwise": "fp8"}[file.parts[-3]]]
        assert found["micro_batch_size"] == [int(file.parent.name[2:])]  # one rank
        assert disclosure_complaints(file) == {}


def _expected_verdict(rcp_values: list[float], subm_values: list[float], bs: int, n: int):
    """What the checker should say for an 'RCP found' cell: docs/rcp-rules.md's test and
    normalization, from the tracked samples to converge."""
    stats = rcp_stats(rcp_values, bs, "rcpforge_tiny", n)
    subm = olympic_mean(sorted(subm_values))
    return subm >= stats.mean / stats.max_speedup, max(1.0, stats.mean / subm)


def test_exported_directories_pass_the_checker_as_expected(tiny, exported, tmp_path, monkeypatch):
    _, campaign = tiny
    results, out = exported
    rcp_file = out / f"rcps_{campaign.name}_bf16.json"
    values = {}
    for run in _runs(campaign):
        values.setdefault((run["recipe"], run["batch_size"]), []).append(run["samples_to_target"])
    # The checker prunes RCPs below the batch size of the fastest one; both stay when
    # the small batch size needs no more samples than the large one (true here).
    assert olympic_mean(sorted(values["bf16", 16])) <= olympic_mean(sorted(values["bf16", 64]))
    monkeypatch.setitem(rcp_checker.submission_runs["training"], "rcpforge_tiny", N)
    speedups = []
    for (recipe, bs), subm in sorted(values.items()):
        folder = results / recipe / f"bs{bs}"
        assert sorted(folder.glob("result_*.txt")) == [folder / f"result_{i}.txt" for i in range(3)]
        _, epochs, _ = rcp_checker.get_submission_epochs([str(p) for p in folder.glob("result_*.txt")], "6.0.0", False)
        assert sorted(epochs) == sorted(subm)
        passed, norm = _expected_verdict(values["bf16", bs], subm, bs, N)
        speedups.append(rcp_stats(values["bf16", bs], bs, "rcpforge_tiny", N).max_speedup)
        with open(rcp_file) as fh:
            verdict = rcp_checker.check_directory(str(folder), "training", "6.0.0", False, False, rcp_file=fh, rcp_pass="pruned_rcps")
        assert verdict == (passed, "RCP found", pytest.approx(norm, rel=1e-12))
        cli = subprocess.run(
            [sys.executable, "-c", CHECKER_CLI, "rcpforge_tiny", str(N), str(folder), "--rcp_usage", "training",
             "--custom_rcps", str(rcp_file), "--log_output", str(tmp_path / "checker.log")],
            capture_output=True, text=True, timeout=120,
        )
        assert cli.returncode == (0 if passed else 1), cli.stderr
        assert ("RCP found, RCP test PASSED" if passed else "RCP found, RCP test FAILED") in cli.stderr
    assert max(speedups) > 1  # the test has room: not every RCP degenerates to its mean


def test_import_reads_exported_directories_back_as_the_same_runs(tiny, exported, tmp_path):
    _, campaign = tiny
    results, _ = exported
    uri = f"sqlite:///{tmp_path / 'imported.db'}"
    proc = run_cli("import", str(results), "--campaign", "again", "--tracking-uri", uri)  # the folder export wrote
    assert proc.returncode == 0, proc.stderr
    assert "12 runs imported, 0 already there" in proc.stdout
    again_proc = run_cli("import", *sorted(str(p) for p in results.glob("*/bs*")), "--campaign", "again", "--tracking-uri", uri)
    assert "0 runs imported, 12 already there" in again_proc.stdout
    original, imported = load_runs(campaign.tracking_uri, campaign.name), load_runs(uri, "again")
    cols = ["recipe", "batch_size", "status", "samples_to_target"]
    key = lambda r: (r["recipe"], r["batch_size"], r["samples_to_target"])  # noqa: E731
    assert sorted(original.select(cols).to_pylist(), key=key) == sorted(imported.select(cols).to_pylist(), key=key)
    assert rcp_table(original, "rcpforge_tiny", N).equals(rcp_table(imported, "rcpforge_tiny", N))
    # an imported run exports again unchanged
    again = tmp_path / "again"
    from rcpforge.orchestrator.results_dirs import export_results

    export_results(uri, "again", again, lambda spec: None)
    for folder in results.glob("*/bs*"):
        a = sorted(p.read_bytes() for p in folder.glob("result_*.txt"))
        b = sorted(p.read_bytes() for p in (again / folder.relative_to(results)).glob("result_*.txt"))
        assert a == b


def test_import_rejects_a_folder_without_result_files(tmp_path):
    proc = run_cli("import", str(tmp_path), "--campaign", "x", "--tracking-uri", f"sqlite:///{tmp_path / 'x.db'}")
    assert proc.returncode == 2 and "no result_<i>.txt files" in proc.stderr


def test_the_example_external_trainer_as_a_campaign(tmp_path):
    for name in ("command.yaml", "mllog_trainer.py"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    proc = run_cli("run", str(tmp_path / "command.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert "launched 6 runs; 6 converged" in proc.stdout
    campaign = load_campaign(tmp_path / "command.yaml")
    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    runs = _runs(campaign)
    for run in runs:
        not_converged, value, bs, bench = _checker_reads(client, run["run_id"], tmp_path)
        assert (not_converged, bs, bench) == (0, run["batch_size"], "mllog_example")
        assert value == run["samples_to_target"] == run["tokens_to_target"]
        curve = client.get_metric_history(run["run_id"], "eval_accuracy")
        assert max(m.step for m in curve) == value and curve[-1].value >= 0.91
    assert run_cli("export", str(tmp_path / "command.yaml"), "--results", str(tmp_path / "res")).returncode == 0
    for bs in (16, 128):
        files = [str(p) for p in (tmp_path / "res" / "bf16" / f"bs{bs}").glob("result_*.txt")]
        got_bs, epochs, _ = rcp_checker.get_submission_epochs(files, "6.0.0", False)
        assert got_bs == bs
        assert sorted(epochs) == sorted(r["samples_to_target"] for r in runs if r["batch_size"] == bs)


class _FailAfter:
    def __init__(self, inner: Reporter, evals: int):
        self.inner, self.left = inner, evals
        self.output_dir = inner.output_dir

    def eval_point(self, point: EvalPoint) -> None:
        self.inner.eval_point(point)
        self.left -= 1
        if self.left == 0:
            raise RuntimeError("injected failure after two evals")


class FlakyTrainer:
    """The tiny LM, failing after two evals on the first attempt of batch size 16's run
    (marked in its folder, which every attempt shares)."""

    Settings = TinyLMSettings
    HParams = TinyLMHParams

    def train(self, spec: RunSpec, reporter: Reporter) -> RunResult:
        from rcpforge.trainers.tinylm.train import TinyLMTrainer

        spec = spec.model_copy(update={"trainer": {**spec.trainer, "kind": "tinylm"}})
        marker = reporter.output_dir / "attempted"
        if spec.batch_size == 16 and not marker.exists():
            marker.touch()
            return TinyLMTrainer().train(spec, _FailAfter(reporter, 2))
        return TinyLMTrainer().train(spec, reporter)


def test_a_retried_run_has_no_duplicated_eval_lines(tmp_path):
    data = tiny_campaign(recipes=["bf16"], seeds=1)
    data["trainer"] = {**data["trainer"], "kind": "tests.orchestrator.test_mllog:FlakyTrainer"}
    campaign = load_campaign(write_campaign(tmp_path, data))
    summary = run_campaign(campaign)
    assert summary.statuses["converged"] == 2
    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    for run in _runs(campaign):
        assert client.get_run(run["run_id"]).data.tags[TAG_ATTEMPTS] == ("2" if run["batch_size"] == 16 else "1")
        path = Path(client.download_artifacts(run["run_id"], "result.txt", str(tmp_path / run["run_id"])))
        lines = path.read_text().splitlines()
        samples = [line.split('"samples_count": ')[1].split(",")[0] for line in lines if '"key": "eval_accuracy"' in line]
        assert len(samples) == len(set(samples)) >= 3
        assert sum('"key": "run_stop"' in line for line in lines) == 1
        assert rcp_checker.read_submission_file(str(path), "6.0.0", False)[:2] == (0, run["samples_to_target"])
        steps = [m.step for m in client.get_metric_history(run["run_id"], "eval_excess_loss")]
        assert len(steps) == len(set(steps)) == len(samples)


def test_import_of_a_submission_in_epochs(tmp_path):
    """A published-style results tree `results/<system>/resnet/result_<i>.txt` with
    launcher prefixes and epoch counts; what is stored is what the checker reads."""
    import json

    from rcpforge.orchestrator.results_dirs import import_results

    def line(key, value=None, **meta):
        return "0: :::MLLOG " + json.dumps({"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME",
                                            "key": key, "value": value, "metadata": meta})

    folders = []
    for system, bs in (("sysA", 1632), ("sysB", 3264)):
        folder = tmp_path / "results" / system / "resnet"
        folder.mkdir(parents=True)
        for i in range(5):
            epochs = [2.0 * k + 0.1 * i + 0.00049 for k in range(1, 19 + i % 3)]
            body = [line("submission_benchmark", "resnet"), line("global_batch_size", bs), "noise"]
            body += [line("eval_accuracy", 0.7, epoch_num=e) for e in epochs]
            body.append(line("run_stop", status="aborted" if (system, i) == ("sysB", 4) else "success"))
            (folder / f"result_{i}.txt").write_text("\n".join(body) + "\n")
        folders.append(folder)
    uri = f"sqlite:///{tmp_path / 'sub.db'}"
    summary = import_results(folders, "published", uri)
    assert summary.imported == 10
    runs = load_runs(uri, "published").to_pylist()
    for folder in folders:
        bs, epochs, bench = rcp_checker.get_submission_epochs(
            [str(folder / f"result_{i}.txt") for i in range(5)], "6.0.0", False)
        mine = [r for r in runs if r["recipe"] == folder.parent.name]
        assert {r["batch_size"] for r in mine} == {bs} and bench == "resnet"
        assert [r["samples_to_target"] if r["status"] == "converged" else 1e9 for r in mine] == epochs


def test_eval_points_of_an_external_program_reach_mlflow_while_it_runs(tmp_path):
    """The program logs one eval, then waits for the test: the point must be in MLflow
    before the program goes on (polled, with a generous deadline)."""
    import threading
    import time

    from rcpforge.orchestrator.execute import RunAssignment, execute_run
    from rcpforge.orchestrator.tracking import Tracking
    from rcpforge.sweeps.expand import expand
    from rcpforge.sweeps.spec import parse_campaign

    (tmp_path / "prog.py").write_text(
        "import json, os, sys, time\n"
        "def log(key, value=None, **m):\n"
        "    print(':::MLLOG ' + json.dumps({'key': key, 'value': value, 'metadata': m}), flush=True)\n"
        "log('submission_benchmark', 'live'); log('global_batch_size', 16)\n"
        "log('eval_accuracy', 0.5, epoch_num=100, samples_count=100)\n"
        "deadline = time.time() + 120\n"
        "while not os.path.exists('go') and time.time() < deadline: time.sleep(0.05)\n"
        "log('eval_accuracy', 0.95, epoch_num=200, samples_count=200); log('run_stop', status='success')\n"
    )
    data = tiny_campaign(trainer={"kind": "command", "argv": ["{python}", "prog.py"]}, recipes=["bf16"], seeds=1,
                         target={"metric": "eval_accuracy", "mode": "max", "value": 0.9})
    data["hparams"] = {16: {}, 64: {}}
    campaign = parse_campaign(data, tmp_path)
    spec = next(s for s in expand(campaign) if s.batch_size == 16)
    tracking = Tracking(campaign.tracking_uri)
    run_id = tracking.create_run(tracking.open_experiment(campaign.name, tmp_path / "art"), spec)
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(execute_run(RunAssignment(
        spec.model_dump_json(), campaign.tracking_uri, run_id, 1, str(tmp_path / "run"), "live", str(tmp_path)))))
    worker.start()
    try:
        deadline = time.monotonic() + 120
        while not tracking.client.get_metric_history(run_id, "eval_accuracy") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [m.value for m in tracking.client.get_metric_history(run_id, "eval_accuracy")] == [0.5]
        assert worker.is_alive() and not outcome  # the program is still waiting
    finally:
        (tmp_path / "go").touch()
        worker.join(timeout=120)
    assert outcome["status"] == "converged" and outcome["samples_to_target"] == 200
    assert [m.step for m in tracking.client.get_metric_history(run_id, "eval_accuracy")] == [100, 200]
