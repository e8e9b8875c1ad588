"""Recipes written in the campaign file by their operands (trainers/recipes/written.py)."""

from __future__ import annotations

import hashlib

import pytest
import torch

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import CampaignError, load_campaign, parse_campaign
from rcpforge.trainers.contract import revisions
from rcpforge.trainers.recipes.config import same_gemms
from rcpforge.trainers.recipes.named import RECIPES
from rcpforge.trainers.recipes.resolve import resolve_recipe, validate_recipe_options
from rcpforge.trainers.tinylm.train import TinyLMTrainer
from tests.conftest import ROOT
from tests.helpers.campaigns import tiny_campaign
from tests.trainers.test_tinylm import Recorder

# nvfp4 as written in a campaign file (its defaults: 2-D weights, SR on dY, Hadamard on wgrad)
NVFP4 = {
    "x": {"format": "e2m1", "scaling": "nvfp4", "block": 16},
    "w": {"format": "e2m1", "scaling": "nvfp4", "tile": [16, 16]},
    "dy": {"format": "e2m1", "scaling": "nvfp4", "rounding": "sr"},
    "wgrad": {"transform": "hadamard"},
}
FP8 = {"x": {"format": "e4m3"}, "w": {"format": "e4m3"}, "dy": {"format": "e5m2"}}

# Digests of the run keys of every example campaign and of one campaign of every named
# recipe, taken before recipes could be written in the file: they must never change.
KEYS_BEFORE = {
    "quickstart": "8077cd4c6e3306e9",
    "adaptive": "853eca2a201b2180",
    "command": "4e0eb8408a31bbbd",
    "distributed": "1604fa5ca2612744",
    "tune": "179944f61a698315",
}
ALL_NAMED = ["bf16", "fp8_tensorwise", "fp8_channelwise", "fp8_delayed", "fp8_rowwise", "fp8_rowwise_gw_hp",
             "fp8_block", "mxfp8", "mxfp4", {"nvfp4": {"hadamard": False}}, "mor"]


def _digest(specs) -> str:
    return hashlib.sha256(",".join(s.run_key for s in specs).encode()).hexdigest()[:16]


@pytest.mark.parametrize("example", sorted(KEYS_BEFORE))
def test_run_keys_of_existing_campaigns_are_unchanged(example, monkeypatch):
    """Unchanged but for the tiny LM's CPU numerics revision (trainers/contract/revisions.py),
    which moves every tiny-LM CPU run's key once and a command trainer's never."""
    specs = expand(load_campaign(ROOT / f"sweeps/examples/{example}.yaml"))
    assert (_digest(specs) == KEYS_BEFORE[example]) == (example == "command")
    monkeypatch.setattr(revisions, "TRAINER_REVISIONS", {})
    assert _digest(specs) == KEYS_BEFORE[example]


def test_run_keys_of_every_named_recipe_are_unchanged(monkeypatch):
    specs = expand(parse_campaign(tiny_campaign(recipes=ALL_NAMED)))
    monkeypatch.setattr(revisions, "TRAINER_REVISIONS", {})  # as above
    assert _digest(specs) == "35570b706d2b6465"


def _short(recipes, **overrides):
    """A few hundred tokens per run: 4 steps of 16 x 8 tokens, evals every 256."""
    data = tiny_campaign(
        recipes=recipes, seeds=1, budget={"max_tokens": 512, "eval_every_tokens": 256},
        target={"metric": "eval_excess_loss", "mode": "min", "value": -1.0},
        hparams={16: {"lr": 0.01, "warmup_tokens": 256}, 64: {"lr": 0.02, "warmup_tokens": 256}}, **overrides,
    )
    return {s.recipe: s for s in expand(parse_campaign(data)) if s.batch_size == 16}


def _curve(spec):
    rec = Recorder()
    result = TinyLMTrainer().train(spec, rec)
    assert result.tokens_trained == 512
    return [p.metrics["eval_loss"] for p in rec.points]


