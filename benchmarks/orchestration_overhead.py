"""Per-run orchestration overhead (launch, tracking, collection) of a no-op trainer:
rcpforge on the local and the Ray backend, side by side with Ray Tune running the same
no-op trainable (`tune.Tuner` with `num_samples`), all in this one run.

    PYTHONPATH=. python benchmarks/orchestration_overhead.py [--runs 1000] [--workers 2]
        [--tune-runs N] [--tune-plain] [--startup-runs 10000]
        [--parts tune,ray,local,mlflow,startup-local,startup-ray,register]

rcpforge's figure includes what a campaign does for every run: an MLflow run created
with its tags and params, the worker's status updates, its eval point and final metrics,
the ledger read. Ray's start-up (about 5 s) is paid once before any timing, by both Ray
figures. Per-run overhead = wall time / runs. Ray Tune runs with the settings a user
would pick for many short trials (`tune_settings`, printed), or its defaults with
`--tune-plain`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def campaign_data(runs: int, backend: dict) -> dict:
    return {
        "name": "overhead",
        "trainer": {"kind": "benchmarks.noop_trainer:NoopTrainer"},
        "target": {"metric": "eval_loss", "mode": "min", "value": 1.0},
        "budget": {"max_tokens": 4096, "eval_every_tokens": 1024},
        "recipes": ["bf16"],
        "batch_sizes": [16, 32],
        "seeds": runs // 2,
        "hparams": {16: {"lr": 0.1}, 32: {"lr": 0.1}},
        "backend": backend,
    }


def time_rcpforge(runs: int, backend: dict) -> float:
    from rcpforge.orchestrator.campaign import run_campaign
    from rcpforge.sweeps.spec import parse_campaign

    with tempfile.TemporaryDirectory() as folder:
        campaign = parse_campaign(campaign_data(runs, backend), Path(folder))
        from rcpforge.orchestrator.tracking import Tracking

        Tracking(campaign.tracking_uri).client.search_experiments()  # the schema, outside the timing
        start = time.perf_counter()
        summary = run_campaign(campaign)
        wall = time.perf_counter() - start
    assert summary.statuses["converged"] == runs, summary.statuses
    return wall


def time_tracking_only(runs: int) -> float:
    """The MLflow calls one run makes (create it, the worker's start, eval point, result
    file, outcome), made serially in this one process, without any launch: how much of
    rcpforge's per-run figure is the tracking store itself."""
    from benchmarks.noop_trainer import NoopTrainer
    from rcpforge.orchestrator.tracking import RunLog, Tracking, run_params
    from rcpforge.sweeps.expand import expand
    from rcpforge.sweeps.spec import parse_campaign

    with tempfile.TemporaryDirectory() as folder:
        campaign = parse_campaign(campaign_data(runs, {"kind": "local", "workers": 1}), Path(folder))
        tracking = Tracking(campaign.tracking_uri)
        experiment_id = tracking.open_experiment(campaign.name, campaign.artifact_dir)
        specs = expand(campaign)
        start = time.perf_counter()
        for spec in specs:
            run_id = tracking.create_run(experiment_id, spec, starts_now=True)  # as a local first attempt
            out = Path(folder) / spec.run_key
            log = RunLog(campaign.tracking_uri, run_id, spec.target.metric, out, fresh=True,
                         artifact_uri=tracking.artifact_uris[run_id])
            log.start(1)
            result = NoopTrainer().train(spec, log)
            (out / "result.txt").write_text(":::MLLOG {}\n")
            log.log_artifact(out / "result.txt")
            log.finish(result, params=run_params(spec))
        tracking.ledger(experiment_id)
        wall = time.perf_counter() - start
    assert len(specs) == runs
    return wall


