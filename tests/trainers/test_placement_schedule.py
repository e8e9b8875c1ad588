"""A recipe's placement (layers kept in BF16) and schedule (BF16 from a token count)."""

from __future__ import annotations

import pytest

from rcpforge.sweeps.spec import CampaignError, parse_campaign
from rcpforge.trainers.precision import reference
from rcpforge.trainers.precision.layers import gemm_factory
from rcpforge.trainers.precision.linear import QuantizedGemm
from rcpforge.trainers.recipes.resolve import resolve_recipe
from rcpforge.trainers.tinylm.train import TinyLMTrainer
from tests.helpers.campaigns import tiny_campaign, tiny_run_specs
from tests.trainers.test_tinylm_checkpoint import Recorder, cut_and_resumed


def test_placement_keeps_the_first_and_last_blocks_and_named_layers_in_bf16():
    recipe = resolve_recipe("fp8_tensorwise", {"bf16_first_blocks": 1, "bf16_last_blocks": 1,
                                               "bf16_layers": ["*.fc2", "blocks.2.qkv"]})
    make = gemm_factory(recipe, n_blocks=4)
    quantized = {f"blocks.{i}.{g}" for i in range(4) for g in ("qkv", "proj", "fc1", "fc2")
                 if isinstance(make(f"blocks.{i}.{g}"), QuantizedGemm)}
    assert quantized == {"blocks.1.qkv", "blocks.1.proj", "blocks.1.fc1", "blocks.2.proj", "blocks.2.fc1"}
    assert gemm_factory(resolve_recipe("fp8_tensorwise"), n_blocks=4)("blocks.0.fc2") is not reference.linear


def _curve(spec, folder):
    folder.mkdir()
    rec = Recorder(folder)
    TinyLMTrainer().train(spec, rec)
    return [p.metrics["eval_loss"] for p in rec.points]


def test_the_schedule_switches_to_bf16_at_its_token_count(tmp_path):
    specs = tiny_run_specs(["bf16", "fp8_tensorwise", {"fp8_at_0": {"base": "fp8_tensorwise", "bf16_from_tokens": 0}},
                    {"fp8_at_256": {"base": "fp8_tensorwise", "bf16_from_tokens": 256}}])
    assert specs["fp8_at_256"].recipe_options["bf16_from_tokens"] == 256  # in the run key and MLflow params
    bf16, fp8 = _curve(specs["bf16"], tmp_path / "a"), _curve(specs["fp8_tensorwise"], tmp_path / "b")
    assert bf16 != fp8
    assert _curve(specs["fp8_at_0"], tmp_path / "c") == bf16  # BF16 from the first step: the bf16 run
    switched = _curve(specs["fp8_at_256"], tmp_path / "d")
    assert switched[0] == fp8[0] and switched[1] != fp8[1]  # FP8 up to 256 tokens, then BF16


# to BF16, and to a recipe of its own (trainers/recipes/switch.py; after the switch:
# tests/trainers/test_recipe_switch.py)
@pytest.mark.parametrize("schedule", [{"bf16_from_tokens": 640}, {"switch_to": "fp8_delayed",
                                                                  "switch_from_tokens": 640}])
def test_a_run_resumed_from_a_checkpoint_before_its_switch_ends_as_an_uninterrupted_one(tmp_path, schedule):
    spec = tiny_run_specs(["bf16", {"late": {"base": "fp8_tensorwise", **schedule}}], 1024, every=1)["late"]
    # killed at its 2nd eval (512 tokens), before that eval's checkpoint: the last is at 256, before 640
    whole, saved, second = cut_and_resumed(spec, tmp_path, stop_after=2)
    assert saved["loop"]["tokens"] == 256
    assert [p.tokens for p in second] == [512, 768, 1024]
    assert [p.metrics for p in second] == [p.metrics for p in whole[1:]]


@pytest.mark.parametrize("options, says", [
    ({"bf16_layers": ["blocks.5.fc2"]}, "recipes.fp8_tensorwise.bf16_layers: 'blocks.5.fc2' names no layer"),
    ({"bf16_first_blocks": 1, "bf16_last_blocks": 1}, "recipes.fp8_tensorwise.bf16_first_blocks"),
    ({"bf16_from_tokens": -1}, "bf16_from_tokens"),
    ({"bf16_from_tokens": 400_000}, "recipes.fp8_tensorwise.bf16_from_tokens: 400,000 is not below budget.max_tokens"),
])
def test_bad_placement_is_a_one_line_error(options, says):
    with pytest.raises(CampaignError) as info:
        parse_campaign(tiny_campaign(recipes=["bf16", {"fp8_tensorwise": options}]), source="c.yaml")
    assert says in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(CampaignError, match="recipes.bf16.bf16_from_tokens: bf16 runs every GEMM in BF16"):
        parse_campaign(tiny_campaign(recipes=[{"bf16": {"bf16_from_tokens": 5}}]), source="c.yaml")
