"""The recipe registry: every recipe name of issue 3, one frozen validated config each,
options validated with errors that list the valid ones, and `rcpforge recipes`."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.recipes.config import RecipeError
from rcpforge.trainers.recipes.named import RECIPES, get_recipe
from rcpforge.trainers.recipes.resolve import resolve_recipe, validate_recipe_options
from tests.helpers.campaigns import tiny_campaign

ISSUE_RECIPES = [
    "bf16", "fp8_tensorwise", "fp8_channelwise", "fp8_delayed", "fp8_rowwise", "fp8_rowwise_gw_hp",
    "fp8_block", "mxfp8", "mxfp4", "nvfp4", "mor",
]
# issue 17's (the recipe lab)
LAB_RECIPES = ["mxfp4_sr_rht", "mxfp4_dethad"]


# issue 17's named recipes (test_new_recipes.py tests their numerics)
ISSUE17_RECIPES = ["nvfp4_4over6", "nvfp4_rowscaled", "mxfp8_fwd_nvfp4_bwd", "nvfp4_fwd_mxfp8_bwd"]
# MXFP6, the 4-over-6 conventions and the 16-point Hadamard (test_fp6_and_four_over_six.py tests their numerics)
ISSUE33_RECIPES = ["nvfp4_4over6_te", "mxfp6", "mxfp4_dethad16"]


def test_every_issue_recipe_is_registered_and_frozen():
    assert set(ISSUE_RECIPES) | set(LAB_RECIPES) | set(ISSUE17_RECIPES) | set(ISSUE33_RECIPES) == set(RECIPES)
    r = get_recipe("nvfp4")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.x = None  # type: ignore[misc]
    with pytest.raises(Exception):
        r.resolve().opts.bf16_last_blocks = 3  # type: ignore[misc]


def test_recipe_table_of_numerics_md():
    """Formats and granularities as docs/numerics.md's recipe table names them."""
    def fmts(name):
        r = get_recipe(name).resolve()
        return (r.x.fmt, r.w.fmt, r.dy.fmt) if r.x else None

    assert fmts("bf16") is None
    assert fmts("fp8_tensorwise") == fmts("fp8_delayed") == fmts("fp8_channelwise") == ("e4m3", "e4m3", "e5m2")
    assert fmts("fp8_rowwise") == fmts("fp8_block") == fmts("mxfp8") == ("e4m3",) * 3
    assert fmts("mxfp4") == fmts("nvfp4") == ("e2m1",) * 3
    block = get_recipe("fp8_block")
    assert (block.x.block, block.w.block, block.dy.block) == (128, (128, 128), 128)
    nv = resolve_recipe("nvfp4")
    assert (nv.x.block, nv.w.block, nv.dy.block) == (16, (16, 16), 16)
    assert (nv.x.rounding, nv.w.rounding, nv.dy.rounding) == ("rne", "rne", "sr") and nv.hadamard_wgrad
    assert get_recipe("mxfp8").x.block == get_recipe("mxfp4").x.block == 32
    assert get_recipe("fp8_rowwise_gw_hp").wgrad_hp and not get_recipe("fp8_rowwise").wgrad_hp
    assert get_recipe("fp8_channelwise").w.scaling == "channelwise" and get_recipe("fp8_channelwise").x.scaling == "tensorwise"


def test_options_change_the_config():
    assert resolve_recipe("nvfp4", {"weight_2d": False, "stochastic_rounding": False}).w.block == 16
    assert resolve_recipe("nvfp4", {"stochastic_rounding": False}).dy.rounding == "rne"
    assert resolve_recipe("nvfp4", {"scale_clamp": True}).x.scale_mode == "nvfp4_clamped"
    assert not resolve_recipe("nvfp4", {"hadamard": False}).hadamard_wgrad
    assert resolve_recipe("mxfp8", {"grad_format": "e5m2"}).dy.fmt == "e5m2"
    assert {q.scale_mode for q in (lambda r: (r.x, r.w, r.dy))(resolve_recipe("mxfp4", {"scale_mode": "rceil"}))} == {"rceil"}
    assert resolve_recipe("mor", {"granularity": "block", "block_size": 64}).x.block == 64
    assert resolve_recipe("nvfp4", {"bf16_last_blocks": 2}).opts.bf16_last_blocks == 2
    assert validate_recipe_options("fp8_delayed", {"margin": 1}) == {
        "quantize_residual": False, "amax_history_len": 1024, "margin": 1}


@pytest.mark.parametrize("name,options,expect", [
    ("mxfp8", {"scale_mode": "ceil"}, ["scale_mode", "'floor'", "'rceil'", "grad_format"]),
    ("nvfp4", {"bf16_last_blocks": -1}, ["bf16_last_blocks", "greater than or equal to 0", "hadamard"]),
    # every recipe takes the placement options (bf16_first/last_blocks, bf16_layers) and the schedule
    ("fp8_tensorwise", {"hadamard": True}, ["hadamard", "valid options: backward, bf16_first_blocks", "quantize_residual"]),
    ("mor", {"threshold": "high"}, ["threshold", "granularity"]),
])
def test_bad_options_name_the_valid_ones(name, options, expect):
    with pytest.raises(RecipeError) as err:
        resolve_recipe(name, options)
    message = str(err.value)
    assert "\n" not in message and all(e in message for e in expect), message


def test_bad_name_lists_every_recipe():
    with pytest.raises(RecipeError) as err:
        get_recipe("fp4")
    assert all(name in str(err.value) for name in ISSUE_RECIPES)


def test_campaign_recipe_options_are_filled_in():
    campaign = parse_campaign(tiny_campaign(recipes=["bf16", {"nvfp4": {"bf16_last_blocks": 1}}]))
    nv = next(r for r in campaign.recipes if r.name == "nvfp4")
    assert nv.options["bf16_last_blocks"] == 1 and nv.options["hadamard"] is True


def test_registry_stays_torch_free():
    code = "import sys, rcpforge.trainers.recipes.resolve; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cli_lists_every_recipe_with_formats_and_options(cli):
    proc = cli("recipes", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert sorted(rows) == sorted(RECIPES) and set(ISSUE17_RECIPES) | set(LAB_RECIPES) <= set(rows)
    assert rows["fp8_tensorwise"]["x"].startswith("E4M3") and rows["fp8_tensorwise"]["dy"].startswith("E5M2")
    assert "E2M1" in rows["nvfp4"]["w"] and "16x16" in rows["nvfp4"]["w"]
    assert "Hadamard" in rows["nvfp4"]["wgrad"] and rows["fp8_rowwise_gw_hp"]["wgrad"] == "BF16"
    assert rows["nvfp4"]["options"]["bf16_last_blocks"] == 0
    assert rows["mor"]["options"]["threshold"] == 0.05
    table = cli("recipes")
    assert table.returncode == 0
    assert all(name in table.stdout for name in ISSUE_RECIPES) and "bf16_last_blocks=0" in table.stdout
