"""A real campaign end to end: the CLI, local worker processes, a real SQLite MLflow."""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import datetime

import mlperf_logging.rcp_checker.rcp_checker as checker_mod
import pytest
from mlflow import MlflowClient

from rcpforge.orchestrator.cli.app import EXIT_NO_OUTCOME
from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_ATTEMPTS, TAG_ERROR, TAG_RUN_KEY, TAG_STATUS
from tests.helpers.campaigns import tiny_campaign, write_campaign


def _runs(campaign):
    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    exp = client.get_experiment_by_name(campaign.name)
    return client, client.search_runs([exp.experiment_id], max_results=10_000)


def test_every_run_has_one_mlflow_run_with_the_tag_schema(finished):
    _, campaign, first, _ = finished
    specs = {s.run_key: s for s in expand(campaign)}
    client, runs = _runs(campaign)
    keys = Counter(r.data.tags[TAG_RUN_KEY] for r in runs)
    assert set(keys) == set(specs) and set(keys.values()) == {1}
    for run in runs:
        spec = specs[run.data.tags[TAG_RUN_KEY]]
        tags = run.data.tags
        assert run.info.run_name == f"{spec.recipe}-bs{spec.batch_size}-s{spec.seed}"
        assert tags["rcpforge.campaign"] == "tiny" and tags["rcpforge.recipe"] == spec.recipe
        assert int(tags["rcpforge.batch_size"]) == spec.batch_size and int(tags["rcpforge.seed"]) == spec.seed
        assert tags[TAG_STATUS] == "converged" and run.info.status == "FINISHED"
        assert float(run.data.params["lr"]) == spec.hparams["lr"]
        history = client.get_metric_history(run.info.run_id, "eval_excess_loss")
        steps = [m.step for m in history]
        assert steps == sorted(set(steps)), "eval points duplicated or out of order"
        assert run.data.metrics["tokens_to_target"] == steps[-1]
        assert history[-1].value <= campaign.target.value
        assert run.data.metrics["samples_to_target"] == steps[-1] // campaign.trainer["context"]
        # MLPerf's disclosure, from the recipe; the time to train from its own MLLOG
        assert tags["rcpforge.mllog.lowest_numerical_precision_in_linear"] == \
            {"bf16": "bfloat16", "fp8_tensorwise": "fp8"}[spec.recipe]
        assert tags["rcpforge.mllog.micro_batch_size"] == str(spec.batch_size)
        # the run's precision map, from its MLLOG header
        layers = json.loads(tags["rcpforge.precision_map"])["phases"][0]["layers"]
        assert layers["blocks.0.fc1"][0] == {"bf16": "bf16", "fp8_tensorwise": "e4m3"}[spec.recipe]
        assert 0 < run.data.metrics["time_to_train_s"] <= run.data.metrics["run_wall_s"] + 0.1  # see conformance
    assert "launched 12 runs" in first.stdout


def test_a_runs_mlflow_start_and_end_are_its_own_not_its_time_in_the_queue(tmp_path):
    # One worker, four runs: each MLflow run starts when the run does, after the one
    # before it ended, not when the campaign started (its time queued behind the others).
    from rcpforge.orchestrator.campaign import run_campaign
    from tests.helpers.trainer_kinds import command

    kind = command(tmp_path)
    path = write_campaign(tmp_path, tiny_campaign(
        name="own_times", trainer=kind.trainer, target=kind.converges, budget=kind.budget, recipes=["a"],
        seeds=2, hparams=kind.hparams, backend={"kind": "local", "workers": 1}))
    campaign = load_campaign(path)
    assert dict(run_campaign(campaign).statuses) == {"converged": 4}
    _, runs = _runs(campaign)
    spans = sorted((r.info.start_time, r.info.end_time) for r in runs)
    for (_, ended), (started, _) in zip(spans, spans[1:], strict=False):
        assert started >= ended
    for run in runs:  # the attempt's own start, the one a cluster's queue cannot hide
        started = datetime.fromisoformat(run.data.tags["rcpforge.attempt_started"]).timestamp() * 1000
        assert run.info.start_time - 1000 <= started <= run.info.end_time


