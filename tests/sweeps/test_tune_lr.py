"""The issue's "done when": `rcpforge tune` on the tiny LM, two local workers on one
study, finds an lr far better than a deliberately bad start; its table feeds a seed
campaign; tune runs never enter the campaign's ledger or RCP statistics."""

from __future__ import annotations

import optuna
import pytest
import yaml
from mlflow import MlflowClient
from optuna.trial import TrialState

from rcpforge.analysis.load import load_runs
from rcpforge.analysis.rcp_table import rcp_table
from rcpforge.sweeps.spec import load_campaign
from rcpforge.sweeps.tune_spec import TUNE_SEED_OFFSET
from rcpforge.sweeps.tune_study import storage_url
from tests.conftest import run_cli
from tests.helpers.campaigns import tiny_campaign, write_campaign
from rcpforge.trainers.contract import RunSpec, RunStatus
from rcpforge.trainers.registry import get_trainer
from rcpforge.trainers.contract.schema import TAG_ROLE, TAG_SPEC, TAG_TUNE_TRIAL

BAD_LR = 0.0003  # converges, but about 3x slower than a good lr on this model
TRIALS = 6


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tune")
    data = tiny_campaign(
        recipes=["bf16"], seeds=1, budget={"max_tokens": 120_000, "eval_every_tokens": 4096},
        hparams={16: {"lr": BAD_LR, "warmup_tokens": 8192}, 64: {"lr": 0.02, "warmup_tokens": 8192}},
        tune={"space": {"lr": {"low": 1e-4, "high": 0.1, "log": True}}, "trials": TRIALS,
              "sampler": {"kind": "tpe", "seed": 0, "startup_trials": 3}},
    )
    path = write_campaign(folder, data)
    result = run_cli("tune", str(path), "--batch-size", "16", "--workers", "2")
    assert result.returncode == 0, result.stderr
    return folder, load_campaign(path), result


class _Quiet:
    def __init__(self, folder):
        self.output_dir = folder

    def eval_point(self, point) -> None:
        pass


def test_tuned_lr_beats_a_bad_start_by_20_percent(tuned, tmp_path):
    folder, campaign, result = tuned
    table = yaml.safe_load((folder / "hparams.bf16.yaml").read_text())
    best = table["hparams"][16]
    evidence = table["evidence"][16]
    assert evidence["converged"] and evidence["trials"]["finished"] == TRIALS
    assert "bf16" in result.stdout and "wrote" in result.stdout
    # the start point was tried as trial 0
    study = optuna.load_study(study_name="tiny.bf16.bs16", storage=storage_url(campaign))
    assert study.trials[0].params == {"lr": BAD_LR}

    # oracle: train both hyperparameter sets directly, outside the tuning machinery
    base = RunSpec(campaign="oracle", recipe="bf16", batch_size=16, seed=TUNE_SEED_OFFSET,
                   hparams=campaign.hparams[16], target=campaign.target, budget=campaign.budget,
                   trainer=campaign.trainer)
    trainer = get_trainer("tinylm")
    bad = trainer.train(base, _Quiet(tmp_path))
    good = trainer.train(base.model_copy(update={"hparams": best}), _Quiet(tmp_path))
    assert bad.status is RunStatus.converged and good.status is RunStatus.converged
    assert good.tokens_to_target <= 0.8 * bad.tokens_to_target
    assert evidence["best_value"] == good.tokens_to_target  # what the study recorded is reproducible


def test_two_workers_tune_one_study_without_errors_or_duplicates(tuned):
    folder, campaign, _ = tuned
    study = optuna.load_study(study_name="tiny.bf16.bs16", storage=storage_url(campaign))
    trials = study.trials
    assert [t.number for t in trials] == list(range(TRIALS))
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    assert len({t.params["lr"] for t in trials}) == TRIALS

    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    exp = client.get_experiment_by_name(campaign.name)
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`{TAG_ROLE}` = 'tune'")
    assert sorted(int(r.data.tags[TAG_TUNE_TRIAL]) for r in runs) == list(range(TRIALS))
    for run in runs:
        trial = trials[int(run.data.tags[TAG_TUNE_TRIAL])]
        assert RunSpec.model_validate_json(run.data.tags[TAG_SPEC]).hparams["lr"] == trial.params["lr"]
        assert run.data.tags["rcpforge.status"] in ("converged", "not_converged", "pruned")
    # the two workers really trained side by side: eval points carry the time they were
    # made, and two trials' spans of eval points overlap
    spans = []
    for run in runs:
        stamps = [m.timestamp for m in client.get_metric_history(run.info.run_id, "eval_excess_loss")]
        spans.append((min(stamps), max(stamps)))
    spans.sort()
    assert any(b_first < a_last for (_, a_last), (b_first, _) in zip(spans, spans[1:]))


def test_tuned_table_feeds_a_campaign_and_tune_runs_stay_out_of_it(tuned):
    folder, campaign, _ = tuned
    table = yaml.safe_load((folder / "hparams.bf16.yaml").read_text())
    seeded = tiny_campaign(recipes=["bf16"], seeds=1, budget={"max_tokens": 120_000, "eval_every_tokens": 4096},
                           hparams={64: {"lr": 0.02, "warmup_tokens": 8192}}, hparams_from="hparams.bf16.yaml")
    path = write_campaign(folder, seeded, "seeded.yaml")
    result = run_cli("run", str(path))
    assert result.returncode == 0, result.stderr
    # the ledger ignores the tune runs: both campaign runs were launched
    assert "launched 2 runs" in result.stdout

    runs = load_runs(campaign.tracking_uri, campaign.name)
    assert runs.num_rows == 2 and set(runs.column("seed").to_pylist()) == {0}
    hparams = {row["batch_size"]: dict(row["hparams"]) for row in runs.to_pylist()}
    assert float(hparams[16]["lr"]) == table["hparams"][16]["lr"] and float(hparams[64]["lr"]) == 0.02
    stats = rcp_table(runs, "rcpforge_tiny", 3).to_pylist()
    assert [(r["batch_size"], r["runs"]) for r in stats] == [(16, 1), (64, 1)]
    tune_runs = load_runs(campaign.tracking_uri, campaign.name, role="tune")
    assert tune_runs.num_rows == TRIALS and set(tune_runs.column("seed").to_pylist()) == {TUNE_SEED_OFFSET}
