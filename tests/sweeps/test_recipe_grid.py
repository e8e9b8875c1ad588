"""Ablation grids: `grid:` options as lists expand into one recipe per combination."""

from __future__ import annotations

import re

import pytest

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.recipe_grid import variant_name
from rcpforge.sweeps.spec import CampaignError, parse_campaign
from rcpforge.trainers.recipes.config import same_gemms
from rcpforge.trainers.recipes.resolve import resolve_recipe
from tests.helpers.campaigns import tiny_campaign

SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
ABLATION = ["bf16", {"nvfp4": {"grid": {"hadamard": [True, False], "stochastic_rounding": [True, False]}}}]
FP8 = {"x": {"format": "e4m3"}, "w": {"format": "e4m3"}, "dy": {"format": "e5m2"}}


def _campaign(recipes, **overrides):
    return parse_campaign(tiny_campaign(recipes=recipes, **overrides), source="c.yaml")


def test_a_2x2_grid_is_four_variants_against_bf16():
    campaign = _campaign(ABLATION, seeds={"default": 2, "nvfp4": 3})
    names = [r.name for r in campaign.recipes]
    assert names == ["bf16", "nvfp4-hadamard_on-sr_on", "nvfp4-hadamard_on-sr_off",
                     "nvfp4-hadamard_off-sr_on", "nvfp4-hadamard_off-sr_off"]
    for r in campaign.recipes[1:]:
        assert r.options["base"] == "nvfp4" and r.grid_of == "nvfp4"
        want = resolve_recipe("nvfp4", {"hadamard": r.options["hadamard"],
                                        "stochastic_rounding": r.options["stochastic_rounding"]})
        got = resolve_recipe(r.name, r.options)
        assert same_gemms(got, want) and got.name == r.name and got.base == "nvfp4"
    assert resolve_recipe(names[4], campaign.recipes[4].options).dy.rounding == "rne"
    specs = expand(campaign)
    # the seeds of the entry apply to its variants; bf16 keeps the default
    assert sum(s.recipe == "bf16" for s in specs) == 2 * 2
    assert sum(s.recipe == names[1] for s in specs) == 3 * 2
    assert len({s.run_key for s in specs}) == len(specs)
    assert all(SAFE.match(s.run_name) for s in specs)


def test_a_recipe_without_grid_keeps_its_name_and_options():
    campaign = _campaign(["bf16", {"nvfp4": {"hadamard": False}}])
    assert [r.name for r in campaign.recipes] == ["bf16", "nvfp4"]
    assert "base" not in campaign.recipes[1].options and campaign.recipes[1].grid_of is None


def test_lists_outside_grid_keep_their_meaning_and_a_list_in_a_grid_is_one_value():
    lab = {**FP8, "w": {"format": "e4m3", "scaling": "block", "tile": [16, 16]},
           "grid": {"dy.rounding": ["rne", "sr"], "x.block": [16, 32]}}
    campaign = _campaign(["bf16", {"lab": {**lab, "x": {"format": "e4m3", "scaling": "block"}}}])
    names = [r.name for r in campaign.recipes[1:]]
    assert names == ["lab-dy_rounding_rne-x_block_16", "lab-dy_rounding_rne-x_block_32",
                     "lab-dy_rounding_sr-x_block_16", "lab-dy_rounding_sr-x_block_32"]
    for r in campaign.recipes[1:]:
        assert r.options["w"]["tile"] == [16, 16] and "base" not in r.options  # a written recipe's variants
    assert resolve_recipe(names[3], campaign.recipes[4].options).x.block == 32
    tiles = _campaign(["bf16", {"lab": {**FP8, "w": {"format": "e4m3", "scaling": "block"},
                                        "grid": {"w.tile": [[16, 16], [32, 32]]}}}])
    assert [r.name for r in tiles.recipes[1:]] == ["lab-w_tile_16x16", "lab-w_tile_32x32"]
    assert resolve_recipe("t", tiles.recipes[2].options).w.block == (32, 32)
    wgrad = _campaign(["bf16", {"lab": {**FP8, "grid": {"wgrad.precision": ["quantized", "bf16"]}}}])
    assert [resolve_recipe(r.name, r.options).wgrad_hp for r in wgrad.recipes[1:]] == [False, True]


@pytest.mark.parametrize("combo, name", [
    ({"hadamard": False, "stochastic_rounding": True}, "nvfp4-hadamard_off-sr_on"),
    ({"threshold": 1e-05}, "nvfp4-threshold_1em05"),
    ({"granularity": "block", "block_size": 64}, "nvfp4-granularity_block-block_size_64"),
    ({"scale_mode": "r ceil/x"}, "nvfp4-scale_mode_r_ceil_x"),
    ({"quantize_residual": None}, "nvfp4-qres_none"),
])
def test_generated_names_follow_the_rule_and_are_safe(combo, name):
    assert variant_name("nvfp4", combo) == name and SAFE.match(name)


