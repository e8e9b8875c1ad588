"""FP8 attention matmuls (the fp8_attention option): each product is the product of the
E4M3 copies (E5M2 for the output gradient) exactly, the attention stays close to BF16's,
and a run with the option trains differently from one without, under a run key of its
own while the keys of runs without it stay what they were."""

from __future__ import annotations

import pytest
import torch

from rcpforge.sweeps.spec import CampaignError, parse_campaign
from rcpforge.trainers.precision.attention import Fp8Attention, _Fp8Matmul
from rcpforge.trainers.precision.layers import attention_factory, gemm_factory
from rcpforge.trainers.precision.quantize import fake_quant_tensorwise
from rcpforge.trainers.recipes.resolve import resolve_recipe, validate_recipe_options
from rcpforge.trainers.tinylm.model import TinyLM
from rcpforge.trainers.tinylm.settings import TinyLMSettings
from tests.helpers.campaigns import tiny_campaign


def _qkv(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, 2, 8, 16, generator=g) * s for s in (1.0, 3.0, 0.5))


def test_each_product_is_that_of_the_quantized_copies_and_so_is_its_gradient():
    a, b, _ = _qkv()
    a, b = a.requires_grad_(), b.transpose(-2, -1).contiguous().requires_grad_()
    out = _Fp8Matmul.apply(a, b)
    qa, qb = fake_quant_tensorwise(a.detach(), "e4m3"), fake_quant_tensorwise(b.detach(), "e4m3")
    assert torch.equal(out, qa @ qb) and not torch.equal(out, a.detach() @ b.detach())
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    out.backward(grad)
    qg = fake_quant_tensorwise(grad, "e5m2")
    assert torch.equal(a.grad, qg @ qb.transpose(-2, -1)) and torch.equal(b.grad, qa.transpose(-2, -1) @ qg)
    assert not torch.equal(qg, fake_quant_tensorwise(grad, "e4m3"))  # E5M2, not E4M3, for the gradient


def test_fp8_attention_is_close_to_bf16_attention_but_not_equal():
    q, k, v = _qkv()
    exact = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    fp8 = Fp8Attention()(q, k, v, None)
    bf16_pv = Fp8Attention(qk=True, pv=False)(q, k, v, None)  # placement keeps PV in BF16
    error = ((fp8 - exact).norm() / exact.norm()).item()
    assert 1e-4 < error < 0.1
    assert not torch.equal(fp8, bf16_pv)
    capped = Fp8Attention()(q, k, v, 1.0)
    assert not torch.allclose(capped, fp8)  # the logit cap applies between the matmuls


def _loss(options: dict) -> float:
    torch.manual_seed(0)
    recipe = resolve_recipe("fp8_tensorwise", options)
    cfg = TinyLMSettings(n_layers=1, d_model=16, n_heads=2, context=8)
    model = TinyLM(cfg, 8, gemm_factory(recipe, 1), per_layer=True, attention=attention_factory(recipe, 1))
    idx = torch.randint(0, 8, (4, 9), generator=torch.Generator().manual_seed(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(idx[:, :-1], idx[:, 1:])
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    return float(loss.detach())


def test_the_option_changes_the_models_numerics_and_only_with_it_on():
    plain = _loss({})
    assert _loss({}) == plain
    assert _loss({"fp8_attention": True}) != plain
    assert _loss({"fp8_attention": True, "bf16_layers": ["*.attn_*"]}) == plain  # placed back in BF16


def test_run_keys_without_the_option_stay_and_the_reference_refuses_it():
    assert "fp8_attention" not in validate_recipe_options("fp8_tensorwise", {})
    assert validate_recipe_options("fp8_tensorwise", {"fp8_attention": True})["fp8_attention"] is True
    written = {"x": {"format": "e4m3"}, "w": {"format": "e4m3"}, "dy": {"format": "e5m2"}}
    assert "fp8_attention" not in validate_recipe_options("my_fp8", written)
    assert validate_recipe_options("my_fp8", {**written, "fp8_attention": True})["fp8_attention"] is True
    with pytest.raises(CampaignError, match="recipes.bf16.fp8_attention: bf16 runs every GEMM in BF16"):
        parse_campaign(tiny_campaign(recipes=[{"bf16": {"fp8_attention": True}}]), source="c.yaml")


def test_a_campaign_takes_the_option_with_placement_of_the_attention_matmuls_and_in_a_grid():
    from rcpforge.sweeps.expand import expand

    campaign = parse_campaign(tiny_campaign(recipes=[
        "bf16", "fp8_tensorwise",
        {"fp8_attn": {"base": "fp8_tensorwise", "fp8_attention": True, "bf16_layers": ["blocks.0.attn_pv"]}},
        {"fp8_tensorwise": {"grid": {"fp8_attention": [True, False]}}},
    ]), source="c.yaml")
    specs = {s.recipe: s for s in expand(campaign) if s.batch_size == 16 and s.seed == 0}
    assert specs["fp8_attn"].recipe_options["bf16_layers"] == ["blocks.0.attn_pv"]
    assert {"fp8_tensorwise-fp8_attention_on", "fp8_tensorwise-fp8_attention_off"} <= set(specs)
    keys = {specs[n].run_key for n in ("fp8_tensorwise", "fp8_attn", "fp8_tensorwise-fp8_attention_on")}
    assert len(keys) == 3
    with pytest.raises(CampaignError, match="'blocks.3.attn_qk' names no layer"):
        parse_campaign(tiny_campaign(recipes=["bf16", {"fp8_tensorwise": {"bf16_layers": ["blocks.3.attn_qk"]}}]),
                       source="c.yaml")
