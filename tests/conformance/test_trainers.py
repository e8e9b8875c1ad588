"""The trainer contract (docs/design.md, "Contracts"), checked for every trainer kind the
registry knows, each run the way a worker runs it: `execute_run` of a `RunAssignment`
against a real SQLite MLflow store. A kind's tiny configuration is one entry of
`tests/helpers/trainer_kinds.py`; each kind's runs happen once and are shared by its
tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rcpforge.orchestrator.execute import assignment_for, execute_run
from rcpforge.orchestrator.tracking import Tracking
from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import Campaign, parse_campaign
from rcpforge.trainers.contract import RunSpec, Target
from rcpforge.trainers.contract.mllog.read import NOT_CONVERGED, read_result_file
from rcpforge.trainers.contract.mllog.write import RESULT_FILE
from rcpforge.trainers.contract.schema import (
    METRIC_CORE_HOURS,
    METRIC_GPU_HOURS,
    METRIC_SAMPLES_TO_TARGET,
    METRIC_TIME_TO_TRAIN,
    METRIC_TOKENS_TO_TARGET,
    METRIC_TOKENS_TRAINED,
    METRIC_WALL_S,
    TAG_ERROR,
    TAG_STATUS,
)
from rcpforge.trainers.registry import _BUILTIN
from tests.helpers.campaigns import tiny_campaign
from tests.helpers.trainer_kinds import KINDS, KindConfig


@dataclass(frozen=True)
class Ran:
    spec: RunSpec
    result: dict[str, Any]  # what execute_run returned
    run_id: str
    output_dir: Path

    def curve(self, tracking: Tracking, metric: str) -> list[tuple[int, float]]:
        return [(m.step, m.value) for m in tracking.client.get_metric_history(self.run_id, metric)]


class KindRuns:
    """One kind's campaigns in one folder and store; each case runs once, when first asked."""

    def __init__(self, kind: str, folder: Path, tracking: Tracking):
        self.kind, self.folder, self.tracking = kind, folder, tracking
        self.config: KindConfig = KINDS[kind](folder)
        self._ran: dict[str, Ran] = {}

    def spec(self, case: str) -> tuple[Campaign, RunSpec]:
        cfg = self.config
        overrides: dict[str, Any] = {"trainer": cfg.trainer, "hparams": cfg.hparams, "target": cfg.converges,
                                     "budget": cfg.budget}
        if case == "never":
            overrides.update(target=cfg.never, budget=cfg.short_budget)
        elif case == "failing":
            overrides.update(cfg.failing)
        data = tiny_campaign(name=f"conformance_{self.kind}_{case.split('-')[0]}", recipes=["bf16"],
                             batch_sizes=sorted(overrides["hparams"]), seeds=1, tracking={"uri": self.tracking.uri},
                             **overrides)
        campaign = parse_campaign(data, self.folder)
        return campaign, expand(campaign)[0]

    def run(self, case: str) -> Ran:
        """`converges`, `converges-again` (the same RunSpec in its own MLflow run and
        folder), `never`, `failing`."""
        if case not in self._ran:
            campaign, spec = self.spec(case)
            experiment = self.tracking.open_experiment(campaign.name, self.folder / "mlartifacts")
            run_id = self.tracking.create_run(experiment, spec)
            output_dir = self.folder / "runs" / case
            result = execute_run(assignment_for(campaign, spec, run_id, 1, output_dir))
            self._ran[case] = Ran(spec, result, run_id, output_dir)
        return self._ran[case]


@pytest.fixture(scope="module")
def tracking(tmp_path_factory) -> Tracking:
    """One store for every kind (each kind's campaigns are their own experiments): its
    schema is made once."""
    return Tracking(f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}", retry_s=5)


@pytest.fixture(scope="module", params=sorted(KINDS))
def kind(request, tmp_path_factory, tracking) -> KindRuns:
    return KindRuns(request.param, tmp_path_factory.mktemp(f"kind-{request.param}"), tracking)


def test_every_registered_kind_has_a_conformance_config():
    assert sorted(KINDS) == sorted(_BUILTIN), "add the new kind to tests/helpers/trainer_kinds.py KINDS"


def _reaches(target: Target, curve: list[tuple[int, float]]) -> list[int]:
    return [step for step, value in curve if target.reached(value)]


