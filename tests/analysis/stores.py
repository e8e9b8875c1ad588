"""A campaign's runs written into a real MLflow SQLite store through the MLflow API, the
way the orchestrator files them (tags, params, final metrics)."""

from __future__ import annotations

from typing import Iterable

from rcpforge.trainers.contract import schema as ts


def file_runs(uri: str, campaign: str, artifact_uri: str, runs: Iterable[dict]) -> list[str]:
    """`runs`: dicts with recipe, batch_size, seed, status, samples (None unless converged)."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(campaign)
    exp_id = exp.experiment_id if exp else client.create_experiment(campaign, artifact_location=artifact_uri)
    ids = []
    for r in runs:
        run = client.create_run(exp_id)
        tags = {ts.TAG_CAMPAIGN: campaign, ts.TAG_ROLE: "campaign",
                ts.TAG_RUN_KEY: f"{r['recipe']}-{r['batch_size']}-{r['seed']}", ts.TAG_RECIPE: r["recipe"],
                ts.TAG_BATCH_SIZE: str(r["batch_size"]), ts.TAG_SEED: str(r["seed"]), ts.TAG_STATUS: r["status"]}
        metrics = [Metric(ts.METRIC_WALL_S, 1.0, 0, 0)]
        if r["status"] == "converged":
            metrics += [Metric(ts.METRIC_SAMPLES_TO_TARGET, float(r["samples"]), 0, 0),
                        Metric(ts.METRIC_TOKENS_TO_TARGET, float(r["samples"]) * 8, 0, 0)]
        client.log_batch(run.info.run_id, metrics=metrics, params=[Param("lr", "0.01")],
                         tags=[RunTag(k, v) for k, v in tags.items()])
        ids.append(run.info.run_id)
    return ids