def test_a_written_recipe_equal_to_a_named_one_trains_bit_identically_and_one_that_differs_does_not():
    specs = _short(["nvfp4", {"my_nvfp4": NVFP4},
                    {"my_nvfp4_rne": {**NVFP4, "dy": {**NVFP4["dy"], "rounding": "rne"}}}])
    assert same_gemms(resolve_recipe("my_nvfp4", specs["my_nvfp4"].recipe_options), resolve_recipe("nvfp4"))
    assert specs["my_nvfp4"].run_key != specs["nvfp4"].run_key  # its own name, its own definition in the key
    named = _curve(specs["nvfp4"])
    assert len(named) == 2
    assert _curve(specs["my_nvfp4"]) == named
    assert _curve(specs["my_nvfp4_rne"]) != named


MX4 = {"format": "e2m1", "scaling": "mx"}
WRITTEN_32_POINT = {
    "mxfp4_sr_rht": {"x": MX4, "w": MX4, "dy": {**MX4, "rounding": "sr"},
                     "wgrad": {"transform": "hadamard", "size": 32, "signs": "random"}},
    "mxfp4_dethad": {"x": MX4, "w": MX4, "dy": MX4, "wgrad": {"transform": "hadamard", "size": 32, "signs": "none"}},
}


@pytest.mark.parametrize("named", sorted(WRITTEN_32_POINT))
def test_a_32_point_hadamard_written_out_is_the_named_recipe_s_and_trains_bit_identically(named):
    definition = WRITTEN_32_POINT[named]
    specs = _short([named, {"mine": definition}])
    mine = resolve_recipe("mine", specs["mine"].recipe_options)
    assert (mine.hadamard_size, mine.hadamard_signs) == (32, definition["wgrad"]["signs"])
    assert same_gemms(mine, RECIPES[named])
    assert _curve(specs["mine"]) == _curve(specs[named])
    # another size or other signs is another recipe
    assert not same_gemms(resolve_recipe("other", validate_recipe_options(
        "other", {**definition, "wgrad": {**definition["wgrad"], "size": 16}})), RECIPES[named])


def test_a_hadamard_at_its_default_size_and_signs_keeps_the_written_recipe_s_run_key():
    """Written recipes from before size and signs existed keep their definitions, so their keys."""
    assert validate_recipe_options("lab", NVFP4)["wgrad"] == {"precision": "quantized", "transform": "hadamard"}
    defaults = {"transform": "hadamard", "size": 16, "signs": "fixed"}
    assert validate_recipe_options("lab", {**NVFP4, "wgrad": defaults}) == validate_recipe_options("lab", NVFP4)
    bigger = validate_recipe_options("lab", {**NVFP4, "wgrad": {"transform": "hadamard", "size": 32}})
    assert bigger["wgrad"]["size"] == 32


def test_the_full_definition_enters_the_run_key_and_the_name_the_run_name():
    a = _short(["bf16", {"mine": FP8}])["mine"]
    b = _short(["bf16", {"mine": {**FP8, "dy": {"format": "e5m2", "scale": "pow2"}}}])["mine"]
    assert a.run_name == "mine-bs16-s0" and a.recipe_options["dy"]["scale"] == "fp32"
    assert a.run_key != b.run_key
    # defaults written out or left out: the same definition, the same key
    c = _short(["bf16", {"mine": {**FP8, "x": {"format": "e4m3", "scaling": "tensorwise", "scale": "fp32"}}}])["mine"]
    assert c.run_key == a.run_key


def test_a_written_recipe_resolves_to_the_operands_it_names():
    options = validate_recipe_options("lab", {
        "x": {"format": "e4m3", "scaling": "block", "block": 128},
        "w": {"format": "e4m3", "scaling": "block", "tile": [128, 128], "scale": "fp32"},
        "dy": {"format": "e4m3", "scaling": "block", "block": 128},
        "wgrad": {"precision": "bf16"}, "bf16_last_blocks": 1,
    })
    recipe = resolve_recipe("lab", options)
    assert recipe.w.block == (128, 128) and recipe.w.scale_mode == "fp32" and recipe.x.scale_mode == "pow2"
    assert recipe.wgrad_hp and not recipe.hadamard_wgrad and recipe.opts.bf16_last_blocks == 1
    assert "amax_history_len" not in options  # options of delayed operands only
    assert same_gemms(resolve_recipe("f8", validate_recipe_options("f8", FP8)), RECIPES["fp8_tensorwise"])