def _error(recipes, **overrides) -> str:
    with pytest.raises(CampaignError) as info:
        _campaign(recipes, **overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_duplicate_generated_names_are_one_line_errors():
    message = _error(["bf16", {"nvfp4": {"grid": {"bf16_last_blocks": [1, 1]}}}])
    assert "recipe listed twice: nvfp4-bf16last_1" in message and "generated" in message
    message = _error(["bf16", {"nvfp4-sr_on": {"base": "nvfp4"}}, {"nvfp4": {"grid": {"stochastic_rounding": [True]}}}])
    assert "nvfp4-sr_on" in message and "generated" in message


@pytest.mark.parametrize("grid, says", [
    ({"hadamard": True}, "recipes.nvfp4.grid.hadamard: give a non-empty list"),
    ({"hadamard": []}, "recipes.nvfp4.grid.hadamard: give a non-empty list"),
    ([True, False], "recipes.nvfp4.grid: a mapping"),
    ({"dy.rounding": ["sr"]}, "recipes.nvfp4.grid.dy.rounding: the recipe has no dy operand"),
    ({"hadamrd": [True]}, "hadamrd"),
])
def test_bad_grids_are_one_line_errors_naming_the_option(grid, says):
    assert says in _error(["bf16", {"nvfp4": {"grid": grid}}])


def test_an_option_both_in_and_outside_the_grid_is_an_error():
    message = _error(["bf16", {"nvfp4": {"hadamard": True, "grid": {"hadamard": [True, False]}}}])
    assert "recipes.nvfp4.grid.hadamard: also set outside grid:" in message


def test_a_command_trainers_label_has_grid_variants_with_their_base():
    command = {"kind": "command", "argv": ["{python}", "-c", "pass"]}
    campaign = _campaign(["fp32", {"te": {"precision": "nvfp4", "grid": {"block": [16, 32]}}}], trainer=command,
                         target={"metric": "eval_loss", "mode": "min", "value": 1.0})
    assert [(r.name, r.options) for r in campaign.recipes[1:]] == [
        ("te-block_16", {"precision": "nvfp4", "base": "te", "block": 16}),
        ("te-block_32", {"precision": "nvfp4", "base": "te", "block": 32}),
    ]


def test_the_recipe_lab_example_is_bf16_a_written_recipe_and_a_2x2_grid():
    from rcpforge.sweeps.spec import load_campaign
    from tests.conftest import ROOT

    campaign = load_campaign(ROOT / "sweeps/examples/recipe_lab.yaml")
    names = [r.name for r in campaign.recipes]
    assert names[:2] == ["bf16", "nvfp4_plain"] and len(names) == 6
    plain = resolve_recipe("nvfp4_plain", campaign.recipes[1].options)
    assert same_gemms(plain, resolve_recipe("nvfp4", {"weight_2d": False, "stochastic_rounding": False,
                                                      "hadamard": False}))
    full = campaign.recipes[2]
    assert full.name == "nvfp4-hadamard_on-sr_on"
    assert same_gemms(resolve_recipe(full.name, full.options), resolve_recipe("nvfp4"))
    assert len(expand(campaign)) == 6 * 2 * 3


def test_the_recipe_lab_runs_end_to_end_and_its_report_compares_every_variant(tmp_path):
    """The example as it is but for its budget (a few steps a run; every run reaches the
    loose target at its first eval): `run`, `analyze` and `report` give each of its five
    candidates a factor with an interval against BF16 at both batch sizes, and every pair
    of candidates a factor against each other. (The example as it is, for real numbers,
    is in benchmarks/RESULTS.md.)"""
    import json

    import yaml

    from tests.conftest import ROOT, run_cli
    from tests.helpers.campaigns import write_campaign

    data = yaml.safe_load((ROOT / "sweeps/examples/recipe_lab.yaml").read_text())
    data.update(budget={"max_tokens": 4096, "eval_every_tokens": 2048},
                target={**data["target"], "value": 10.0},
                hparams={bs: {**hp, "warmup_tokens": 1024} for bs, hp in data["hparams"].items()})
    path = write_campaign(tmp_path, data)
    for args in (("run", str(path)), ("analyze", str(path), "--out", str(tmp_path / "out"), "--resamples", "500"),
                 ("report", str(path), "--out", str(tmp_path / "out" / "report.html"))):
        made = run_cli(*args)
        assert made.returncode == 0, (args, made.stdout[-2000:], made.stderr[-2000:])
        assert "Traceback" not in made.stdout + made.stderr
    names = [r.name for r in parse_campaign(data).recipes]
    # on a narrow terminal the console's RCP table still never cuts a name (the variants
    # differ at their ends: ...-sr_on, ...-sr_off)
    import io

    import pyarrow.parquet as pq
    from rich.console import Console

    import rcpforge.orchestrator.cli.analysis as analysis_cli

    narrow = Console(width=100, file=io.StringIO())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(analysis_cli, "console", narrow)
        analysis_cli._print_table(pq.read_table(tmp_path / "out" / "rcp_table.parquet"), "lab", 3)
    assert all(n in narrow.file.getvalue() for n in names), narrow.file.getvalue()
    factors = json.loads((tmp_path / "out" / "factors.json").read_text())
    assert {(f["candidate"], f["batch_size"]) for f in factors["factors"]} == {
        (n, bs) for n in names[1:] for bs in (32, 128)}
    assert all(f["ci_low"] is not None and f["ci_high"] is not None for f in factors["factors"])
    assert {(p["candidate"], p["reference"]) for p in factors["pairwise"]} == {
        (b, a) for i, a in enumerate(names[1:]) for b in names[i + 2:]}
    page = (tmp_path / "out" / "report.html").read_text()
    assert 'id="table-factors"' in page and 'id="table-pairwise"' in page
    assert all(n in page for n in names)
