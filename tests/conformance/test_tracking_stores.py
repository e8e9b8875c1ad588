"""The tracking-store contract, on every kind of store (`tests/helpers/tracking_stores.py`):
runs written through rcpforge's one tracking adapter (`orchestrator/tracking/`) and read
back through the analysis loaders (`analysis/load.py`, `analysis/curves.py`) the same
way whatever the store. No training: the tests write eval points and results as a
worker would."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rcpforge.analysis.curves import load_curves
from rcpforge.analysis.load import RUN_SCHEMA, NoSuchCampaign, load_runs
from rcpforge.analysis.load_sql import load_campaign_runs
from rcpforge.orchestrator.tracking import ImportedRun, RunLog, Tracking, mark_preempted, run_params
from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.contract import EvalPoint, RunResult, RunSpec, RunStatus
from rcpforge.trainers.contract import schema as ts
from rcpforge.trainers.contract.mllog.write import RESULT_FILE
from tests.helpers.campaigns import tiny_campaign
from tests.helpers.tracking_stores import TrackingStore

FINAL_METRICS = (ts.METRIC_TOKENS_TO_TARGET, ts.METRIC_SAMPLES_TO_TARGET, ts.METRIC_TOKENS_TRAINED, ts.METRIC_WALL_S)
CURVE = [(4096, 0.9), (8192, 0.5), (12288, 0.35), (16384, 0.25)]  # (tokens, eval_excess_loss)
CONVERGED = RunResult(status=RunStatus.converged, tokens_to_target=16384, samples_to_target=2048,
                      tokens_trained=16384, wall_s=2.5)


def _opened(store: TrackingStore, tmp_path) -> tuple[Tracking, str, list[RunSpec]]:
    """The campaign's experiment and its two runs (bf16, batch sizes 16 and 64, seed 0)."""
    data = tiny_campaign(name=store.campaign, recipes=["bf16"], seeds=1, tracking={"uri": store.uri, "retry_s": 5})
    campaign = parse_campaign(data, tmp_path)
    tracking = Tracking(campaign.tracking_uri, retry_s=campaign.tracking.retry_s)
    return tracking, tracking.open_experiment(campaign.name, store.artifact_dir), expand(campaign)


