"""sweeps/examples/scale.yaml and scale_text.yaml, the model-axis examples on the Markov
source and on the Shakespeare corpus: what issues 31 and 50 ask of them (three or more
widths spanning 4x in d_model, the four recipes, the minimum and maximum batch size, 6
seeds a cell, hyperparameters per model and batch size), and every model's settings
valid as the tiny LM's, checked as a one-model campaign (each model's `trainer:` and
`hparams:` copied in), which needs no model axis."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["scale.yaml", "scale_text.yaml"]
OWN_KEYS = ("name", "hparams")


def _example(name: str) -> dict:
    return yaml.safe_load((ROOT / "sweeps/examples" / name).read_text())


def _one_model_campaign(example: dict, model: dict) -> dict:
    data = {k: v for k, v in example.items() if k != "models"}
    data["trainer"] = {**example["trainer"], **{k: v for k, v in model.items() if k not in OWN_KEYS}}
    data["hparams"] = model["hparams"]
    return data


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_example_spans_4x_in_width_with_the_four_recipes(name):
    example = _example(name)
    widths = [m["d_model"] for m in example["models"]]
    assert len(widths) >= 3 and max(widths) >= 4 * min(widths)
    assert len({m["name"] for m in example["models"]}) == len(widths)
    assert set(example["recipes"]) == {"bf16", "fp8_tensorwise", "nvfp4", "mxfp4"}
    assert len(example["batch_sizes"]) == 2
    assert example.get("seeds", 0) >= 6 or "adaptive" in example


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_model_is_a_valid_tinylm_campaign_with_its_hparams(name):
    example = _example(name)
    for model in example["models"]:
        assert sorted(model["hparams"]) == sorted(example["batch_sizes"]), model["name"]
        specs = list(expand(parse_campaign(_one_model_campaign(example, model))))
        assert len(specs) == len(example["recipes"]) * len(example["batch_sizes"]) * example["seeds"]
        assert {s.trainer["d_model"] for s in specs} == {model["d_model"]}
        for spec in specs:
            assert spec.hparams["lr"] == model["hparams"][spec.batch_size]["lr"], model["name"]


def test_the_text_example_trains_on_the_corpus_with_the_grid_s_choices():
    """scale_text.yaml is the synthetic example's shape on the corpus, with the target,
    budget and learning rates docs/scale-text-workload.md chose from the BF16 grid."""
    text = _example("scale_text.yaml")
    grid = yaml.safe_load((ROOT / "benchmarks/campaigns/text_lr_grid.yaml").read_text())
    assert text["trainer"]["data"] == {"source": "corpus", "name": "shakespeare"} == grid["trainer"]["data"]
    assert text["target"]["metric"] == "eval_loss" and text["budget"]["max_tokens"] == grid["budget"]["max_tokens"]
    rates = {(m["d_model"], float(m["hparams"][32]["lr"])) for m in grid["models"]}
    for model in text["models"]:
        for batch, hparams in model["hparams"].items():
            assert (model["d_model"], hparams["lr"]) in rates, (model["name"], batch)