def time_registration(runs: int, one_by_one: int) -> tuple[float, float]:
    """Seconds to make a `runs`-run campaign's runs on the ledger at once, as a Slurm
    campaign does before it submits (`Tracking.create_runs`, in bulk on this SQLite
    store), and per run when made one by one (`create_run`, `one_by_one` of them, the
    way every run was made before)."""
    from rcpforge.orchestrator.tracking import Tracking
    from rcpforge.sweeps.expand import expand
    from rcpforge.sweeps.spec import parse_campaign

    with tempfile.TemporaryDirectory() as folder:
        campaign = parse_campaign(campaign_data(runs, {"kind": "local", "workers": 1}), Path(folder))
        tracking = Tracking(campaign.tracking_uri)
        specs = expand(campaign)
        bulk_exp = tracking.open_experiment(campaign.name, campaign.artifact_dir)
        start = time.perf_counter()
        made = tracking.create_runs(bulk_exp, specs)
        bulk = time.perf_counter() - start
        assert len(made) == len(tracking.ledger(bulk_exp)) == runs
        single_exp = tracking.open_experiment(campaign.name + "-one", campaign.artifact_dir)
        start = time.perf_counter()
        for spec in specs[:one_by_one]:
            tracking.create_run(single_exp, spec)
        single = (time.perf_counter() - start) / one_by_one
    return bulk, single


class _Started(Exception):
    """Raised from the campaign's event callback once its first runs have ended: the
    start-up is measured, the rest of a 10,000-run campaign is not needed."""


def time_startup(runs: int, backend: dict, first: int = 4) -> tuple[float, float]:
    """A `runs`-run campaign from nothing: seconds until its first run was launched and
    until its first `first` runs had ended (planning, the ledger read, registration)."""
    from rcpforge.orchestrator.campaign import run_campaign
    from rcpforge.sweeps.spec import parse_campaign

    marks: dict[str, float] = {}
    ended = 0

    def on_event(kind, spec, result) -> None:
        nonlocal ended
        now = time.perf_counter() - start
        marks.setdefault(kind, now)
        ended += kind == "end"
        if ended >= first:
            marks["ended"] = now
            raise _Started

    with tempfile.TemporaryDirectory() as folder:
        campaign = parse_campaign(campaign_data(runs, backend), Path(folder))
        from rcpforge.orchestrator.tracking import Tracking

        Tracking(campaign.tracking_uri).client.search_experiments()  # the schema, outside the timing
        start = time.perf_counter()
        try:
            run_campaign(campaign, on_event=on_event)
        except _Started:
            pass
    return marks["start"], marks["ended"]


def _noop_trainable(config):
    return {"eval_loss": 0.0}


# What a user who knows Ray Tune would set for thousands of short trials (the Tune docs'
# scalability and performance pages): one actor per CPU reused across trials instead of
# one new actor per trial; no more pending placement groups than can run (the default,
# at least 200, is meant for autoscaling clusters); of the result loggers only the JSON
# one, which the ResultGrid reads the trials' results back from (as rcpforge records
# every run's result in MLflow), not the CSV and TensorBoard ones; no progress table.
def tune_settings(workers: int, plain: bool) -> dict:
    if plain:
        return {"tune_config": {}, "env": {}, "loggers": "Tune's default (CSV, JSON, TensorBoard)"}
    return {"tune_config": {"reuse_actors": True, "max_concurrent_trials": workers},
            "env": {"TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1", "TUNE_MAX_PENDING_TRIALS_PG": str(workers)},
            "loggers": "JsonLoggerCallback only"}


