"""Cost in money (issue 34): a campaign's `cost:` prices (sweeps/cost_spec.py), checked when
the file loads, and the dollars `plan` and `report` show beside the hours. What `status`
shows of a finished campaign's runs: tests/orchestrator/test_gpu_hours.py (GPU-hours at
the price of the GPU type) and test_watch.py (core-hours)."""

from __future__ import annotations

import pytest

from rcpforge.analysis.campaign_report import COST_COLUMNS, cost_section
from rcpforge.orchestrator.cli import render
from rcpforge.orchestrator.cost import add_dollars, plan_dollars
from rcpforge.orchestrator.ledger import LedgerEntry
from rcpforge.orchestrator.sizing import campaign_totals, size_comparisons
from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.contract import RunStatus
from rcpforge.trainers.contract.schema import METRIC_CORE_HOURS, METRIC_SAMPLES_TO_TARGET, METRIC_TOKENS_TRAINED
from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.cli import invoke, one_line_usage_error

PRICES = {"usd_per_gpu_hour": {"H100": 2.5, "default": 2.0}, "usd_per_core_hour": 0.05}


def _price(launch: dict, cost: dict = PRICES) -> float:
    campaign = parse_campaign(tiny_campaign(launch=launch, cost=cost))
    return campaign.cost.price(campaign.launch.gpus_per_process, campaign.launch.gpu_type)


def test_the_price_is_the_gpu_types_else_the_default_and_per_core_hour_without_gpus():
    assert _price({"gpus_per_process": 1, "gpu_type": "h100"}) == 2.5  # names match without regard to case
    assert _price({"gpus_per_process": 1, "gpu_type": "A100"}) == 2.0
    assert _price({"gpus_per_process": 1}) == 2.0
    assert _price({"gpus_per_process": 1}, {"usd_per_gpu_hour": 3}) == 3.0  # one price for every type
    assert _price({}) == 0.05
    assert _price({}, {"usd_per_core_hour": 0}) == 0.0  # free is a price


def test_prices_change_no_run():
    plain = parse_campaign(tiny_campaign())
    priced = parse_campaign(tiny_campaign(cost=PRICES))
    assert [s.run_key for s in expand(priced)] == [s.run_key for s in expand(plain)]
    assert plain.cost is None


@pytest.mark.parametrize(("launch", "cost", "fragments"), [
    ({"gpus_per_process": 1, "gpu_type": "A100"}, {"usd_per_gpu_hour": {"h100": 2.5}},
     ["cost.usd_per_gpu_hour: no price for GPU type A100 (launch.gpu_type) and no default", "add A100: <price> or "
      "default: <price>"]),
    ({"gpus_per_process": 1}, {"usd_per_gpu_hour": {"h100": 2.5}},
     ["cost.usd_per_gpu_hour: no price for runs with no launch.gpu_type and no default", "add default: <price>"]),
    ({"gpus_per_process": 1}, {"usd_per_gpu_hour": {"h100": -2.5, "default": 2.0}},
     ["cost.usd_per_gpu_hour.h100: a price is 0 or more, got -2.5; write the US dollars per GPU-hour"]),
    ({}, {"usd_per_core_hour": -0.05},
     ["cost.usd_per_core_hour: a price is 0 or more, got -0.05; write the US dollars per CPU core-hour"]),
    ({}, {"usd_per_gpu_hour": 2.0}, ["cost.usd_per_core_hour: the campaign's runs hold no GPUs", "add "
                                     "usd_per_core_hour"]),
    ({"gpus_per_process": 1}, {"usd_per_core_hour": 0.05}, ["cost.usd_per_gpu_hour: the campaign's runs hold GPUs"]),
])
def test_a_price_that_cannot_be_used_is_one_line_before_anything_runs(tmp_path, launch, cost, fragments):
    path = write_campaign(tmp_path, tiny_campaign(launch=launch, cost=cost))
    for command in ("status", "plan", "run"):
        one_line_usage_error(invoke(command, str(path)), str(path), *fragments)
    assert not (tmp_path / "rcpforge-mlflow.db").exists()


