"""The per-layer precision map (trainers/tinylm/precision_map.py): what it says for each
recipe and placement, that it is what the model runs, the MLPerf disclosure keys derived
from it, and its way into the run's MLLOG and tags."""

from __future__ import annotations

import pytest
from mlperf_logging.rcp_checker import rcp_checker

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.command.settings import MLPERF_PRECISIONS
from rcpforge.trainers.contract.mllog.read import PRECISION_MAP_KEY, facts_tags, run_facts
from rcpforge.trainers.contract.mllog.write import MllogReporter, MllogWriter
from rcpforge.trainers.contract.schema import TAG_PRECISION_MAP
from rcpforge.trainers.precision import reference
from rcpforge.trainers.precision.layers import attention_factory, gemm_factory, switch_recipe
from rcpforge.trainers.precision.linear import QuantizedGemm
from rcpforge.trainers.recipes.named import RECIPES
from rcpforge.trainers.recipes.resolve import resolve_recipe
from rcpforge.trainers.tinylm.model import TinyLM
from rcpforge.trainers.tinylm.precision_map import disclosed_precisions, layer_names, mlperf_precision, precision_map
from rcpforge.trainers.tinylm.settings import TinyLMSettings
from rcpforge.trainers.tinylm.train import TinyLMTrainer, run_precision_map
from tests.helpers.campaigns import tiny_campaign

BF16 = ["bf16"] * 3
FP8 = ["e4m3", "e5m2 x e4m3", "e5m2 x e4m3"]  # fprop, dgrad, wgrad of fp8_tensorwise


def _layers(name: str, options: dict | None = None, n: int = 2) -> dict[str, list[str]]:
    pmap = precision_map(resolve_recipe(name, options or {}), n)
    assert len(pmap["phases"]) == 1 and pmap["gemms"] == ["fprop", "dgrad", "wgrad"]
    return pmap["phases"][0]["layers"]


def test_the_map_of_bf16_and_of_an_fp8_recipe():
    names = ["blocks.0.qkv", "blocks.0.attn_qk", "blocks.0.attn_pv", "blocks.0.proj", "blocks.0.fc1",
             "blocks.0.fc2"]
    assert layer_names(1) == [*names, "lm_head"]
    assert set(map(tuple, _layers("bf16").values())) == {tuple(BF16)}
    fp8 = _layers("fp8_tensorwise")
    assert {n: v for n, v in fp8.items() if v != BF16} == {
        f"blocks.{i}.{g}": FP8 for i in range(2) for g in ("qkv", "proj", "fc1", "fc2")}
    assert fp8["lm_head"] == fp8["blocks.1.attn_qk"] == BF16
    # operands unlike per GEMM: the BF16 wgrad of rowwise_with_gw_hp, MX and NVFP4 blocks
    assert _layers("fp8_rowwise_gw_hp")["blocks.0.fc1"] == ["e4m3", "e4m3", "bf16"]
    assert _layers("mxfp8", {"grad_format": "e5m2"})["blocks.0.fc1"] == ["mxfp8", "mxfp8_e5m2 x mxfp8",
                                                                        "mxfp8_e5m2 x mxfp8"]
    assert _layers("nvfp4")["blocks.0.fc1"] == ["nvfp4"] * 3


def test_the_map_of_the_hybrids_and_of_the_backward_override():
    """Per-direction recipes show each direction's format; the backward override moves
    dgrad and wgrad to BF16 operands (high_precision) or to BF16 dY times the forward's
    quantized copies (dequantized); the disclosure keeps the forward's lowest format."""
    assert _layers("mxfp8_fwd_nvfp4_bwd")["blocks.0.fc1"] == ["mxfp8", "nvfp4", "nvfp4"]
    assert _layers("nvfp4_fwd_mxfp8_bwd")["blocks.0.fc1"] == ["nvfp4", "mxfp8", "mxfp8"]
    assert _layers("nvfp4", {"backward": "high_precision"})["blocks.0.fc1"] == ["nvfp4", "bf16", "bf16"]
    assert _layers("nvfp4", {"backward": "dequantized"})["blocks.0.fc1"] == ["nvfp4", "bf16 x nvfp4", "bf16 x nvfp4"]
    pmap = precision_map(resolve_recipe("fp8_tensorwise", {"backward": "high_precision"}), 2)
    assert disclosed_precisions(pmap)["lowest_numerical_precision_in_linear"] == "fp8"


