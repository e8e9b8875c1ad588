"""A recipe's schedule to any recipe (`switch_to` with `switch_from_tokens`,
trainers/recipes/switch.py): when the switch happens, what the model runs after it, its
precision map and run key, a resume across it, and the errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from rcpforge.sweeps.spec import CampaignError, parse_campaign
from rcpforge.trainers.contract import revisions
from rcpforge.trainers.precision import reference
from rcpforge.trainers.precision.layers import attention_factory, gemm_factory, switch_recipe
from rcpforge.trainers.precision.linear import QuantizedGemm
from rcpforge.trainers.recipes.named import RECIPES
from rcpforge.trainers.recipes.resolve import resolve_recipe, validate_recipe_options
from rcpforge.trainers.tinylm.model import TinyLM
from rcpforge.trainers.tinylm.precision_map import disclosed_precisions, precision_map
from rcpforge.trainers.tinylm.settings import TinyLMSettings
from rcpforge.trainers.tinylm.train import TinyLMTrainer
from tests.helpers.campaigns import tiny_campaign, tiny_run_specs, write_campaign
from tests.helpers.cli import invoke, one_line_usage_error
from tests.trainers.test_tinylm_checkpoint import Recorder, cut_and_resumed

LINEAR = ("qkv", "proj", "fc1", "fc2")


def _switching(target, at=300, name="nvfp4"):
    return {name: {"switch_to": target, "switch_from_tokens": at}}


def _resolved(name, options):
    """A recipe as a run resolves it: from its options as the campaign normalized them."""
    return resolve_recipe(name, validate_recipe_options(name, options))


def test_the_switch_happens_at_the_first_step_at_or_after_its_token_count(tmp_path, monkeypatch):
    """300 tokens is within the third step (256..384): the fourth, from 384, is the first
    under the target. Every training forward of the 1-block model runs 4 quantized GEMMs."""
    spec = tiny_run_specs(["bf16", _switching("fp8_delayed")])["nvfp4"]
    calls: list[str] = []
    call = QuantizedGemm.__call__

    def counted(self, x, w, b):
        if torch.is_grad_enabled():  # a training step, not an eval
            calls.append(self.recipe.name)
        return call(self, x, w, b)

    monkeypatch.setattr(QuantizedGemm, "__call__", counted)
    TinyLMTrainer().train(spec, Recorder(tmp_path))
    steps = [calls[i:i + len(LINEAR)] for i in range(0, len(calls), len(LINEAR))]
    assert steps == [["nvfp4"] * 4] * 3 + [["fp8_delayed"] * 4]


def _model(recipe, n_blocks=2):
    cfg = TinyLMSettings(n_layers=n_blocks, d_model=16, n_heads=2)
    return TinyLM(cfg, 8, gemm_factory(recipe, n_blocks), per_layer=True, attention=attention_factory(recipe, n_blocks))


def test_the_switch_rebuilds_each_gemm_under_the_target_with_its_placement_and_fresh_state():
    target = {"fp8_delayed": {"margin": 1, "bf16_layers": ["*.fc2"], "fp8_attention": True}}
    recipe = _resolved("fp8_delayed", {"switch_to": target, "switch_from_tokens": 64})
    model = _model(recipe)
    before = {n: m.gemm for n, m in model.named_modules() if isinstance(getattr(m, "gemm", None), QuantizedGemm)}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randint(0, 8, (2, 8)), torch.randint(0, 8, (2, 8))).backward()
    assert all(g._delayed for g in before.values())  # histories the first phase filled
    assert all(b.attn_fn is None for b in model.blocks)

    switch_recipe(model, recipe.switch.to, 2)
    after = {n: m.gemm for n, m in model.named_modules() if hasattr(m, "gemm")}
    said = precision_map(recipe, 2, 16, 1024)["phases"][1]["layers"]
    for name, gemm in after.items():
        assert (gemm is reference.linear) == (said[name] == ["bf16"] * 3), name
        if gemm is not reference.linear:
            assert gemm is not before[name] and gemm.recipe.opts.margin == 1 and not gemm._delayed  # fresh state
            # the second phase's stochastic-rounding stream is not the first phase's again
            assert gemm.generator.initial_seed() != before[name].generator.initial_seed()
    assert {n for n, g in after.items() if g is reference.linear} == {"blocks.0.fc2", "blocks.1.fc2"}
    assert all(b.attn_fn is not None and b.attn_fn.qk and b.attn_fn.pv for b in model.blocks)


def test_the_precision_map_shows_the_second_phase_in_the_targets_formats():
    recipe = _resolved("nvfp4", _switching({"mxfp8": {"bf16_last_blocks": 1, "fp8_attention": True}})["nvfp4"])
    pmap = precision_map(recipe, 2, tokens_per_step=128, max_tokens=1024)
    first, second = pmap["phases"]
    assert (first["from_tokens"], second["from_tokens"]) == (0, 384)
    assert first["layers"]["blocks.1.fc1"] == ["nvfp4"] * 3 and first["layers"]["blocks.0.attn_qk"] == ["bf16"] * 3
    assert second["layers"]["blocks.0.fc1"] == ["mxfp8"] * 3 and second["layers"]["blocks.1.fc1"] == ["bf16"] * 3
    assert second["layers"]["blocks.0.attn_qk"] == ["e4m3", "e5m2 x e4m3", "e5m2 x e4m3"]
    # the disclosure is the lowest over both phases: NVFP4 from the first, FP8 attention from the second
    assert disclosed_precisions(pmap) == {"lowest_numerical_precision_in_linear": "nvfp4",
                                          "lowest_numerical_precision_in_attn": "fp8",
                                          "lowest_numerical_precision_in_comm": "fp32"}
    late = _resolved("fp8_tensorwise", {"switch_to": "nvfp4", "switch_from_tokens": 512})
    assert disclosed_precisions(precision_map(late, 2, 128, 1024))["lowest_numerical_precision_in_linear"] == "nvfp4"
    assert len(precision_map(late, 2, 128, 512)["phases"]) == 1  # a switch the budget never reaches
    at_once = precision_map(_resolved("nvfp4", _switching("mxfp8", 0)["nvfp4"]), 2, 128, 1024)["phases"]
    assert len(at_once) == 1 and at_once[0]["layers"]["blocks.0.fc1"] == ["mxfp8"] * 3


def test_the_run_key_holds_the_schedule_and_the_target_definition(monkeypatch):
    specs = tiny_run_specs(["bf16", _switching("mxfp8"), {"short": {"base": "nvfp4", "switch_to": {"mxfp8": None},
                                                                       "switch_from_tokens": 300}},
                    {"later": {"base": "nvfp4", "switch_to": "mxfp8", "switch_from_tokens": 400}},
                    {"rceil": {"base": "nvfp4", "switch_to": {"mxfp8": {"scale_mode": "rceil"}},
                               "switch_from_tokens": 300}},
                    {"to_block": {"base": "nvfp4", "switch_to": "fp8_block", "switch_from_tokens": 300}}])
    switched = specs["nvfp4"].recipe_options  # the campaign's entry `nvfp4:` with its switch
    assert switched["switch_to"] == {"mxfp8": {"quantize_residual": False, "scale_mode": "floor",
                                               "grad_format": "e4m3"}}
    assert switched["switch_from_tokens"] == 300
    # without a switch the options hold no switch keys: run keys stay what they were
    assert all(not set(validate_recipe_options(n, {})) & {"switch_to", "switch_from_tokens"} for n in RECIPES)
    plain = tiny_run_specs(["bf16", "nvfp4"])["nvfp4"]
    assert set(switched) - set(plain.recipe_options) == {"switch_to", "switch_from_tokens"}
    keys = {n: s.run_key for n, s in specs.items()}
    assert len(set(keys.values()) | {plain.run_key}) == len(keys) + 1
    # `switch_to: mxfp8` and `{mxfp8: {}}` are one definition (the names differ: base: nvfp4)
    assert specs["short"].recipe_options == {"base": "nvfp4", **switched}
    # the target's numerics revision is in the key too
    before = specs["to_block"].run_key
    monkeypatch.setitem(revisions.RECIPE_REVISIONS, "fp8_block", revisions.RECIPE_REVISIONS["fp8_block"] + 1)
    assert specs["to_block"].run_key != before and specs["later"].run_key == keys["later"]


@pytest.mark.parametrize("target", ["bf16_from_tokens", "fp8_delayed", "nvfp4"])
def test_a_run_resumed_from_a_checkpoint_after_its_switch_ends_as_an_uninterrupted_one(tmp_path, target):
    """BF16 (bf16_from_tokens), a delayed-scaling target (its amax histories in the
    checkpoint) and a stochastic-rounding one (its streams)."""
    source = "nvfp4" if target != "nvfp4" else "fp8_tensorwise"
    options = ({"bf16_from_tokens": 300} if target == "bf16_from_tokens"
               else {"switch_to": target, "switch_from_tokens": 300})
    spec = tiny_run_specs(["bf16", {"late": {"base": source, **options}}], 1024, every=1)["late"]
    # killed at its 3rd eval (768 tokens), before that eval's checkpoint: the last is at 512, after the switch at 384
    whole, saved, second = cut_and_resumed(spec, tmp_path, stop_after=3)
    assert saved["loop"]["tokens"] == 512
    assert [p.tokens for p in second] == [768, 1024]
    assert [p.metrics for p in second] == [p.metrics for p in whole[2:]]
    numerics = saved["numerics"]  # the target's numeric state, saved from the target's GEMMs
    if target == "bf16_from_tokens":
        assert numerics == {}
    else:
        assert sorted(numerics) == [f"blocks.0.{g}" for g in ("fc1", "fc2", "proj", "qkv")]
        assert all(bool(s["delayed"]) == (target == "fp8_delayed") for s in numerics.values())
    unswitched = tiny_run_specs(["bf16", {"late": {"base": source}}], 1024)["late"]
    rec = Recorder(tmp_path / "unswitched")
    rec.output_dir.mkdir()
    TinyLMTrainer().train(unswitched, rec)
    assert rec.points[0].metrics == whole[0].metrics and rec.points[-1].metrics != whole[-1].metrics


@pytest.mark.parametrize("options, says", [
    ({"switch_to": "fp9", "switch_from_tokens": 300}, "recipes.nvfp4.switch_to: unknown recipe 'fp9'"),
    ({"switch_to": {"mxfp8": {"bf16_from_tokens": 9}}, "switch_from_tokens": 300},
     "recipes.nvfp4.switch_to.mxfp8.bf16_from_tokens: a switch target has no schedule of its own"),
    ({"switch_to": {"mxfp8": {"switch_to": "bf16", "switch_from_tokens": 9}}, "switch_from_tokens": 300},
     "recipes.nvfp4.switch_to.mxfp8.switch_to: a switch target has no schedule of its own"),
    ({"switch_to": "nvfp4", "switch_from_tokens": 300}, "recipes.nvfp4.switch_to: nvfp4 trains as nvfp4 itself"),
    ({"switch_to": "mxfp8", "switch_from_tokens": 400_000},
     "recipes.nvfp4.switch_from_tokens: 400,000 is not below budget.max_tokens (400,000), so the run would never "
     "switch to mxfp8"),
    ({"switch_to": "mxfp8"}, "recipes.nvfp4.switch_from_tokens: switch_to needs the token count"),
    ({"switch_from_tokens": 300}, "recipes.nvfp4.switch_to: switch_from_tokens needs the recipe to switch to"),
    ({"switch_to": "mxfp8", "switch_from_tokens": -1}, "recipes.nvfp4.switch_from_tokens: a token count is a whole"),
    ({"switch_to": "mxfp8", "switch_from_tokens": 300, "bf16_from_tokens": 200},
     "recipes.nvfp4.bf16_from_tokens: give either bf16_from_tokens or switch_to"),
    ({"switch_to": {"mxfp8": {"scale_mode": "up"}}, "switch_from_tokens": 300},
     "recipes.nvfp4.switch_to: recipe mxfp8 options: scale_mode"),
    ({"switch_to": {"bf16": {"bf16_last_blocks": 1}}, "switch_from_tokens": 300},
     "recipes.nvfp4.switch_to.bf16.bf16_last_blocks: bf16 runs every GEMM in BF16 already"),
    ({"switch_to": ["mxfp8"], "switch_from_tokens": 300}, "recipes.nvfp4.switch_to: a recipe name"),
    # the target's placement fits the model (the tiny campaign's has one block) as the recipe's must
    ({"switch_to": {"mxfp8": {"bf16_first_blocks": 1, "bf16_last_blocks": 1}}, "switch_from_tokens": 300},
     "recipes.nvfp4.switch_to.mxfp8.bf16_first_blocks: 1 first and 1 last blocks in BF16 are more than"),
    ({"switch_to": {"mxfp8": {"bf16_layers": ["blocks.3.*"]}}, "switch_from_tokens": 300},
     "recipes.nvfp4.switch_to.mxfp8.bf16_layers: 'blocks.3.*' names no layer"),
])
def test_a_bad_switch_is_a_one_line_error(options, says):
    with pytest.raises(CampaignError) as info:
        parse_campaign(tiny_campaign(recipes=["bf16", {"nvfp4": options}]), source="c.yaml")
    assert says in str(info.value) and "\n" not in str(info.value)


def test_rcpforge_run_refuses_a_bad_switch_with_exit_2(tmp_path):
    path = write_campaign(tmp_path, tiny_campaign(recipes=[{"bf16": {"switch_to": "nvfp4",
                                                                              "switch_from_tokens": 300}}, "nvfp4"]))
    one_line_usage_error(invoke("run", str(path)), "recipes.bf16.switch_to: bf16 runs every GEMM in BF16")
    path = write_campaign(tmp_path, tiny_campaign(recipes=["bf16", _switching("mxfp9")]))
    one_line_usage_error(invoke("run", str(path)), "recipes.nvfp4.switch_to: unknown recipe 'mxfp9'")


def test_the_docs_and_rcpforge_recipes_examples_of_a_switch_hold():
    from rcpforge.trainers.recipes.written import grammar_lines

    text = (Path(__file__).parents[2] / "docs" / "recipes.md").read_text()
    block = text[text.index("`switch_to` with `switch_from_tokens` switches to any recipe"):]
    block = block[block.index("```yaml\n") + 8:]
    examples = [yaml.safe_load(block[:block.index("```")])["recipes"]]
    examples += [yaml.safe_load(line)["recipes"] for line in grammar_lines()
                 if line.startswith("  recipes:") and "switch_to" in line]
    assert len(examples) == 3
    budget = {"max_tokens": 1_000_000, "eval_every_tokens": 4096}
    for recipes in examples:
        campaign = parse_campaign(tiny_campaign(recipes=recipes, budget=budget))
        switched = [r for r in campaign.recipes if "switch_to" in r.options]
        assert switched and all(r.options["switch_from_tokens"] == 600_000 for r in switched)
        assert all(resolve_recipe(r.name, r.options).switch.to.name == "mxfp8" for r in switched)