def test_converges_at_the_first_eval_that_reaches_the_target(kind):
    ran = kind.run("converges")
    result, target = ran.result, ran.spec.target
    assert result["status"] == "converged", result["error"]
    curve = ran.curve(kind.tracking, target.metric)
    steps = [step for step, _ in curve]
    assert steps == sorted(set(steps)) and len(steps) >= 2, f"eval points not strictly increasing: {steps}"
    # the first eval that reaches the target is the last one, and its tokens are the result
    assert _reaches(target, curve) == [steps[-1]]
    assert result["tokens_to_target"] == steps[-1]
    samples = dict(ran.curve(kind.tracking, "samples"))
    assert sorted(samples) == steps
    assert result["samples_to_target"] == samples[steps[-1]]
    assert 0 < result["samples_to_target"] <= result["tokens_to_target"]
    assert all(a < b for a, b in zip(list(samples.values()), list(samples.values())[1:], strict=False))
    assert result["tokens_trained"] == result["tokens_to_target"]
    recorded = kind.tracking.result_of(ran.run_id)
    assert (recorded.status.value, recorded.tokens_to_target, recorded.samples_to_target) == (
        "converged", result["tokens_to_target"], result["samples_to_target"])


def test_an_unreachable_target_spends_the_budget(kind):
    ran = kind.run("never")
    result, budget = ran.result, ran.spec.budget
    assert result["status"] == "not_converged", result["error"]
    assert result["tokens_to_target"] is None and result["samples_to_target"] is None
    curve = ran.curve(kind.tracking, ran.spec.target.metric)
    steps = [step for step, _ in curve]
    assert steps and steps == sorted(set(steps)) and _reaches(ran.spec.target, curve) == []
    assert 0 < result["tokens_trained"] <= budget.max_tokens
    assert result["tokens_trained"] > budget.max_tokens - budget.eval_every_tokens  # spent, not stopped early
    assert steps[-1] == result["tokens_trained"]
    metrics = kind.tracking.client.get_run(ran.run_id).data.metrics
    assert metrics[METRIC_TOKENS_TRAINED] == result["tokens_trained"]
    assert METRIC_TOKENS_TO_TARGET not in metrics and METRIC_SAMPLES_TO_TARGET not in metrics


def _all_curves(kind: KindRuns, ran: Ran) -> dict[str, list[tuple[int, float]]]:
    # wall time and the compute it costs are measured, not computed: they differ by run
    names = set(kind.tracking.client.get_run(ran.run_id).data.metrics) - {
        METRIC_WALL_S, METRIC_CORE_HOURS, METRIC_GPU_HOURS, METRIC_TIME_TO_TRAIN}
    return {name: sorted(ran.curve(kind.tracking, name)) for name in names}


def test_a_run_records_its_mlperf_time_to_train_within_its_wall_time(kind):
    ran = kind.run("converges")
    metrics = kind.tracking.client.get_run(ran.run_id).data.metrics
    # within the attempt's wall time, up to the moments between a result file's run_start
    # (written before the trainer starts its clock) and the trainer's own start
    assert 0 <= metrics[METRIC_TIME_TO_TRAIN] <= metrics[METRIC_WALL_S] + 0.1


def test_the_same_runspec_gives_the_same_result_and_curve(kind):
    first, again = kind.run("converges"), kind.run("converges-again")
    assert first.spec.run_key == again.spec.run_key
    assert again.result["status"] == first.result["status"] == "converged"
    for field in ("tokens_to_target", "samples_to_target", "tokens_trained", "final_metric"):
        assert again.result[field] == first.result[field], field
    curves = _all_curves(kind, first)
    assert first.spec.target.metric in curves
    assert _all_curves(kind, again) == curves


@pytest.mark.parametrize("case", ["converges", "never"])
def test_the_result_file_reads_as_the_checker_reads_it(kind, case):
    ran = kind.run(case)
    reading = read_result_file(str(ran.output_dir / RESULT_FILE), "6.0.0")
    assert reading.bs == ran.spec.batch_size
    if case == "converges":
        assert (reading.not_converged, reading.epochs) == (0, ran.result["samples_to_target"]), reading.warnings
    else:
        assert (reading.not_converged, reading.epochs) == (1, NOT_CONVERGED)
    artifacts = [a.path for a in kind.tracking.client.list_artifacts(ran.run_id)]
    assert RESULT_FILE in artifacts


def test_a_trainer_failure_is_a_failed_result_with_the_error(kind):
    ran = kind.run("failing")
    assert ran.result["status"] == "failed"
    assert kind.config.failing_says in (ran.result["error"] or "")
    tags = kind.tracking.client.get_run(ran.run_id).data.tags
    assert tags[TAG_STATUS] == "failed" and tags[TAG_ERROR].strip()
    metrics = kind.tracking.client.get_run(ran.run_id).data.metrics
    assert METRIC_TOKENS_TO_TARGET not in metrics
    # a failed run leaves a result file too, which the checker never counts as converged
    assert read_result_file(str(ran.output_dir / RESULT_FILE), "6.0.0").not_converged == 1
