"""sweeps/examples/scale.yaml, the model-axis example: what issue 31 asks of it (three or
more widths spanning 4x in d_model, the four recipes, the minimum and maximum batch size,
6 seeds a cell, hyperparameters per model and batch size), and every model's settings
valid as the tiny LM's, checked as a one-model campaign (each model's `trainer:` and
`hparams:` copied in), which needs no model axis."""

from __future__ import annotations

from pathlib import Path

import yaml

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign

ROOT = Path(__file__).resolve().parents[2]
SCALE = yaml.safe_load((ROOT / "sweeps/examples/scale.yaml").read_text())
OWN_KEYS = ("name", "hparams")


def _one_model_campaign(model: dict) -> dict:
    data = {k: v for k, v in SCALE.items() if k != "models"}
    data["trainer"] = {**SCALE["trainer"], **{k: v for k, v in model.items() if k not in OWN_KEYS}}
    data["hparams"] = model["hparams"]
    return data


def test_the_example_spans_4x_in_width_with_the_four_recipes():
    widths = [m["d_model"] for m in SCALE["models"]]
    assert len(widths) >= 3 and max(widths) >= 4 * min(widths)
    assert len({m["name"] for m in SCALE["models"]}) == len(widths)
    assert set(SCALE["recipes"]) == {"bf16", "fp8_tensorwise", "nvfp4", "mxfp4"}
    assert len(SCALE["batch_sizes"]) == 2
    assert SCALE.get("seeds", 0) >= 6 or "adaptive" in SCALE


def test_every_model_is_a_valid_tinylm_campaign_with_its_hparams():
    for model in SCALE["models"]:
        assert sorted(model["hparams"]) == sorted(SCALE["batch_sizes"]), model["name"]
        specs = list(expand(parse_campaign(_one_model_campaign(model))))
        assert len(specs) == len(SCALE["recipes"]) * len(SCALE["batch_sizes"]) * SCALE["seeds"]
        assert {s.trainer["d_model"] for s in specs} == {model["d_model"]}
        for spec in specs:
            assert spec.hparams["lr"] == model["hparams"][spec.batch_size]["lr"], model["name"]
