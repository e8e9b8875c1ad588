"""Adaptive campaigns run for real: local workers, a real SQLite MLflow store, an instant
command trainer whose recipes have known slowdowns (tests/helpers/factor_program.py).
Every cell ends with a stop reason in `status --json`, the seeds of each cell are
consecutive and run once, and the intervals meet the goal each cell stopped on."""

from __future__ import annotations

import json
from pathlib import Path

from mlflow import MlflowClient

from orchestrator.adaptive import ANSWERED, campaign_plan
from orchestrator.campaign import run_campaign
from orchestrator.tracking import Tracking
from sweeps.spec import load_campaign
from tests.conftest import run_cli
from tests.helpers.campaigns import write_campaign

PROGRAM = Path(__file__).resolve().parents[1] / "helpers" / "factor_program.py"
TOKENS_PER_SAMPLE = 4
SLOWDOWNS = {"bf16": 1.0, "fp8_like": 1.01, "fp4_like": 1.6}


def adaptive_campaign(**adaptive) -> dict:
    return {
        "name": "adaptive",
        "trainer": {"kind": "command", "unit": "samples", "tokens_per_sample": TOKENS_PER_SAMPLE,
                    "metric_key": "eval_accuracy", "max_wall_s": 60, "stop_grace_s": 2,
                    "argv": ["{python}", str(PROGRAM), "{batch_size}", "{seed}", "{recipe_slowdown}",
                             "{max_tokens}", str(TOKENS_PER_SAMPLE), "{benchmark}"]},
        "target": {"metric": "eval_accuracy", "mode": "max", "value": 0.9},
        "budget": {"max_tokens": 64 * 4 * 4 * 200, "eval_every_tokens": 64 * 4 * 4},
        "recipes": [{name: {"slowdown": s}} for name, s in SLOWDOWNS.items()],
        "batch_sizes": [16, 64],
        "adaptive": {"min_seeds": 5, "step": 3, "max_seeds": 11, "margin": 1.02, "half_width": 0.05, **adaptive},
        "hparams": {16: {}, 64: {}},
        "backend": {"kind": "local", "workers": 2},
        "rcp": {"benchmark": "rcpforge_adaptive", "submission_runs": 5},
    }


def _ledger_cells(campaign) -> dict:
    tracking = Tracking(campaign.tracking_uri)
    exp = tracking.client.get_experiment_by_name(campaign.name)
    runs = MlflowClient(campaign.tracking_uri).search_runs([exp.experiment_id], max_results=1000)
    seeds: dict = {}
    for run in runs:
        tags = run.data.tags
        seeds.setdefault((tags["rcpforge.recipe"], int(tags["rcpforge.batch_size"])), []).append(
            int(tags["rcpforge.seed"]))
    return seeds


def test_an_adaptive_campaign_stops_every_cell_with_its_reason(tmp_path):
    path = write_campaign(tmp_path, adaptive_campaign())
    proc = run_cli("run", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "look 1: fp4_like bs16 (5 vs 5 runs)" in proc.stdout
    assert "adaptive: every cell has stopped" in proc.stdout
    campaign = load_campaign(path)
    tracking = Tracking(campaign.tracking_uri)
    exp = tracking.client.get_experiment_by_name(campaign.name)
    plan = campaign_plan(campaign, tracking.ledger(exp.experiment_id))
    assert plan.finished
    # seeds 0..k-1 in every cell, each run once, exactly the plan's
    seeds = _ledger_cells(campaign)
    assert {cell: sorted(s) for cell, s in seeds.items()} == {cell: list(range(k)) for cell, k in plan.seeds.items()}
    # the clearly slower recipe is answered early, with fewer runs than the reference
    for bs in (16, 64):
        stop = plan.stops[("fp4_like", bs)]
        assert stop.reason == ANSWERED and stop.look <= 2 and "slower than 1.02" in stop.detail
        assert plan.seeds[("fp4_like", bs)] <= 8 < plan.seeds[("bf16", bs)]
    # each answered cell's last interval meets the goal it stopped on
    latest = plan.latest()
    for cell, stop in plan.stops.items():
        if cell[0] == "bf16" or stop.reason != ANSWERED:
            continue
        interval = latest[cell].interval
        assert (interval.low is not None and interval.low > 1.02) or (
            interval.high is not None and interval.high < 1.02) or interval.half_width <= 0.05, (cell, interval)
    status = run_cli("status", str(path), "--json")
    assert status.returncode == 0, status.stderr
    cells = {(c["recipe"], c["batch_size"]): c for c in json.loads(status.stdout)["cells"]}
    assert set(cells) == set(plan.seeds)
    for cell, c in cells.items():
        assert c["stop_reason"] == plan.stops[cell].reason and c["runs"] == plan.seeds[cell] == c["converged"]
        assert c["pending"] == 0
    # a second run has nothing to do
    again = run_cli("run", str(path))
    assert again.returncode == 0 and "nothing to launch" in again.stdout, again.stdout
    assert _ledger_cells(campaign) == seeds


def test_a_resumed_adaptive_campaign_makes_the_uninterrupted_ones_decisions(tmp_path):
    """Stopped after its first look (as a killed orchestrator would be), then run again:
    the same seeds and stop reasons as a campaign that ran straight through."""
    straight = load_campaign(write_campaign(tmp_path / "straight", adaptive_campaign()))
    run_campaign(straight)
    interrupted = load_campaign(write_campaign(tmp_path / "interrupted", adaptive_campaign()))
    looks = []

    def stop_after_first_look(plan, _next):
        looks.append(len({e.look for e in plan.looks}))
        if looks[-1] >= 1:
            raise KeyboardInterrupt

    try:
        run_campaign(interrupted, on_look=stop_after_first_look)
    except KeyboardInterrupt:
        pass
    assert looks[-1] == 1
    run_campaign(interrupted)

    def final(c):
        tracking = Tracking(c.tracking_uri)
        return campaign_plan(c, tracking.ledger(tracking.client.get_experiment_by_name(c.name).experiment_id))

    a, b = final(straight), final(interrupted)
    assert a.seeds == b.seeds and a.stops == b.stops
    assert _ledger_cells(straight) == _ledger_cells(interrupted)
