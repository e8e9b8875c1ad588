"""The reading commands on a campaign with a model axis (issue 31, docs/models.md): one
small axis campaign of the instant command trainer (tests/helpers/factor_program.py),
whose fp4_like recipe is 1.6x as slow as bf16 on the small model and 1.6 ** 0.5 = 1.26x
on the large one. `report` gives each model its own sections, the Python API equals
`analyze`'s per-model files and `scale.json`, and `plan` sizes per model and the slope."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import yaml

import rcpforge
from rcpforge.orchestrator.campaign import run_campaign
from rcpforge.sweeps.spec import load_campaign
from tests.helpers.adaptive_campaigns import factor_program
from tests.helpers.campaigns import write_campaign
from tests.helpers.cli import invoke

MODELS = {"small": 1.0, "large": 0.5}  # each model's power: its factor is 1.6 ** power
RESAMPLES = "1000"


@pytest.fixture(scope="module")
def axis(tmp_path_factory):
    """The campaign file of a finished axis campaign: 2 models x 2 recipes x 2 batch sizes x 4 seeds."""
    folder = tmp_path_factory.mktemp("axis")
    path = write_campaign(folder, {
        "name": "axis_report",
        **factor_program("{model_power}"),
        "recipes": [{"bf16": {"slowdown": 1.0}}, {"fp4_like": {"slowdown": 1.6}}],
        "batch_sizes": [16, 64],
        "seeds": 4,
        "hparams": {16: {}, 64: {}},
        "models": [{"name": "small", "power": MODELS["small"], "params": 1.0e8},
                   {"name": "large", "power": MODELS["large"], "params": 1.6e9,
                    "hparams": {16: {"lr": 0.5}, 64: {"lr": 0.7}}}],
        "backend": {"kind": "local", "workers": 2},
        "rcp": {"benchmark": "axis_report", "submission_runs": 3},
    })
    assert dict(run_campaign(load_campaign(path)).statuses) == {"converged": 32}
    return path


@pytest.fixture(scope="module")
def analyzed(axis, tmp_path_factory):
    out = tmp_path_factory.mktemp("analysis")
    result = invoke("analyze", str(axis), "--out", str(out), "--resamples", RESAMPLES)
    assert result.exit_code == 0, result.output
    return out


def test_the_api_equals_analyzes_files_per_model_and_across(axis, analyzed):
    campaign = rcpforge.load(axis)
    assert [(m.name, m.benchmark) for m in campaign.models] == [("small", "axis_report_small"),
                                                               ("large", "axis_report_large")]
    for model, power in MODELS.items():
        folder = analyzed / model
        table = campaign.rcp_table(model=model)
        pd.testing.assert_frame_equal(table, pd.read_parquet(folder / "rcp_table.parquet"))
        assert len(table) == 4  # its own 2 recipes x 2 batch sizes, not both models' runs in a cell

        api = campaign.factors(model=model, resamples=int(RESAMPLES)).to_dict("records")
        written = json.loads((folder / "factors.json").read_text())["factors"]
        keys = ("candidate", "batch_size", "factor", "ci_low", "ci_high", "verdict")
        assert [{k: f[k] for k in keys} for f in api] == [{k: f[k] for k in keys} for f in written]
        assert all(f["factor"] == pytest.approx(1.6**power, rel=0.08) for f in api)  # the model's own reference

        risk = campaign.selection_risk(model=model)
        cells = json.loads((folder / "selection.json").read_text())["cells"]
        assert [(r["recipe"], r["batch_size"], r["honest_mean"], r["runs_required"]) for r in risk.to_dict("records")] \
            == [(c["recipe"], c["batch_size"], c["honest"]["mean"], c["runs_required"]) for c in cells]

    scale = campaign.scale(resamples=int(RESAMPLES))
    assert scale == json.loads((analyzed / "scale.json").read_text())
    assert {(t["recipe"], t["batch_size"]) for t in scale["trends"]} == {("fp4_like", 16), ("fp4_like", 64)}
    assert all(t["slope"] < 0 for t in scale["trends"])  # the factor falls from 1.6 to 1.26


def test_the_api_refuses_to_mix_models(axis):
    campaign = rcpforge.load(axis)
    for method in (campaign.rcp_table, campaign.factors, campaign.selection_risk):
        with pytest.raises(rcpforge.RcpforgeError, match="has 2 models, each analysed apart: give model= one of "
                                                         "small, large$"):
            method()
    with pytest.raises(rcpforge.RcpforgeError, match="model='medium': not one of the campaign's models"):
        campaign.factors(model="medium")


def test_the_report_gives_each_model_its_sections(axis, tmp_path):
    data = yaml.safe_load(axis.read_text())
    data["models"].append({"name": "huge", "power": 0.25, "params": 2.56e10})  # in the file, not run yet
    grown = write_campaign(axis.parent, data, "grown.yaml")
    result = invoke("report", str(grown), "--out", str(tmp_path / "r.html"), "--reference-points", "none")
    assert result.exit_code == 0, result.output
    page = (tmp_path / "r.html").read_text()
    sections = dict(re.findall(r'<section id="([^"]+)">(.*?)</section>', page, re.S))
    order = list(sections)
    assert order.index("scale") < order.index("model-small") < order.index("small-factors") \
        < order.index("model-large") < order.index("large-factors") < order.index("cost")
    assert "<h2>Model large</h2>" in sections["model-large"] and "1,600,000,000 parameters" in sections["model-large"]
    campaign = rcpforge.load(axis)
    for model in MODELS:
        for key in ("factors", "rcp-table", "selection", "rcp-health", "curves"):
            assert f"{model}-{key}" in sections and "<h3>" in sections[f"{model}-{key}"]
        assert f"benchmark axis_report_{model}," in sections[f"{model}-rcp-table"]
        assert sections[f"{model}-rcp-table"].count("<tr>") == 1 + 4  # header + its own 4 cells
        # the model's factors against its own reference: the API's numbers, carried exactly
        for f in campaign.factors(model=model).to_dict("records"):
            assert f'data-value="{f["factor"]!r}"' in sections[f"{model}-factors"]
    assert "Model huge has no runs yet" in sections["model-huge"] and not any(k.startswith("huge-") for k in sections)
    assert {"factors", "rcp-table", "selection"}.isdisjoint(sections)  # no table of both models' runs together
    assert 'data-key="model"' in sections["cost"]


def test_plan_sizes_each_model_and_the_slope(axis):
    result = invoke("plan", str(axis), "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert {(c["model"], c["candidate"], c["batch_size"]) for c in plan["cells"]} == {
        (m, f"{m}/fp4_like", b) for m in MODELS for b in (16, 64)}  # each against its own model's bf16
    assert {(s["recipe"], s["batch_size"], s["models"]) for s in plan["slopes"]} == {
        ("fp4_like", 16, 2), ("fp4_like", 64, 2)}
    shown = invoke("plan", str(axis))
    assert shown.exit_code == 0, shown.output
    assert "runs per model and recipe to reach each precision of the slope" in shown.output