def _error(recipes, **overrides) -> str:
    with pytest.raises(CampaignError) as info:
        parse_campaign(tiny_campaign(recipes=recipes, **overrides), source="c.yaml")
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("definition, says", [
    ({**FP8, "x": {"format": "e2m1"}}, ["recipes.lab.x.scaling", "mx, nvfp4 or block"]),
    ({**FP8, "x": {"format": "e4m3", "scaling": "mx", "scale": "pow2"}}, ["recipes.lab.x.scale", "floor or rceil"]),
    ({**FP8, "w": {"format": "e4m3", "blok": 32}}, ["recipes.lab.w.blok", "spelling"]),
    ({**FP8, "dy": {"format": "e9m3"}}, ["recipes.lab.dy.format", "e4m3", "e9m3"]),
    ({**FP8, "w": {"format": "e4m3", "scaling": "block"}}, ["recipes.lab.w.block", "tile"]),
    ({**FP8, "w": {"format": "e4m3", "scaling": "tensorwise", "tile": [16, 16]}}, ["recipes.lab.w.tile", "no blocks"]),
    ({**FP8, "dy": {"format": "e5m2", "scaling": "delayed", "rounding": "sr"}}, ["recipes.lab.dy.rounding"]),
    ({"x": FP8["x"]}, ["recipes.lab.w", "add w, dy"]),
    ({**FP8, "margin": 2}, ["recipes.lab.margin", "delayed operands"]),
    ({**FP8, "wgrad": {"precision": "bf16", "transform": "hadamard"}}, ["recipes.lab.wgrad.transform"]),
    ({**FP8, "w_dgrad": {"format": "e4m3", "scaling": "mx", "tile": [32, 32]}}, ["recipes.lab.w_dgrad.tile"]),
    ({**FP8, "wgrad": {"transform": "hadamard", "size": 24}}, ["recipes.lab.wgrad.size", "power of two", "24"]),
    ({**FP8, "wgrad": {"size": 32}}, ["recipes.lab.wgrad.size", "transform: hadamard"]),
    ({**FP8, "wgrad": {"transform": "hadamard", "signs": "some"}}, ["recipes.lab.wgrad.signs", "fixed"]),
])
def test_a_bad_written_recipe_is_one_line_naming_recipe_operand_and_field(definition, says):
    message = _error(["bf16", {"lab": definition}])
    assert all(s in message for s in says), message


def test_names_a_written_recipe_may_not_take():
    assert "recipes.nvfp4: nvfp4 is a named recipe" in _error(["bf16", {"nvfp4": NVFP4}])
    assert "name 'my lab'" in _error(["bf16", {"my lab": FP8}])
    # an unknown name without operands stays an error for the tiny LM, and says how to write one
    message = _error(["bf16", "fp9"])
    assert "unknown recipe 'fp9'" in message and "x: ..., w: ..., dy: ..." in message


def test_a_command_trainer_takes_an_unknown_name_as_a_label_but_no_operands():
    command = {"kind": "command", "argv": ["{python}", "-c", "pass"]}
    specs = expand(parse_campaign(tiny_campaign(recipes=["fp32", "my_label"], trainer=command,
                                                target={"metric": "eval_loss", "mode": "min", "value": 1.0})))
    assert {s.recipe for s in specs} == {"fp32", "my_label"}
    message = _error(["fp32", {"lab": FP8}], trainer=command,
                     target={"metric": "eval_loss", "mode": "min", "value": 1.0})
    assert "recipes.lab.x" in message and "scalars" in message


