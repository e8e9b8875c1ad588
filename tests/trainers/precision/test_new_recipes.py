"""Issue 17's named recipes, in the style of test_numerics_table.py: NVFP4 4-over-6
(arXiv 2512.02010), row-scaled NVFP4 activations, the hybrid per-direction recipes, and
the backward override every quantized recipe takes. Known points computed by hand,
bit-exactness against straightforward torch references written here, the 4-over-6
property, a written recipe equal to a named one, and a few training steps each."""

from __future__ import annotations

import math

import pytest
import torch

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import CampaignError, parse_campaign
from rcpforge.trainers.precision import kernels, quantize, reference
from rcpforge.trainers.precision.linear import QuantizedGemm
from rcpforge.trainers.recipes.config import RecipeError, same_gemms
from rcpforge.trainers.recipes.resolve import resolve_recipe, validate_recipe_options
from rcpforge.trainers.tinylm.train import TinyLMTrainer
from tests.helpers.campaigns import tiny_campaign
from tests.trainers.test_tinylm import Recorder

NEW = ["nvfp4_4over6", "nvfp4_rowscaled", "mxfp8_fwd_nvfp4_bwd", "nvfp4_fwd_mxfp8_bwd"]
E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E2M1_EVEN = torch.tensor([True, False, True, False, True, False, True, False])  # mantissa bit 0


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


# --- straightforward references: float8 casts for E4M3, a nearest-grid search for E2M1 --


def _e4m3(t: torch.Tensor) -> torch.Tensor:
    return t.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float()


def _e2m1(y: torch.Tensor) -> torch.Tensor:
    """Round to nearest on the E2M1 grid, ties to the even mantissa, saturating at 6."""
    a = y.abs().clamp(max=6.0).double()
    dist = (a[..., None] - E2M1_GRID.double()).abs()
    best = dist.min(dim=-1, keepdim=True).values
    tie = (dist == best).sum(-1, keepdim=True) > 1
    pick = (dist == best) & (E2M1_EVEN | ~tie)
    return torch.copysign(E2M1_GRID[pick.float().argmax(dim=-1)], y)  # -0 stays -0


def _ref_candidate(xb: torch.Tensor, s_b: torch.Tensor, s_g: float) -> torch.Tensor:
    d = s_b * s_g
    y = xb / torch.where(d == 0, torch.inf, d)
    return _e2m1(y) * s_b * s_g


def ref_4over6(x: torch.Tensor, tile: int | tuple[int, int] = 16, error: str = "mse",
               top: float = 448.0) -> torch.Tensor:
    """NVFP4 4-over-6 block by block, from the conventions' definitions: the global scale
    amax/(top*6) (448: plain NVFP4's), both E4M3 block scales (the block amax to 6 and to
    4), and the candidate whose dequantized block has the smaller sum of squared (mse) or
    absolute (mae) error, 6 on a tie."""
    s_g = float(x.abs().amax()) / (top * 6.0)
    out = torch.empty_like(x)
    r, c = (1, tile) if isinstance(tile, int) else tile
    for i in range(0, x.shape[0], r):
        for j in range(0, x.shape[1], c):
            xb = x[i:i + r, j:j + c]
            a = xb.abs().amax()
            cost = []
            for to in (6.0, 4.0):
                q = _ref_candidate(xb, _e4m3(a / to / s_g), s_g)
                e = (q - xb).double()
                cost.append((q, (e * e if error == "mse" else e.abs()).sum()))
            (q6, e6), (q4, e4) = cost
            out[i:i + r, j:j + c] = q4 if e4 < e6 else q6
    return out

def ref_rowscaled(x: torch.Tensor) -> torch.Tensor:
    """Row-scaled NVFP4 row by row: S = 448*6/amax(row), s_b = e4m3((amax_b/6) S),
    q = e2m1(x / (s_b / S)), dequantized (q s_b) / S."""
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        row = x[i]
        amax = row.abs().amax()
        s = 2688.0 / amax if torch.isfinite(amax) and amax > 0 else torch.tensor(1.0)
        for j in range(0, x.shape[1], 16):
            xb = row[j:j + 16]
            s_b = _e4m3(xb.abs().amax() / 6.0 * s)
            d = s_b / s
            q = _e2m1(xb / torch.where(d == 0, torch.inf, d))
            out[i, j:j + 16] = (q * s_b) / s
    return out