def test_dollars_are_the_hours_of_each_cell_times_the_price_and_their_sum():
    cells = [{"gpu_hours": 1.5, "core_hours": 0.0}, {"gpu_hours": 0.25, "core_hours": 0.0}]
    totals = {"gpu_hours": 1.75, "core_hours": 0.0}
    add_dollars(cells, totals, "gpu_hours", 2.5)
    assert [c["cost_usd"] for c in cells] == [3.75, 0.625] and totals["cost_usd"] == 4.375


def _ledger(campaign) -> dict[str, LedgerEntry]:
    """Every run converged, samples to target spread over the seeds, each run 0.01
    core-hours (fp8 runs 0.02)."""
    ledger = {}
    for i, spec in enumerate(expand(campaign)):
        slower = 1.1 if spec.recipe != "bf16" else 1.0
        metrics = {METRIC_SAMPLES_TO_TARGET: (1000 + 37 * ((spec.seed * 7) % 11)) * slower,
                   METRIC_TOKENS_TRAINED: 5000.0, METRIC_CORE_HOURS: 0.01 * (2 if slower > 1 else 1)}
        ledger[spec.run_key] = LedgerEntry(f"run{i}", spec.run_key, RunStatus.converged, 1, recipe=spec.recipe,
                                           batch_size=spec.batch_size, metrics=metrics)
    return ledger


def test_plan_predicts_dollars_from_its_predicted_hours():
    campaign = parse_campaign(tiny_campaign(recipes=["bf16", "fp8_tensorwise"], seeds=8,
                                            cost={"usd_per_core_hour": 0.05}))
    rows = size_comparisons(campaign, _ledger(campaign), "bf16", (0.03, 0.2))
    totals = campaign_totals(rows, "bf16")
    cells = [r.as_dict() for r in rows]
    plan_dollars(cells, totals, 0.05)
    predicted = [c for c in cells if any(h is not None for h in c["hours"].values())]
    assert predicted, cells
    for cell in cells:
        assert cell["cost_usd"] == {g: None if h is None else pytest.approx(h * 0.05) for g, h in cell["hours"].items()}
        # a run of each recipe, at its cost so far
        assert cell["hours"]["0.2"] == pytest.approx(cell["runs"]["0.2"] * 0.03)
    for total in totals.values():
        assert total["cost_usd"] == (None if total["hours"] is None else pytest.approx(total["hours"] * 0.05))
    shown = render.sizes_table(rows, ["0.03", "0.2"], "core_hours", "fixed", "bf16", campaign, 0.05)
    text = "".join(str(cell) for column in shown.columns for cell in column._cells)
    r = rows[0]
    assert f"{r.runs['0.2']} ({r.hours['0.2']:.3g} core-hours, {render.usd(r.hours['0.2'] * 0.05)})" in text
    unpriced = render.sizes_table(rows, ["0.03", "0.2"], "core_hours", "fixed", "bf16", campaign)
    assert "$" not in "".join(str(cell) for column in unpriced.columns for cell in column._cells)


def test_the_reports_cost_section_shows_dollars_only_with_prices():
    rows = [{"recipe": "bf16", "batch_size": 16, "runs": 2, "gpu_hours": 2.0, "core_hours": 0.0,
             "run_wall_hours": 1.0, "eta_s": 0.0}]
    totals = {"gpu_hours": 2.0, "core_hours": 0.0, "run_wall_hours": 1.0, "eta_s": 0.0, "runs_to_do": 0}
    plain = cost_section(rows, totals)
    assert plain.columns == COST_COLUMNS and "dollars" not in plain.text
    priced = cost_section([dict(rows[0], cost_usd=5.0)], dict(totals, cost_usd=5.0))
    assert priced.columns == [*COST_COLUMNS, "cost_usd"] and priced.rows[0]["cost_usd"] == 5.0
    assert "That compute cost 5.00 US dollars at the campaign's prices." in priced.text
    assert priced.text.startswith(plain.text)