def test_placement_by_first_blocks_and_by_layer_names():
    first = _layers("fp8_tensorwise", {"bf16_first_blocks": 1})
    assert all(v == BF16 for n, v in first.items() if n.startswith("blocks.0."))
    assert first["blocks.1.qkv"] == first["blocks.1.fc2"] == FP8
    named = _layers("fp8_tensorwise", {"bf16_layers": ["*.fc2", "blocks.1.qkv"]})
    assert {n for n, v in named.items() if v == FP8} == {"blocks.0.qkv", "blocks.0.proj", "blocks.0.fc1",
                                                          "blocks.1.proj", "blocks.1.fc1"}


def test_the_schedule_adds_an_all_bf16_phase_from_the_step_of_the_switch():
    recipe = resolve_recipe("fp8_tensorwise", {"bf16_from_tokens": 300})
    phases = precision_map(recipe, 2, tokens_per_step=128, max_tokens=1024)["phases"]
    assert [p["from_tokens"] for p in phases] == [0, 384]  # the first step at or after 300 tokens
    assert phases[0]["layers"]["blocks.0.fc1"] == FP8
    assert set(map(tuple, phases[1]["layers"].values())) == {tuple(BF16)}
    assert len(precision_map(recipe, 2, tokens_per_step=128, max_tokens=384)["phases"]) == 1  # never reached
    at_once = precision_map(resolve_recipe("fp8_tensorwise", {"bf16_from_tokens": 0}), 2, 128, 1024)["phases"]
    assert len(at_once) == 1 and set(map(tuple, at_once[0]["layers"].values())) == {tuple(BF16)}
    assert disclosed_precisions({"phases": at_once, "comm": {}})["lowest_numerical_precision_in_linear"] == "bfloat16"


def test_the_map_is_what_the_model_runs_before_and_after_the_switch():
    recipe = resolve_recipe("fp8_tensorwise", {"fp8_attention": True, "bf16_layers": ["*.fc1", "blocks.1.attn_pv"],
                                               "bf16_from_tokens": 64})
    cfg = TinyLMSettings(n_layers=2, d_model=16, n_heads=2)
    model = TinyLM(cfg, 8, gemm_factory(recipe, 2), per_layer=True, attention=attention_factory(recipe, 2))
    before, after = (p["layers"] for p in precision_map(recipe, 2, 16, 1024)["phases"])

    def running() -> dict[str, str]:
        out = {f"blocks.{i}.{g}": "quantized" if isinstance(getattr(b, g).gemm, QuantizedGemm) else "bf16"
               for i, b in enumerate(model.blocks) for g in ("qkv", "proj", "fc1", "fc2")}
        for i, b in enumerate(model.blocks):
            for m in ("qk", "pv"):
                out[f"blocks.{i}.attn_{m}"] = "quantized" if b.attn_fn is not None and getattr(b.attn_fn, m) else "bf16"
        return out

    def said(layers: dict) -> dict[str, str]:
        return {n: "bf16" if v == BF16 else "quantized" for n, v in layers.items() if n != "lm_head"}

    assert running() == said(before)
    assert running()["blocks.0.attn_pv"] == "quantized" and running()["blocks.1.attn_pv"] == "bf16"
    switch_recipe(model, recipe.switch.to, 2)
    assert running() == said(after) and all(b.fc2.gemm is reference.linear for b in model.blocks)


MLPERF = ("lowest_numerical_precision_in_linear", "lowest_numerical_precision_in_attn",
          "lowest_numerical_precision_in_comm")