def test_a_named_recipe_under_its_own_name_keeps_its_revision():
    spec = _short(["bf16", {"block_exact": {"base": "fp8_block", "use_f32_scales": True}}])["block_exact"]
    assert spec.recipe_options["base"] == "fp8_block"
    recipe = resolve_recipe(spec.recipe, spec.recipe_options)
    assert recipe.name == "block_exact" and recipe.revision == 2 and recipe.x.scale_mode == "fp32"
    message = _error(["bf16", {"mine": {"base": "fp9"}}])
    assert "recipes.mine.base: 'fp9' is not a named recipe" in message


def test_mlflow_params_of_a_written_recipe_are_one_per_field(tmp_path):
    from mlflow import MlflowClient

    from rcpforge.orchestrator.tracking import Tracking
    from rcpforge.trainers.contract.schema import TAG_RECIPE

    spec = _short(["bf16", {"lab": FP8}])["lab"]
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    tracking = Tracking(uri)
    exp = tracking.open_experiment("c", tmp_path / "art")
    run_id = tracking.create_run(exp, spec)
    run = MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.data.tags[TAG_RECIPE] == "lab"
    assert run.data.params["recipe.x.format"] == "e4m3" and run.data.params["recipe.dy.format"] == "e5m2"
    assert run.data.params["recipe.wgrad.transform"] == "none"


def _example(lines: list[str]) -> list:
    import yaml

    return yaml.safe_load("\n".join(lines))["recipes"]


def test_rcpforge_recipes_lists_every_named_recipe_and_a_grammar_whose_examples_hold():
    import json

    from rcpforge.trainers.recipes.written import grammar_lines
    from tests.helpers.cli import invoke

    text = invoke("recipes").output
    assert all(name in text for name in RECIPES) and "A recipe written in the campaign file" in text
    rows = json.loads(invoke("recipes", "--json").output)
    assert [r["name"] for r in rows] == list(RECIPES)
    lines = grammar_lines()
    start = lines.index("  recipes:")
    written = _short(_example(lines[start:start + 7]))["my_nvfp4"]
    assert same_gemms(resolve_recipe(written.recipe, written.recipe_options), resolve_recipe("nvfp4"))
    grid = next(line for line in lines if line.startswith("  recipes: [bf16, {nvfp4: {grid"))
    names = next(line for line in lines if line.startswith("  -> ")).removeprefix("  -> ").split(", ")
    assert sorted(_short(_example([grid]))) == sorted(["bf16", *names])


def test_the_docs_example_of_a_written_recipe_holds():
    text = (ROOT / "docs" / "recipes.md").read_text()
    block = text[text.index("## A recipe written in the campaign file"):]
    block = block[block.index("```yaml\n") + 8:]
    specs = _short(_example(block[:block.index("```")].splitlines()))
    assert same_gemms(resolve_recipe("my_nvfp4", specs["my_nvfp4"].recipe_options), resolve_recipe("nvfp4"))
    no_sr = resolve_recipe("nvfp4_no_sr", specs["nvfp4_no_sr"].recipe_options)
    assert same_gemms(no_sr, resolve_recipe("nvfp4", {"stochastic_rounding": False}))


def test_wgrad_copies_of_their_own_change_only_the_weight_gradient():
    from rcpforge.trainers.precision.linear import QuantizedGemm
    from tests.trainers.precision.test_linear import _problem, _run

    problem = _problem(5, m=64, k=32, n=48)
    same = {**FP8, "x_wgrad": FP8["x"], "dy_wgrad": FP8["dy"]}  # tensorwise: the same copies again
    named = _run(QuantizedGemm(resolve_recipe("fp8_tensorwise")), *problem)
    again = _run(QuantizedGemm(resolve_recipe("lab", validate_recipe_options("lab", same))), *problem)
    assert all(torch.equal(a, b) for a, b in zip(named, again, strict=True))
    coarse = {**FP8, "x_wgrad": {"format": "e5m2"}}
    out, gx, gw, gb = _run(QuantizedGemm(resolve_recipe("lab", validate_recipe_options("lab", coarse))), *problem)
    assert torch.equal(out, named[0]) and torch.equal(gx, named[1]) and not torch.equal(gw, named[2])
    assert "x_wgrad" in _error(["bf16", {"lab": {**coarse, "wgrad": {"precision": "bf16"}}}])