def time_tune(runs: int, workers: int, plain: bool) -> float:
    settings = tune_settings(workers, plain)
    os.environ.update(settings["env"])  # read by Tune when the experiment starts
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    callbacks = [] if plain else [JsonLoggerCallback()]
    with tempfile.TemporaryDirectory() as folder:
        tuner = tune.Tuner(
            _noop_trainable,
            param_space={"seed": tune.randint(0, 2**31)},
            tune_config=tune.TuneConfig(num_samples=runs, **settings["tune_config"]),
            run_config=tune.RunConfig(storage_path=folder, name="overhead", verbose=0, callbacks=callbacks),
        )
        start = time.perf_counter()
        results = tuner.fit()
        wall = time.perf_counter() - start
    for name in settings["env"]:
        os.environ.pop(name, None)
    assert len(results) == runs and not results.errors
    assert all(result.metrics.get("eval_loss") == 0.0 for result in results)  # results came back
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tune-runs", type=int, default=None,
                        help="trials for Ray Tune (default: --runs); its per-run figure is what is compared")
    parser.add_argument("--tune-plain", action="store_true",
                        help="Ray Tune with its defaults (a new actor per trial, loggers on) instead of tuned settings")
    parser.add_argument("--parts", default="tune,ray,local",
                        help="comma-separated subset of tune, ray, local, mlflow (the tracking calls alone, "
                             "serial), startup-local, startup-ray (a --startup-runs campaign's time to its "
                             "first runs), register (making its runs on the ledger, as Slurm does) to measure "
                             "(ratios need tune)")
    parser.add_argument("--startup-runs", type=int, default=10_000)
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    import ray

    print(f"{args.runs} no-op runs ({args.tune_runs or args.runs} for Ray Tune), {os.cpu_count()} CPUs", flush=True)
    tune_runs = args.tune_runs or args.runs
    figures: dict[str, float] = {}

    def report(name: str, wall: float, runs: int) -> None:
        figures[name] = wall / runs
        ratio = f"  Ray Tune / this = {figures['ray tune'] / figures[name]:5.2f}x" if "ray tune" in figures else ""
        print(f"{name:15s} {runs:5d} runs {wall:8.2f} s total  {wall / runs * 1000:8.2f} ms/run{ratio}", flush=True)

    ray.init(num_cpus=args.workers, include_dashboard=False, configure_logging=False, log_to_driver=False)
    if "tune" in parts:
        settings = tune_settings(args.workers, args.tune_plain)
        print(f"Ray Tune settings: TuneConfig {settings['tune_config']}, env {settings['env']}, "
              f"loggers: {settings['loggers']}; RunConfig verbose=0", flush=True)
        report("ray tune", time_tune(tune_runs, args.workers, args.tune_plain), tune_runs)
    if "ray" in parts:
        report("rcpforge ray", time_rcpforge(args.runs, {"kind": "ray", "num_cpus": 1}), args.runs)
    ray.shutdown()
    if "local" in parts:
        report("rcpforge local", time_rcpforge(args.runs, {"kind": "local", "workers": args.workers}), args.runs)
    if "mlflow" in parts:
        report("mlflow alone", time_tracking_only(args.runs), args.runs)
    if "register" in parts:
        bulk, single = time_registration(args.startup_runs, min(500, args.startup_runs))
        print(f"registration of a {args.startup_runs}-run campaign (Slurm's, before it submits): {bulk:.2f} s in "
              f"bulk ({bulk / args.startup_runs * 1000:.2f} ms/run); one by one {single * 1000:.2f} ms/run, "
              f"{single * args.startup_runs:.1f} s for all (from 500); one by one / bulk = "
              f"{single * args.startup_runs / bulk:.1f}x", flush=True)
    for kind in ("local", "ray"):
        if f"startup-{kind}" in parts:
            if kind == "ray":
                ray.init(num_cpus=args.workers, include_dashboard=False, configure_logging=False, log_to_driver=False)
            backend = {"kind": "local", "workers": args.workers} if kind == "local" else {"kind": "ray", "num_cpus": 1}
            launched, ended = time_startup(args.startup_runs, backend)
            print(f"start-up of a {args.startup_runs}-run campaign ({kind}): first run launched after "
                  f"{launched:.2f} s, first 4 ended after {ended:.2f} s", flush=True)
            ray.shutdown()


if __name__ == "__main__":
    main()
