"""Adaptive campaigns on the instant command trainer (tests/helpers/factor_program.py),
whose recipes have known slowdowns, and what a finished one left in its store: shared by
the local tests (tests/orchestrator/test_adaptive_campaign.py) and the backend ones
(tests/cluster/test_adaptive_backends.py)."""

from __future__ import annotations

from pathlib import Path

import yaml
from mlflow import MlflowClient

from rcpforge.orchestrator.adaptive import AdaptiveState, campaign_looks
from rcpforge.orchestrator.tracking import Tracking

PROGRAM = Path(__file__).resolve().parent / "factor_program.py"
EXAMPLE = Path(__file__).resolve().parents[2] / "sweeps" / "examples" / "adaptive.yaml"
TOKENS_PER_SAMPLE = 4
SLOWDOWNS = {"bf16": 1.0, "fp8_like": 1.01, "fp4_like": 1.6}


def factor_program(*more_argv: str) -> dict:
    """The trainer, target and budget of a campaign on the instant factor program (a
    recipe's `slowdown` option scales its samples to converge); `more_argv` go after the
    program's six arguments (its optional POWER, e.g. "{model_power}")."""
    return {
        "trainer": {"kind": "command", "unit": "samples", "tokens_per_sample": TOKENS_PER_SAMPLE,
                    "metric_key": "eval_accuracy", "max_wall_s": 60, "stop_grace_s": 2,
                    "argv": ["{python}", str(PROGRAM), "{batch_size}", "{seed}", "{recipe_slowdown}",
                             "{max_tokens}", str(TOKENS_PER_SAMPLE), "{benchmark}", *more_argv]},
        "target": {"metric": "eval_accuracy", "mode": "max", "value": 0.9},
        "budget": {"max_tokens": 64 * 4 * 4 * 200, "eval_every_tokens": 64 * 4 * 4},
    }


def adaptive_campaign(**adaptive) -> dict:
    """The example's question (sweeps/examples/adaptive.yaml) on the instant program: a
    bf16 reference, an FP8-like recipe 1% slower and an FP4-like one 60% slower."""
    question = yaml.safe_load(EXAMPLE.read_text())["adaptive"]
    return {
        "name": "adaptive",
        **factor_program(),
        "recipes": [{name: {"slowdown": s}} for name, s in SLOWDOWNS.items()],
        "batch_sizes": [16, 64],
        "adaptive": {**question, **adaptive},
        "hparams": {16: {}, 64: {}},
        "backend": {"kind": "local", "workers": 2},
        "rcp": {"benchmark": "rcpforge_adaptive", "submission_runs": 5},
    }


def ledger_cells(campaign) -> dict:
    """Each cell's seeds as MLflow has them, sorted: a seed run twice shows twice."""
    tracking = Tracking(campaign.tracking_uri)
    exp = tracking.client.get_experiment_by_name(campaign.name)
    runs = MlflowClient(campaign.tracking_uri).search_runs([exp.experiment_id], max_results=1000)
    seeds: dict = {}
    for run in runs:
        tags = run.data.tags
        seeds.setdefault((tags["rcpforge.recipe"], int(tags["rcpforge.batch_size"])), []).append(
            int(tags["rcpforge.seed"]))
    return {cell: sorted(cell_seeds) for cell, cell_seeds in seeds.items()}


def final_looks(campaign) -> AdaptiveState:
    """Where the campaign's looks stand in its store: its looks, seeds and stops so far."""
    tracking = Tracking(campaign.tracking_uri)
    experiment = tracking.client.get_experiment_by_name(campaign.name)
    return campaign_looks(campaign, tracking.ledger(experiment.experiment_id))