def test_second_run_launches_nothing(finished):
    _, campaign, _, second = finished
    assert second.returncode == 0
    assert "12 have an outcome" in second.stdout and "0 to launch" in second.stdout
    assert "nothing to launch" in second.stdout
    _, runs = _runs(campaign)
    assert len(runs) == 12


def test_analyze_writes_rcps_that_the_checker_reads_as_we_do(finished, tmp_path, cli, monkeypatch):
    path, campaign, _, _ = finished
    proc = cli("analyze", str(path), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "rcpforge_tiny" in proc.stdout and "olympic mean" in proc.stdout
    import csv

    table = list(csv.DictReader(open(tmp_path / "rcp_table.csv")))
    assert {(r["recipe"], r["batch_size"]) for r in table} == {(r, str(b)) for r in ("bf16", "fp8_tensorwise") for b in (16, 64)}
    monkeypatch.setitem(checker_mod.submission_runs["training"], "rcpforge_tiny", 3)
    for recipe in ("bf16", "fp8_tensorwise"):
        text = (tmp_path / f"rcps_tiny_{recipe}.json").read_text()
        records = json.loads(text)
        assert {r["Precision"] for r in records.values()} == {recipe}
        checker = checker_mod.RCP_Checker("training", "6.0.0", "rcpforge_tiny", False, io.StringIO(text))
        assert len(checker.rcp_data) == 2
        for record in checker.rcp_data.values():
            row = next(r for r in table if r["recipe"] == recipe and int(r["batch_size"]) == record["BS"])
            assert int(row["runs"]) == int(row["converged"]) == 3
            assert float(row["olympic_mean"]) == pytest.approx(record["RCP Mean"], rel=1e-12)
            assert float(row["stdev"]) == pytest.approx(record["RCP Stdev"], rel=1e-12)
            assert float(row["min_acceptable_mean"]) == pytest.approx(record["Min Epochs"], rel=1e-12)


def test_crashing_runs_are_recorded_failed_and_do_not_stop_the_others(tmp_path, cli):
    data = tiny_campaign(recipes=["bf16"], seeds=4)
    data["trainer"] = dict(data["trainer"], kind="tests.helpers.faulty:FaultyTrainer", raise_seeds=[1], exit_seeds=[2])
    data["backend"] = {"kind": "local", "workers": 2, "max_attempts": 2}
    path = write_campaign(tmp_path, data)
    proc = cli("run", str(path))
    # the campaign finished, but 4 runs have no outcome: exit 3, with the way out
    assert proc.returncode == EXIT_NO_OUTCOME, proc.stderr
    assert "4 runs have no outcome" in proc.stderr and "--retry-failed" in proc.stderr
    campaign = load_campaign(path)
    _, runs = _runs(campaign)
    by_seed = {(int(r.data.tags["rcpforge.seed"]), int(r.data.tags["rcpforge.batch_size"])): r for r in runs}
    assert len(runs) == 8
    for (seed, _bs), run in by_seed.items():
        tags = run.data.tags
        if seed == 1:
            assert tags[TAG_STATUS] == "failed" and "injected failure for seed 1" in tags[TAG_ERROR]
        elif seed == 2:
            assert tags[TAG_STATUS] == "failed" and "worker process died (exit code 3)" in tags[TAG_ERROR]
        else:
            assert tags[TAG_STATUS] == "converged"
        if seed in (1, 2):
            assert tags[TAG_ATTEMPTS] == "2" and run.info.status == "FAILED"
        # the hyperparameters, whoever recorded the outcome (the worker, or the launcher for a worker that died)
        assert run.data.params["lr"] and run.data.params["rcpforge.seed"] == str(seed)
    assert "4 converged" in proc.stdout and "4 failed" in proc.stdout
    again = cli("run", str(path))
    assert "4 failed with no attempts left, 0 to launch" in again.stdout and again.returncode == EXIT_NO_OUTCOME
    retried = cli("run", str(path), "--retry-failed")
    assert "4 to launch" in retried.stdout and retried.returncode == EXIT_NO_OUTCOME
    _, runs = _runs(campaign)
    assert len(runs) == 8  # retries reattach to the same MLflow runs