def _blocks(n: int, seed: int) -> torch.Tensor:
    """n blocks of 16 from a mix of distributions (Gaussian, heavy-tailed, uniform,
    outlier-dominated), rows of 64 values, block amaxes spread over decades."""
    gen = torch.Generator().manual_seed(seed)
    parts = [
        torch.randn(n // 4, 16, generator=gen),
        torch.randn(n // 4, 16, generator=gen) ** 3,
        torch.rand(n // 4, 16, generator=gen) * 2 - 1,
        torch.randn(n // 4, 16, generator=gen) * (torch.rand(n // 4, 16, generator=gen) < 0.1) * 20,
    ]
    x = torch.cat(parts)
    x = x * torch.exp(torch.empty(n, 1).uniform_(-6, 6, generator=gen))
    return x.reshape(-1, 64)


# --- 1. 4-over-6 -------------------------------------------------------------------------


def test_4over6_known_points():
    """Global amax 10.5, so s_g = 10.5/2688 = 2^-8. Block [3, 2.25]: to 6 the block scale
    is 128 (d = 0.5): 2.25 -> 4.5 -> 4 -> 2.0; to 4 it is 192 (d = 0.75): 3 -> 4, 2.25 ->
    3, both exact: 4 wins. Block [3, 0.25]: to 6, 0.25 -> 0.5 exact; to 4, 0.25 -> 1/3
    -> 0.5 -> 0.375: 6 stays. The amax block: the 4-candidate's scale 672 saturates at
    448, equal to the 6-candidate: a tie keeps 6, and 10.5 round-trips."""
    x = torch.zeros(3, 16)
    x[0, 0] = 10.5
    x[1, :2] = torch.tensor([3.0, 2.25])
    x[2, :2] = torch.tensor([3.0, 0.25])
    plain = quantize(x, "e2m1", block=16, scale_mode="nvfp4")
    got = quantize(x, "e2m1", block=16, scale_mode="nvfp4_4over6")
    assert plain[:, :2].tolist() == [[10.5, 0.0], [3.0, 2.0], [3.0, 0.25]]
    assert got[:, :2].tolist() == [[10.5, 0.0], [3.0, 2.25], [3.0, 0.25]]
    assert torch.equal(got[:, 2:], torch.zeros(3, 14))


@pytest.mark.parametrize("rounding", ["rne", "sr"])
@pytest.mark.parametrize("tile", [16, (16, 16)], ids=["1x16", "16x16"])
def test_4over6_never_has_more_block_error_than_plain_nvfp4(tile, rounding):
    """On 4096 random blocks (tiles): the kept candidate's squared error is at most plain
    NVFP4's on every block, strictly less on many (4 wins), and equal where 6 is kept
    (the 6-candidate is plain NVFP4 bit for bit). With stochastic rounding, against
    plain NVFP4 rounded with the same draws (the first candidate's)."""
    x = _blocks(4096, seed=11)
    kw = {"block": tile, "rounding": rounding, "seed": 3 if rounding == "sr" else None}
    plain = quantize(x, "e2m1", scale_mode="nvfp4", **kw)
    four6 = quantize(x, "e2m1", scale_mode="nvfp4_4over6", **kw)

    def block_err(q):
        e = (q.double() - x.double()) ** 2
        if isinstance(tile, tuple):
            return e.reshape(x.shape[0] // 16, 16, x.shape[1] // 16, 16).sum((1, 3))
        return e.reshape(x.shape[0], -1, 16).sum(-1)

    e_plain, e46 = block_err(plain), block_err(four6)
    assert (e46 <= e_plain).all()
    better = e46 < e_plain
    assert better.float().mean() > 0.05, better.float().mean()  # 4 wins on a good share of blocks
    kept6 = ~better
    if isinstance(tile, int):
        view = lambda t: t.reshape(x.shape[0], -1, 16)  # noqa: E731
        assert torch.equal(view(four6)[kept6], view(plain)[kept6])
    assert (e46.sum() < e_plain.sum()).item()


@pytest.mark.parametrize("tile", [16, (16, 16)], ids=["1x16", "16x16"])
def test_4over6_is_bit_exact_against_the_reference(tile):
    x = _blocks(512, seed=12)[:64]
    x[3, 5] = 0.0
    x[7] = 0.0  # a block (and a row) of zeros
    got = quantize(x, "e2m1", block=tile, scale_mode="nvfp4_4over6")
    assert _same_bits(got, ref_4over6(x, tile))


def test_4over6_keeps_the_2d_weight_transpose_property_and_no_nan():
    w = _blocks(512, seed=13)[:48, :48].contiguous()
    q = quantize(w, "e2m1", block=(16, 16), scale_mode="nvfp4_4over6")
    assert torch.equal(q.t(), quantize(w.t().contiguous(), "e2m1", block=(16, 16), scale_mode="nvfp4_4over6"))
    for special in (math.inf, math.nan):
        y = w.clone()
        y[2, 3] = special
        qy = quantize(y, "e2m1", block=16, scale_mode="nvfp4_4over6")
        assert not torch.isnan(qy[torch.isfinite(y)]).any()


# --- 2. row-scaled NVFP4 -----------------------------------------------------------------


def test_rowscaled_known_points():
    """Rows with amaxes 1e3 and 1e-3: per-tensor NVFP4's block scale for the small row,
    e4m3(1e-3/6 / (1e3/2688)) = e4m3(4.5e-4), is below E4M3's smallest subnormal 2^-9, so
    that row flushes to zero; row-scaled gives each row's amax block the scale 448, the
    row amax round-trips, and 4e-4 (2.4 in units of amax/6) rounds to 2 -> amax/3."""
    x = torch.zeros(2, 32)
    x[0, 3], x[1, 5], x[1, 6] = 1e3, 1e-3, 4e-4
    plain = quantize(x, "e2m1", block=16, scale_mode="nvfp4")
    rows = quantize(x, "e2m1", block=16, scale_mode="nvfp4_rowscaled")
    assert torch.equal(plain[1], torch.zeros(32))
    assert rows[0, 3].item() == pytest.approx(1e3, rel=1e-6)
    assert rows[1, 5].item() == pytest.approx(1e-3, rel=1e-6)
    assert rows[1, 6].item() == pytest.approx(1e-3 / 3, rel=1e-6)


def test_rowscaled_is_bit_exact_against_the_reference_and_factors_per_row():
    x = _blocks(1024, seed=14)[:40] * torch.exp(torch.linspace(-8, 8, 40))[:, None]
    x[9] = 0.0
    got = quantize(x, "e2m1", block=16, scale_mode="nvfp4_rowscaled")
    assert _same_bits(got, ref_rowscaled(x))
    from rcpforge.trainers.precision.quantize import fake_quant_factored

    fq, _ = fake_quant_factored(x, "e2m1", 16, "nvfp4_rowscaled")
    # the core (q * s_b) is BF16-exact and S one divisor per row: a GEMM applies it to its output
    assert fq.exact and fq.output_factored and fq.row_div is not None and fq.row_div.shape == (40, 1)
    assert torch.equal(fq.core.bfloat16().float(), fq.core)
    with pytest.raises(ValueError, match="1-D blocks"):
        quantize(x, "e2m1", block=(16, 16), scale_mode="nvfp4_rowscaled")


def test_rowscaled_recipe_scales_only_x():
    r = resolve_recipe("nvfp4_rowscaled")
    assert r.x.scale_mode == "nvfp4_rowscaled" and r.w.scale_mode == r.dy.scale_mode == "nvfp4"
    assert r.w.block == (16, 16) and r.dy.rounding == "sr" and r.hadamard_wgrad


# --- 3. the hybrid recipes --------------------------------------------------------------


def test_hybrid_recipes_put_each_direction_in_its_format():
    a = resolve_recipe("mxfp8_fwd_nvfp4_bwd")
    assert (a.x.fmt, a.x.scaling, a.w.scaling) == ("e4m3", "mx", "mx")
    assert (a.dy.scaling, a.w_dgrad.block, a.x_wgrad.scaling) == ("nvfp4", (16, 16), "nvfp4")
    assert a.dy.rounding == "sr" and a.hadamard_wgrad
    b = resolve_recipe("nvfp4_fwd_mxfp8_bwd")
    assert (b.x.scaling, b.w.block) == ("nvfp4", (16, 16))
    assert {q.scaling for q in (b.dy, b.w_dgrad, b.x_wgrad)} == {"mx"} and not b.hadamard_wgrad
    assert resolve_recipe("nvfp4_fwd_mxfp8_bwd", {"scale_mode": "rceil"}).w_dgrad.scale_mode == "rceil"
    assert not resolve_recipe("mxfp8_fwd_nvfp4_bwd", {"hadamard": False}).hadamard_wgrad
    # an option of the other direction's format is not one of these (it would change nothing)
    with pytest.raises(RecipeError, match="hadamard"):
        resolve_recipe("nvfp4_fwd_mxfp8_bwd", {"hadamard": False})
    with pytest.raises(RecipeError, match="weight_2d"):
        resolve_recipe("mxfp8_fwd_nvfp4_bwd", {"weight_2d": False})


def _run_gemm(recipe, x, w, dy, seed=0):
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    out = QuantizedGemm(recipe, seed=seed)(x, w, None)
    out.backward(dy)
    return out.detach(), x.grad, w.grad


def _operands(seed=20, tokens=64, d_in=64, d_out=48):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, d_in, generator=gen).bfloat16().float()
    w = torch.randn(d_out, d_in, generator=gen) * 0.1
    dy = torch.randn(tokens, d_out, generator=gen).bfloat16().float() * 1e-2
    return x, w, dy


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "torch"])
def test_nvfp4_fwd_mxfp8_bwd_quantizes_w_for_dgrad_along_the_output_features(fused, monkeypatch):
    """W's dgrad copy is MXFP8 in 1x32 blocks along dgrad's contraction (W's output
    features), quantized from the FP32 master W, not NVFP4's forward copy transposed."""
    monkeypatch.setattr(kernels, "_enabled", fused)
    x, w, dy = _operands()
    _, dx, _ = _run_gemm(resolve_recipe("nvfp4_fwd_mxfp8_bwd"), x, w, dy)
    dyq = quantize(dy, "e4m3", block=32, scale_mode="floor")
    wt = quantize(w.t().contiguous(), "e4m3", block=32, scale_mode="floor")  # (d_in, d_out): blocks over d_out
    expect = (dyq.bfloat16() @ wt.bfloat16().t()).float()
    assert _same_bits(dx, expect)


# --- 4. a written recipe equal to a named one --------------------------------------------

NV = {"format": "e2m1", "scaling": "nvfp4"}
WRITTEN = {
    "nvfp4_4over6": {
        "x": {**NV, "scale": "nvfp4_4over6"}, "w": {**NV, "tile": [16, 16], "scale": "nvfp4_4over6"},
        "dy": {**NV, "scale": "nvfp4_4over6", "rounding": "sr"}, "wgrad": {"transform": "hadamard"},
    },
    "nvfp4_rowscaled": {
        "x": {**NV, "scale": "nvfp4_rowscaled"}, "w": {**NV, "tile": [16, 16]}, "dy": {**NV, "rounding": "sr"},
        "wgrad": {"transform": "hadamard"},
    },
    "mxfp8_fwd_nvfp4_bwd": {
        "x": {"format": "e4m3", "scaling": "mx"}, "w": {"format": "e4m3", "scaling": "mx"},
        "dy": {**NV, "rounding": "sr"}, "w_dgrad": {**NV, "tile": [16, 16]}, "x_wgrad": NV,
        "wgrad": {"transform": "hadamard"},
    },
    # W's dgrad copy in 1-D blocks: quantized along W's output features (dgrad's contraction)
    "nvfp4_fwd_mxfp8_bwd": {
        "x": NV, "w": {**NV, "tile": [16, 16]}, "dy": {"format": "e4m3", "scaling": "mx"},
        "w_dgrad": {"format": "e4m3", "scaling": "mx"}, "x_wgrad": {"format": "e4m3", "scaling": "mx"},
    },
}


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_a_written_recipe_equal_to_a_named_new_one_gives_the_same_gemm_results(name):
    mine = resolve_recipe(f"my_{name}", validate_recipe_options(f"my_{name}", WRITTEN[name]))
    named = resolve_recipe(name)
    assert same_gemms(mine, named)
    x, w, dy = _operands(seed=21)
    got, want = _run_gemm(mine, x, w, dy, seed=5), _run_gemm(named, x, w, dy, seed=5)
    assert all(_same_bits(a, b) for a, b in zip(got, want, strict=True))
    # and the definition matters: another scale type for x differs
    other = dict(WRITTEN[name], x={**NV, "scale": "nvfp4_clamped"})
    plain = resolve_recipe("mine", validate_recipe_options("mine", other))
    assert not same_gemms(plain, named)


def test_a_written_recipe_equal_to_a_named_new_one_trains_bit_identically():
    data = tiny_campaign(
        recipes=["nvfp4_4over6", {"my_4over6": WRITTEN["nvfp4_4over6"]}], seeds=1,
        budget={"max_tokens": 512, "eval_every_tokens": 256},
        target={"metric": "eval_excess_loss", "mode": "min", "value": -1.0},
        hparams={16: {"lr": 0.01, "warmup_tokens": 256}, 64: {"lr": 0.02, "warmup_tokens": 256}},
    )
    curves = {}
    for spec in (s for s in expand(parse_campaign(data)) if s.batch_size == 16):
        rec = Recorder()
        TinyLMTrainer().train(spec, rec)
        curves[spec.recipe] = [p.metrics["eval_loss"] for p in rec.points]
    assert len(curves["my_4over6"]) == 2 and curves["my_4over6"] == curves["nvfp4_4over6"]


def test_a_written_rowscaled_operand_refuses_a_tile():
    bad = dict(WRITTEN["nvfp4_rowscaled"], w={**NV, "tile": [16, 16], "scale": "nvfp4_rowscaled"})
    with pytest.raises(RecipeError, match=r"recipes\.lab\.w\.tile"):
        validate_recipe_options("lab", bad)


# --- 5. the backward override -------------------------------------------------------------


def _bf16_reference(x, w, dy):
    """The bf16 recipe's GEMM on a CPU (trainers/precision/reference.py), its gradients."""
    xb = x.bfloat16().requires_grad_(True)
    wp = w.clone().requires_grad_(True)
    out = reference.linear(xb, wp)
    out.backward(dy.bfloat16())
    return xb.grad.float(), wp.grad


@pytest.mark.parametrize("name", ["fp8_tensorwise", "mxfp8", "nvfp4", *NEW])
def test_high_precision_backward_gives_the_gradients_of_bf16(name):
    x, w, dy = _operands(seed=22)
    _, dx, dw = _run_gemm(resolve_recipe(name, {"backward": "high_precision"}), x, w, dy)
    ref_dx, ref_dw = _bf16_reference(x, w, dy)
    assert _same_bits(dx, ref_dx) and _same_bits(dw, ref_dw)
    _, qdx, qdw = _run_gemm(resolve_recipe(name), x, w, dy)
    assert not torch.equal(qdx, dx) and not torch.equal(qdw, dw)  # the default quantizes


@pytest.mark.parametrize("name", ["fp8_tensorwise", "fp8_rowwise", "nvfp4", *NEW])
def test_dequantized_backward_uses_the_forward_copies_and_an_unquantized_dy(name):
    x, w, dy = _operands(seed=23)
    recipe = resolve_recipe(name, {"backward": "dequantized"})
    _, dx, dw = _run_gemm(recipe, x, w, dy)
    gemm = QuantizedGemm(recipe)
    xq, wq = gemm.quantize(x, "x"), gemm.quantize(w, "w")  # the forward's copies (RNE: no draws)
    dyb = dy.double()
    scale = dy.abs().max().item() * max(x.abs().max().item(), w.abs().max().item()) * x.shape[0]
    assert (dx.double() - dyb @ wq.double()).abs().max().item() <= 2**-7 * scale
    assert (dw.double() - dyb.t() @ xq.double()).abs().max().item() <= 2**-7 * scale
    _, qdx, qdw = _run_gemm(resolve_recipe(name), x, w, dy)
    assert not torch.equal(qdx, dx) and not torch.equal(qdw, dw)  # dY quantized by default
    _, hdx, hdw = _run_gemm(resolve_recipe(name, {"backward": "high_precision"}), x, w, dy)
    assert not torch.equal(hdx, dx) and not torch.equal(hdw, dw)  # W and x are the quantized ones


def test_the_backward_option_stays_out_of_run_keys_at_its_default():
    assert "backward" not in validate_recipe_options("nvfp4", {})
    assert validate_recipe_options("nvfp4", {"backward": "quantized"}) == validate_recipe_options("nvfp4", {})
    assert validate_recipe_options("fp8_tensorwise", {"backward": "dequantized"})["backward"] == "dequantized"
    assert "backward" not in validate_recipe_options("mine", WRITTEN["nvfp4_rowscaled"])
    data = tiny_campaign(recipes=["bf16", "nvfp4", {"hp": {"base": "nvfp4", "backward": "high_precision"}}])
    keys = {s.recipe: s.run_key for s in expand(parse_campaign(data))}
    assert keys["hp"] != keys["nvfp4"]
    with pytest.raises(CampaignError, match=r"recipes\.bf16\.backward"):
        parse_campaign(tiny_campaign(recipes=[{"bf16": {"backward": "high_precision"}}]))
    with pytest.raises(CampaignError, match="backward"):
        parse_campaign(tiny_campaign(recipes=["bf16", {"nvfp4": {"backward": "fp32"}}]))


def test_a_non_default_backward_leaves_the_real_fp8_path():
    from rcpforge.trainers.precision import gpu

    assert gpu.real_fp8_kind(resolve_recipe("fp8_tensorwise")) == "fp8_tensorwise"
    assert gpu.real_fp8_kind(resolve_recipe("fp8_tensorwise", {"backward": "high_precision"})) is None


# --- 6. a few training steps of each -------------------------------------------------------


def test_each_new_recipe_and_backward_override_trains_a_few_steps_without_nan():
    """4 steps of 16 x 8 tokens each (two evals): every new recipe, and the two backward
    overrides on two of them (test_every_recipe_trains_and_logs_telemetry also runs each
    new recipe with telemetry)."""
    recipes = [*NEW, {"hp": {"base": "nvfp4_4over6", "backward": "high_precision"}},
               {"dq": {"base": "mxfp8_fwd_nvfp4_bwd", "backward": "dequantized"}}]
    data = tiny_campaign(
        recipes=recipes, seeds=1, budget={"max_tokens": 512, "eval_every_tokens": 256},
        target={"metric": "eval_excess_loss", "mode": "min", "value": -1.0},
        hparams={16: {"lr": 0.01, "warmup_tokens": 256}, 64: {"lr": 0.02, "warmup_tokens": 256}},
    )
    losses = {}
    for spec in (s for s in expand(parse_campaign(data)) if s.batch_size == 16):
        rec = Recorder()
        result = TinyLMTrainer().train(spec, rec)
        assert result.tokens_trained == 512 and len(rec.points) == 2, spec.recipe
        losses[spec.recipe] = [p.metrics["eval_loss"] for p in rec.points]
        assert all(math.isfinite(v) for v in losses[spec.recipe]), (spec.recipe, losses[spec.recipe])
    assert set(losses) == {*NEW, "hp", "dq"}
    assert losses["hp"] != losses["nvfp4_4over6"]