def _point(tokens: int, value: float) -> EvalPoint:
    return EvalPoint(tokens=tokens, samples=tokens // 8, metrics={"eval_excess_loss": value})  # context 8


def _params(spec: RunSpec) -> list[tuple[str, str]]:
    return sorted([(k, str(v)) for k, v in spec.hparams.items()]
                  + [(f"recipe.{k}", str(v)) for k, v in spec.recipe_options.items()])


def _logged_params(spec: RunSpec) -> list[tuple[str, str]]:
    """What MLflow holds: the hyperparameters and the run's identity, for its UI."""
    return sorted(_params(spec) + [(ts.TAG_RECIPE, spec.recipe), (ts.TAG_BATCH_SIZE, str(spec.batch_size)),
                                   (ts.TAG_SEED, str(spec.seed))])


def _run_log(store: TrackingStore, run_id: str, tmp_path) -> RunLog:
    # flushed by hand and at finish only: a call per point would cost the server kind
    return RunLog(store.uri, run_id, "eval_excess_loss", tmp_path / "run", flush_every_s=3600, retry_s=5)


def _both_loaders(store: TrackingStore) -> dict[str, dict]:
    """The runs table by run key, after checking that the MLflow API path and
    `load_campaign_runs` (the SQL fast path where the URI is SQL) agree row for row."""
    api, fast = load_runs(store.uri, store.campaign), load_campaign_runs(store.uri, store.campaign)
    assert api.schema == fast.schema == RUN_SCHEMA
    assert fast.to_pylist() == api.to_pylist()
    return {row["run_key"]: row for row in api.to_pylist()}


def test_created_runs_are_pending_in_the_ledger_with_their_names_and_tags(store, tmp_path):
    tracking, exp, specs = _opened(store, tmp_path)
    assert tracking.open_experiment(store.campaign, store.artifact_dir) == exp  # found, not made twice
    ids = {spec.run_key: tracking.create_run(exp, spec) for spec in specs}
    # a tune run of the same run key (the role is not in it), with the tuner's name and tags
    tune = specs[0].model_copy(update={"role": "tune"})
    tune_id = tracking.create_run(exp, tune, extra_tags={ts.TAG_TUNE_STUDY: "s1", ts.TAG_TUNE_TRIAL: "3"},
                                  run_name="trial-3")
    tracking.set_backend_jobs([(ids[specs[1].run_key], "slurm:4242")])

    ledger = tracking.ledger(exp)
    assert sorted(ledger) == sorted(ids)
    assert list(tracking.ledger(exp, role="tune")) == [tune.run_key]
    assert tracking.ledger(exp, role="tune")[tune.run_key].run_id == tune_id
    for spec, job in zip(specs, (None, "slurm:4242"), strict=True):
        entry = ledger[spec.run_key]
        assert (entry.run_id, entry.status, entry.attempts, entry.has_params, entry.backend_job,
                entry.recipe, entry.batch_size) == (ids[spec.run_key], RunStatus.pending, 0, True, job, "bf16",
                                                    spec.batch_size)
        run = tracking.client.get_run(entry.run_id)
        assert run.info.run_name == f"bf16-bs{spec.batch_size}-s0"
        assert run.info.status == "SCHEDULED"
        expected = {ts.TAG_CAMPAIGN: store.campaign, ts.TAG_ROLE: "campaign", ts.TAG_RUN_KEY: spec.run_key,
                    ts.TAG_RECIPE: "bf16", ts.TAG_BATCH_SIZE: str(spec.batch_size), ts.TAG_SEED: "0",
                    ts.TAG_TRAINER: "tinylm", ts.TAG_TARGET_METRIC: "eval_excess_loss", ts.TAG_STATUS: "pending",
                    ts.TAG_ATTEMPTS: "0"}
        assert {k: run.data.tags.get(k) for k in expected} == expected
        assert RunSpec.model_validate_json(run.data.tags[ts.TAG_SPEC]) == spec
        assert sorted(run.data.params.items()) == _logged_params(spec) and run.data.params
    tune_run = tracking.client.get_run(tune_id)
    assert tune_run.info.run_name == "trial-3"
    assert {k: tune_run.data.tags.get(k) for k in (ts.TAG_ROLE, ts.TAG_TUNE_STUDY, ts.TAG_TUNE_TRIAL)} == {
        ts.TAG_ROLE: "tune", ts.TAG_TUNE_STUDY: "s1", ts.TAG_TUNE_TRIAL: "3"}


# The model axis' columns of a run of a campaign without one (docs/models.md).
NO_MODEL = {"model": "", "model_params": None, "model_flops_per_token": None}


def test_a_whole_attempt_reads_back_the_same_through_both_loaders(store, tmp_path):
    tracking, exp, (done, waiting) = _opened(store, tmp_path)
    ids = {spec.run_key: tracking.create_run(exp, spec) for spec in (done, waiting)}
    run_id = ids[done.run_key]
    log = _run_log(store, run_id, tmp_path)
    log.start(1)
    for tokens, value in CURVE[:2]:
        log.eval_point(_point(tokens, value))
    log.flush()  # a batch written mid-run, the rest with the outcome
    for tokens, value in CURVE[2:]:
        log.eval_point(_point(tokens, value))
    log.finish(CONVERGED)
    tracking.client.set_tag(run_id, ts.TAG_ACCELERATOR, "NVIDIA H100 80GB HBM3")  # what a GPU run's worker tags

    rows = _both_loaders(store)
    assert rows == {
        done.run_key: {"run_id": run_id, "run_key": done.run_key, "recipe": "bf16", "batch_size": 16, "seed": 0,
                       "status": "converged", "tokens_to_target": 16384.0, "samples_to_target": 2048.0,
                       "tokens_trained": 16384.0, "wall_s": 2.5, "error": None, "hparams": _params(done),
                       **NO_MODEL, "accelerator": "NVIDIA H100 80GB HBM3",
                       "config_key": done.config_key},
        waiting.run_key: {"run_id": ids[waiting.run_key], "run_key": waiting.run_key, "recipe": "bf16",
                          "batch_size": 64, "seed": 0, "status": "pending", "tokens_to_target": None,
                          "samples_to_target": None, "tokens_trained": None, "wall_s": None, "error": None,
                          "hparams": _params(waiting), **NO_MODEL, "accelerator": None,
                          "config_key": waiting.config_key},
    }
    curves = load_curves(store.uri, store.campaign, ["eval_excess_loss", "samples"], run_ids=[run_id]).to_pylist()
    assert [(c["metric"], c["tokens"], c["value"]) for c in curves] == (
        [("eval_excess_loss", t, v) for t, v in CURVE] + [("samples", t, float(t // 8)) for t, _ in CURVE])
    assert tracking.result_of(run_id) == CONVERGED.model_copy(update={"final_metric": None})
    assert tracking.status_of(run_id) == "converged"
    entry = tracking.ledger(exp)[done.run_key]
    assert (entry.status, entry.attempts) == (RunStatus.converged, 1)


def test_runs_registered_in_bulk_read_back_as_runs_made_one_by_one(store, tmp_path):
    """A Slurm campaign's runs are made on the ledger at once (`create_runs`: one
    transaction a chunk on a database store) and their jobs filed at once
    (`set_backend_jobs`): the runs, tags, params and ledger entries are those that
    `create_run` and a tag per run give."""
    tracking, exp, specs = _opened(store, tmp_path)
    bulk = tracking.create_runs(exp, specs)
    tracking.set_backend_jobs([(bulk[s.run_key], f"slurm:{i}") for i, s in enumerate(specs)])
    tracking.set_backend_jobs([(bulk[specs[0].run_key], "slurm:7")])  # a requeue's new job replaces the old
    one = tracking.open_experiment(store.campaign + "-one", store.artifact_dir)
    single = {s.run_key: tracking.create_run(one, s) for s in specs}
    for i, spec in enumerate(specs):
        tracking.set_backend_jobs([(single[spec.run_key], "slurm:7" if i == 0 else f"slurm:{i}")])

    def seen(run_id: str) -> tuple:
        run = tracking.client.get_run(run_id)
        return (run.info.run_name, run.info.status, run.info.lifecycle_stage, run.data.tags, run.data.params,
                run.info.artifact_uri.rsplit("/", 3)[-2:])

    def entries(exp_id: str) -> dict:
        return {k: dataclasses.replace(e, run_id="") for k, e in tracking.ledger(exp_id).items()}

    for spec in specs:
        bulk_run, single_run = seen(bulk[spec.run_key]), seen(single[spec.run_key])
        assert bulk_run[:5] == single_run[:5] and bulk_run[5][1] == single_run[5][1] == "artifacts"
    assert entries(exp) == entries(one) and {e.backend_job for e in entries(exp).values()} == {"slurm:7", "slurm:1"}
    assert _both_loaders(store).keys() == bulk.keys()


def test_a_run_made_as_it_starts_needs_no_status_update_or_read_back(store, tmp_path, monkeypatch):
    """A local first attempt: the run is made when a worker is free and starts at once,
    so MLflow's RUNNING stands and there is nothing logged to read back: no update_run and
    no metric-history read; it is made with its first attempt's tags, so the worker's start
    writes nothing; its last points and its hyperparameters go out with its outcome, and
    its result file is copied to its artifact folder: one batch in all against three of a
    queued run and its artifact call; and the run reads back exactly as one made SCHEDULED."""
    from mlflow import MlflowClient

    tracking, exp, (fresh, queued) = _opened(store, tmp_path)
    calls: list[str] = []
    for name in ("update_run", "get_metric_history", "log_batch", "log_artifact", "get_run"):
        original = getattr(MlflowClient, name)
        monkeypatch.setattr(MlflowClient, name, lambda self, *a, _f=original, _n=name, **k: (calls.append(_n), _f(
            self, *a, **k))[1])
    runs = {}
    for spec, starts_now in ((fresh, True), (queued, False)):
        calls.clear()
        run_id = tracking.create_run(exp, spec, starts_now=starts_now)
        assert tracking.client.get_run(run_id).info.status == ("RUNNING" if starts_now else "SCHEDULED")
        entry = tracking.ledger(exp)[spec.run_key]
        assert (entry.status, entry.attempts) == ((RunStatus.running, 1) if starts_now else (RunStatus.pending, 0))
        log = RunLog(store.uri, run_id, "eval_excess_loss", tmp_path / spec.run_key, flush_every_s=3600, retry_s=5,
                     fresh=starts_now, artifact_uri=tracking.artifact_uris[run_id] if starts_now else None)
        log.start(1)
        for tokens, value in CURVE:
            log.eval_point(_point(tokens, value))
        result_file = tmp_path / spec.run_key / RESULT_FILE
        result_file.write_text(f":::MLLOG {spec.run_key}\n")
        log.log_artifact(result_file)
        log.finish(CONVERGED, params=run_params(spec))  # as every attempt's worker does
        runs[spec.run_key] = list(calls)
    # (one get_run each is this test's status check) the fresh run's result file is copied
    # without a call; its hyperparameters go with its outcome: on a database store the
    # outcome is one transaction of its own (bulk.finish_sql), on a server one batch
    server = store.kind == "server"
    outcome = ["log_batch"] if server else []
    assert sorted(runs[fresh.run_key]) == sorted(["get_run", *outcome])
    # a queued run's start: on a database store its status, tags and start time in one
    # transaction; a server gets MLflow's two calls (and keeps the queued start time)
    starts = ["log_batch", "update_run"] if server else []
    assert sorted(runs[queued.run_key]) == sorted(["get_metric_history", "get_run", "log_artifact", "log_batch",
                                                   "update_run", *starts, *outcome])
    rows = _both_loaders(store)
    for spec in (fresh, queued):
        row = rows[spec.run_key]
        assert (row["status"], row["tokens_to_target"], row["hparams"]) == ("converged", 16384.0, _params(spec))
        assert tracking.client.get_run(row["run_id"]).info.status == "FINISHED"
        folder = tmp_path / "downloaded" / spec.run_key
        folder.mkdir(parents=True)
        stored = Path(tracking.client.download_artifacts(row["run_id"], RESULT_FILE, str(folder)))
        assert stored.read_text() == f":::MLLOG {spec.run_key}\n"


def test_the_read_commands_probe_answers_on_every_store(store):
    """What `status` and the other read commands try first (a server's call, a database
    server's connection) passes on a store that is up: a PostgreSQL URI with its password."""
    from rcpforge.orchestrator.tracking import probe_store

    probe_store(store.uri, retry_s=5)


def test_runs_made_ahead_in_bulk_start_in_one_write_with_nothing_read_back(store, tmp_path, monkeypatch):
    """A local campaign on a database store makes its next runs in bulk, SCHEDULED, ahead
    of their launch: a worker's first start of one reads nothing back and writes its
    status, tags and start time in one transaction, its outcome in another, and it reads
    back as a run made as it starts; MLflow shows its own duration."""
    import time

    from mlflow import MlflowClient

    tracking, exp, specs = _opened(store, tmp_path)
    if store.kind == "server":
        assert not tracking.registers_in_bulk  # the launcher makes each run as it starts there
        return
    made = tracking.create_runs(exp, specs)
    assert {tracking.client.get_run(r).info.status for r in made.values()} == {"SCHEDULED"}
    assert {(e.status, e.attempts) for e in tracking.ledger(exp).values()} == {(RunStatus.pending, 0)}
    calls: list[str] = []
    for name in ("update_run", "get_metric_history", "log_batch", "log_artifact", "get_run", "get_experiment"):
        original = getattr(MlflowClient, name)
        monkeypatch.setattr(MlflowClient, name, lambda self, *a, _f=original, _n=name, **k: (calls.append(_n), _f(
            self, *a, **k))[1])
    for spec in specs:
        run_id = made[spec.run_key]
        time.sleep(0.02)
        before_start = int(time.time() * 1000)
        log = RunLog(store.uri, run_id, "eval_excess_loss", tmp_path / spec.run_key, flush_every_s=3600, retry_s=5,
                     unlogged=True, artifact_uri=tracking.artifact_uris[run_id])
        log.start(1)
        assert calls == []
        started = tracking.client.get_run(run_id)
        assert (started.info.status, started.info.end_time) == ("RUNNING", None)
        assert started.info.start_time >= before_start
        assert (started.data.tags[ts.TAG_STATUS], started.data.tags[ts.TAG_ATTEMPTS]) == ("running", "1")
        calls.clear()
        for tokens, value in CURVE:
            log.eval_point(_point(tokens, value))
        result_file = tmp_path / spec.run_key / RESULT_FILE
        result_file.write_text(f":::MLLOG {spec.run_key}\n")
        log.log_artifact(result_file)
        log.finish(CONVERGED, params=run_params(spec))
        assert calls == [], calls  # the outcome in one transaction too (bulk.finish_sql)
    rows = _both_loaders(store)
    for spec in specs:
        row = rows[spec.run_key]
        assert (row["status"], row["tokens_to_target"], row["hparams"]) == ("converged", 16384.0, _params(spec))
        entry = tracking.ledger(exp)[spec.run_key]
        assert (entry.status, entry.attempts) == (RunStatus.converged, 1)
        folder = tmp_path / "downloaded" / spec.run_key
        folder.mkdir(parents=True)
        stored = Path(tracking.client.download_artifacts(row["run_id"], RESULT_FILE, str(folder)))
        assert stored.read_text() == f":::MLLOG {spec.run_key}\n"


def test_a_queued_run_starts_in_mlflow_when_its_worker_starts_it(store, tmp_path):
    """A run made at submission (Ray, Slurm) and started later: on a database store its
    MLflow start time becomes its first start, so MLflow's duration is the run's own; a
    tracking server keeps the submission's (MLflow's API cannot move it). A requeued start
    of the same attempt, with points logged, keeps the first start."""
    import time

    tracking, exp, (spec, _) = _opened(store, tmp_path)
    run_id = tracking.create_run(exp, spec)
    submitted = tracking.client.get_run(run_id).info.start_time
    time.sleep(0.05)
    before_start = int(time.time() * 1000)
    log = _run_log(store, run_id, tmp_path)
    log.start(1)
    started = tracking.client.get_run(run_id).info.start_time
    if store.kind == "server":
        assert started == submitted
    else:
        assert started >= before_start > submitted
    log.eval_point(_point(*CURVE[0]))
    log.flush()
    _run_log(store, run_id, tmp_path).start(1)  # a preempted job's requeue: the same attempt
    assert tracking.client.get_run(run_id).info.start_time == started


def test_a_retried_attempt_writes_no_metric_point_twice(store, tmp_path):
    tracking, exp, specs = _opened(store, tmp_path)
    spec = specs[0]
    run_id = tracking.create_run(exp, spec)
    first = _run_log(store, run_id, tmp_path)
    first.start(1)
    for tokens, value in CURVE[:2]:
        first.eval_point(_point(tokens, value))
    first.finish(RunResult(status=RunStatus.failed, error="RuntimeError: rank 1 died"))
    entry = tracking.ledger(exp)[spec.run_key]
    assert (entry.status, entry.attempts) == (RunStatus.failed, 1)
    assert tracking.take_up(exp, spec, entry) == run_id

    second = _run_log(store, run_id, tmp_path)  # a fresh worker: it learns what is logged from the store
    second.start(2)
    for tokens, value in CURVE:  # a deterministic rerun reports the first attempt's points again
        second.eval_point(_point(tokens, value))
    second.finish(CONVERGED)

    curves = load_curves(store.uri, store.campaign, ["eval_excess_loss", "samples", *FINAL_METRICS],
                         run_ids=[run_id]).to_pylist()
    points = [(c["metric"], c["tokens"]) for c in curves]
    assert points == sorted([("eval_excess_loss", t) for t, _ in CURVE] + [("samples", t) for t, _ in CURVE]
                            + [(name, 0) for name in FINAL_METRICS])
    row = _both_loaders(store)[spec.run_key]
    assert (row["status"], row["tokens_to_target"], row["samples_to_target"]) == ("converged", 16384.0, 2048.0)
    assert row["error"] is None  # the first attempt's error is not the converged run's
    assert tracking.result_of(run_id).error is None
    entry = tracking.ledger(exp)[spec.run_key]
    assert (entry.run_id, entry.status, entry.attempts) == (run_id, RunStatus.converged, 2)


def test_a_failed_run_keeps_its_error_and_is_taken_up_again_as_the_same_run(store, tmp_path):
    tracking, exp, specs = _opened(store, tmp_path)
    spec = specs[0]
    run_id = tracking.create_run(exp, spec)
    # longer than a tag holds: the tail, where the exception is, is what is kept
    error = "Traceback (most recent call last):\n" + "  frame\n" * 1200 + "RuntimeError: rank 1 died"
    tracking.mark_failed(run_id, error)
    assert tracking.status_of(run_id) == "failed"
    kept = tracking.result_of(run_id)
    assert kept.status is RunStatus.failed and kept.error == error[-7000:]
    assert kept.error.endswith("RuntimeError: rank 1 died")
    assert _both_loaders(store)[spec.run_key]["error"] == kept.error
    entry = tracking.ledger(exp)[spec.run_key]
    assert (entry.run_id, entry.status) == (run_id, RunStatus.failed)
    assert tracking.take_up(exp, spec, entry) == run_id
    mark_preempted(store.uri, run_id, retry_s=5)  # a requeued attempt of it
    assert tracking.status_of(run_id) == "preempted"
    ledger = tracking.ledger(exp)
    assert list(ledger) == [spec.run_key]  # taken up, not made again
    assert (ledger[spec.run_key].run_id, ledger[spec.run_key].status) == (run_id, RunStatus.preempted)


def test_result_files_round_trip_and_only_created_runs_have_a_spec(store, tmp_path):
    tracking, exp, specs = _opened(store, tmp_path)
    spec = specs[0]
    created = tracking.create_run(exp, spec)
    assert tracking.result_file(created, tmp_path / "none") is None
    content = (':::MLLOG {"key": "eval_accuracy", "value": 0.25, "metadata": {"epoch_num": 2}}\r\n'
               "µ-scaled, no final newline").encode() + bytes(range(256))
    source = tmp_path / "elsewhere" / "result_3.txt"
    source.parent.mkdir()
    source.write_bytes(content)
    tags = {ts.TAG_ROLE: "campaign", ts.TAG_RECIPE: "bf16", ts.TAG_BATCH_SIZE: "16", ts.TAG_SEED: "3",
            ts.TAG_STATUS: "converged", ts.TAG_SOURCE: str(source)}
    metrics = [(ts.METRIC_SAMPLES_TO_TARGET, 1024, 0), (ts.METRIC_TOKENS_TO_TARGET, 8192, 0)]
    # in bulk on a database store, run by run on a tracking server: the same run either way
    [imported] = tracking.import_runs(exp, [ImportedRun("imported-3", "external-bf16-3", tags, metrics, source,
                                                        1_700_000_000_000, 1_700_000_060_000)])
    info = tracking.client.get_run(imported).info
    assert (info.start_time, info.end_time, info.status) == (1_700_000_000_000, 1_700_000_060_000, "FINISHED")
    back = tracking.result_file(imported, tmp_path / "back")
    assert back.name == RESULT_FILE and back.read_bytes() == content
    assert tracking.recorded_spec(imported) == ("external-bf16-3", None)
    assert tracking.recorded_spec(created) == ("bf16-bs16-s0", spec)

    own = tmp_path / "run" / RESULT_FILE
    log = _run_log(store, created, tmp_path)
    own.write_bytes(content[::-1])
    log.log_artifact(own)
    assert tracking.result_file(created, tmp_path / "own").read_bytes() == content[::-1]
    row = _both_loaders(store)["imported-3"]
    assert (row["run_id"], row["seed"], row["status"], row["tokens_to_target"], row["samples_to_target"],
            row["hparams"]) == (imported, 3, "converged", 8192.0, 1024.0, [])


def test_a_missing_campaign_is_named_without_the_password(store):
    missing = f"{store.campaign}-never-run"
    for load in (load_runs, load_campaign_runs):
        with pytest.raises(NoSuchCampaign) as caught:
            load(store.uri, missing)
        message = str(caught.value)
        assert missing in message
        if store.secret:
            assert store.secret not in message
        if store.uri_has_password:
            assert "***" in message