@pytest.mark.parametrize("name, options, linear, attn", [
    ("bf16", {}, "bfloat16", "bfloat16"),
    ("fp8_tensorwise", {}, "fp8", "bfloat16"),
    ("mor", {}, "fp8", "bfloat16"),
    ("mxfp4", {}, "mxfp4", "bfloat16"),
    ("nvfp4", {"bf16_last_blocks": 1}, "nvfp4", "bfloat16"),
    # placement that keeps every layer in BF16 discloses BF16
    ("nvfp4", {"bf16_first_blocks": 1, "bf16_last_blocks": 1}, "bfloat16", "bfloat16"),
    ("fp8_tensorwise", {"bf16_layers": ["blocks.*"]}, "bfloat16", "bfloat16"),
    ("fp8_tensorwise", {"fp8_attention": True}, "fp8", "fp8"),
    ("fp8_tensorwise", {"fp8_attention": True, "bf16_layers": ["*.attn_*"]}, "fp8", "bfloat16"),
    ("fp8_tensorwise", {"bf16_from_tokens": 64}, "fp8", "bfloat16"),  # the lowest over the run
])
def test_disclosure_keys_derive_from_the_map(name, options, linear, attn):
    keys = disclosed_precisions(precision_map(resolve_recipe(name, options), 2, 16, 1024))
    assert keys == dict(zip(MLPERF, (linear, attn, "fp32"), strict=True))
    assert set(keys.values()) <= set(MLPERF_PRECISIONS)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_a_recipe_without_placement_discloses_its_linear_gemms_lowest_format(name):
    recipe = resolve_recipe(name)
    linear = disclosed_precisions(precision_map(recipe, 2))["lowest_numerical_precision_in_linear"]
    assert linear == mlperf_precision(recipe)
    assert linear == ("bfloat16" if recipe.is_reference else "nvfp4" if "nvfp4" in name
                      else "mxfp4" if "mxfp4" in name else "mxfp6" if "mxfp6" in name else "fp8")


def _spec(recipe):
    data = tiny_campaign(recipes=[recipe], seeds=1, budget={"max_tokens": 512, "eval_every_tokens": 256},
                         target={"metric": "eval_excess_loss", "mode": "min", "value": -1.0},
                         hparams={16: {"lr": 0.01, "warmup_tokens": 256}, 64: {"lr": 0.02, "warmup_tokens": 256}})
    return next(s for s in expand(parse_campaign(data)) if s.batch_size == 16)


def test_a_runs_mllog_carries_its_map_and_the_keys_from_it(tmp_path):
    from mlperf_logging.compliance_checker import mlp_compliance

    spec = _spec({"fp8_tensorwise": {"fp8_attention": True, "bf16_from_tokens": 256}})
    trainer = TinyLMTrainer()
    path = tmp_path / "result_0.txt"
    writer = MllogWriter(path, "llama31_8b", spec, trainer.disclosure(spec))  # a benchmark the 6.1 rules know
    result = trainer.train(spec, MllogReporter(type("R", (), {"output_dir": tmp_path,
                                                               "eval_point": lambda self, p: None})(),
                                               writer, spec.target.metric))
    writer.stop(result)
    facts = run_facts(path)
    assert facts.precision_map == run_precision_map(spec)
    assert [p["from_tokens"] for p in facts.precision_map["phases"]] == [0, 256]
    assert {k: facts.disclosed[k] for k in MLPERF} == dict(zip(MLPERF, ("fp8", "fp8", "fp32"), strict=True))
    assert PRECISION_MAP_KEY in path.read_text()
    tags = facts_tags(facts)
    assert tags["rcpforge.mllog.lowest_numerical_precision_in_attn"] == "fp8" and TAG_PRECISION_MAP in tags
    # the checkers read the file as before: the RCP checker's samples, and the 6.1 rules'
    # disclosure checks find nothing to say of these lines
    not_converged, _, bs, benchmark = rcp_checker.read_submission_file(str(path), "6.0.0", False)
    assert (not_converged, bs, benchmark) == (1, 16, "llama31_8b")  # its target is out of reach
    checker = mlp_compliance.make_checker("training", "6.1.0", False, False)
    config = f"{mlp_compliance.__file__.rsplit('/', 1)[0]}/training_6.1.0/common.yaml"
    checker.check_file(str(path), config)
    said = " ".join(str(m) for m in [*checker.warnings.values(), *checker.overwritable.values(),
                                     *checker.not_overwritable])
    assert not [k for k in (*MLPERF, PRECISION_MAP_KEY) if k in said], said
