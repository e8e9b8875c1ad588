"""`Campaign.curves()` reads every eval point of every run in bulk, on every kind of store
(tests/helpers/tracking_stores.py): point for point what `MlflowClient.get_metric_history`
gives run by run, each point with its run's facts and the samples logged at its step."""

from __future__ import annotations

import math

import rcpforge
from rcpforge.orchestrator.tracking import RunLog, Tracking
from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.contract import EvalPoint, RunResult, RunStatus
from tests.helpers.campaigns import tiny_campaign

METRIC = "eval_excess_loss"
CONTEXT = 8  # tokens per sample of the points below


def _value(seed: int, recipe: str, i: int) -> float:
    if (seed, recipe, i) == (1, "mxfp8", 2):
        return math.nan  # a diverged point: MLflow stores it as is_nan, and it reads back NaN
    return 1.0 / (i + 1) + 0.01 * seed + (0.05 if recipe == "mxfp8" else 0.0)


def _campaign(store, tmp_path) -> list:
    """Eight runs (two recipes, two batch sizes, two seeds) with five eval points each,
    logged as a worker logs them; one run stopped after three."""
    data = tiny_campaign(name=store.campaign, recipes=["bf16", "mxfp8"], seeds=2,
                         tracking={"uri": store.uri, "retry_s": 5})
    campaign = parse_campaign(data, tmp_path)
    tracking = Tracking(campaign.tracking_uri, retry_s=5)
    specs = expand(campaign)
    made = tracking.create_runs(tracking.open_experiment(campaign.name, store.artifact_dir), specs)
    for n, spec in enumerate(specs):
        log = RunLog(store.uri, made[spec.run_key], METRIC, tmp_path / spec.run_key, flush_every_s=3600, retry_s=5)
        log.start(1)
        for i in range(3 if n == 0 else 5):
            tokens = 4096 * (i + 1) * (spec.batch_size // 16)
            log.eval_point(EvalPoint(tokens=tokens, samples=tokens // CONTEXT,
                                     metrics={METRIC: _value(spec.seed, spec.recipe, i), "eval_loss": 3.0 - i}))
        log.finish(RunResult(status=RunStatus.not_converged, tokens_trained=tokens, wall_s=1.0))
    return specs


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def test_curves_are_every_runs_metric_history(store, tmp_path):
    from mlflow import MlflowClient

    specs = _campaign(store, tmp_path)
    campaign = rcpforge.load(tracking_uri=store.uri, campaign=store.campaign, benchmark="conf", submission_runs=3)
    curves = campaign.curves()
    assert list(curves.columns) == ["run_id", "run_name", "run_key", "model", "recipe", "batch_size", "seed",
                                    "metric", "tokens", "samples", "value"]
    assert set(curves["metric"]) == {METRIC}  # the campaign's target metric
    client = MlflowClient(tracking_uri=store.uri)
    runs = campaign.runs()
    assert len(runs) == len(specs) == 8
    for row in runs.itertuples():
        history = sorted(client.get_metric_history(row.run_id, METRIC), key=lambda m: (m.step, m.timestamp))
        samples = {m.step: m.value for m in client.get_metric_history(row.run_id, "samples")}
        mine = curves[curves["run_id"] == row.run_id]
        assert len(history) == len(mine) in (3, 5)
        for point, got in zip(history, mine.itertuples(), strict=True):
            assert (got.tokens, got.samples) == (point.step, samples[point.step])
            assert _same(got.value, point.value)
        name = client.get_run(row.run_id).info.run_name
        facts = mine[["run_name", "run_key", "model", "recipe", "batch_size", "seed"]].drop_duplicates()
        assert facts.values.tolist() == [[name, row.run_key, "", row.recipe, row.batch_size, row.seed]]
    assert curves["value"].isna().sum() == 2  # the diverged point, at both batch sizes
    # another metric of the eval points, by name; the Arrow table is the same rows
    loss = campaign.curves_arrow("eval_loss")
    assert loss.num_rows == curves.shape[0] and set(loss["metric"].to_pylist()) == {"eval_loss"}
    assert loss["samples"].to_pylist() == curves["samples"].tolist()


def test_curves_of_a_campaign_without_points_are_empty(store, tmp_path):
    data = tiny_campaign(name=store.campaign, recipes=["bf16"], seeds=1, tracking={"uri": store.uri, "retry_s": 5})
    campaign = parse_campaign(data, tmp_path)
    tracking = Tracking(campaign.tracking_uri, retry_s=5)
    tracking.create_runs(tracking.open_experiment(campaign.name, store.artifact_dir), expand(campaign))
    found = rcpforge.load(tracking_uri=store.uri, campaign=store.campaign, benchmark="conf", submission_runs=3)
    found = found.curves_arrow()
    assert found.num_rows == 0 and found.schema.names[-1] == "value"
