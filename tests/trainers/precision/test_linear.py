"""The quantized linear: gradients against a float64 reference per recipe, each GEMM's
operands quantized along its contraction dimension (oracle: the public `quantize` and a
float64 GEMM), delayed scaling, MoR, telemetry, the real-FP8 path, per-layer options."""

from __future__ import annotations

import pytest
import torch

from rcpforge.trainers.precision import quantize, reference
from rcpforge.trainers.precision.hadamard import hadamard_last_dim
from rcpforge.trainers.precision.layers import gemm_factory, residual_quantizer
from rcpforge.trainers.precision.linear import QuantizedGemm
from rcpforge.trainers.precision.telemetry import Telemetry
from rcpforge.trainers.recipes.named import RECIPES
from rcpforge.trainers.recipes.resolve import resolve_recipe

QUANTIZED = [n for n, r in RECIPES.items() if not r.is_reference]
# max relative rounding error of one element, 2^-(m+1) (docs/numerics.md, check 4)
UNIT = {"e4m3": 2.0**-4, "e5m2": 2.0**-3, "e2m1": 2.0**-2, "e2m3": 2.0**-4, "e3m2": 2.0**-3}  # 2^-(mantissa bits + 1)


def _problem(seed=0, m=256, k=96, n=80):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen) * 0.1,
            torch.randn(n, generator=gen), torch.randn(m, n, generator=gen))


def _run(gemm, x, w, b, dy):
    x, w, b = (t.clone().requires_grad_() for t in (x, w, b))
    out = gemm(x, w, b)
    out.backward(dy)
    return out.detach(), x.grad, w.grad, b.grad


def _rel(a, ref):
    return float((a.double() - ref).norm() / ref.norm())


def _bound(recipe, *operands):
    """Error bound of a GEMM whose operands carry these formats' rounding errors (an
    element rounded stochastically may move a whole ulp: twice the RNE bound)."""
    total = 0.0
    for q in operands:
        if q.scaling == "mor":
            total += UNIT["e4m3"]
        else:
            total += UNIT[q.fmt] * (2 if q.rounding == "sr" else 1)
    return total


@pytest.mark.parametrize("name", QUANTIZED)
def test_gradients_match_float64_within_the_formats_error(name):
    recipe = resolve_recipe(name)
    x, w, b, dy = _problem()
    out, gx, gw, gb = _run(QuantizedGemm(recipe), x, w, b, dy)
    xd, wd, bd = (t.double().requires_grad_() for t in (x, w, b))
    ref = torch.nn.functional.linear(xd, wd, bd)
    ref.backward(dy.double())
    assert _rel(out - b, (ref - bd).detach()) < _bound(recipe, recipe.x, recipe.w)
    assert _rel(gx, xd.grad) < _bound(recipe, recipe.dy, recipe.w)
    # a BF16 wgrad: two operands and the output rounded to BF16 (2^-9 each)
    wgrad_bound = 3 * 2.0**-9 if recipe.wgrad_hp else _bound(recipe, recipe.dy, recipe.x)
    assert _rel(gw, wd.grad) < wgrad_bound
    assert _rel(gb, bd.grad) < 1e-6  # the bias gradient is not quantized
    # and the operands really were quantized
    assert _rel(gx, xd.grad) > 1e-3


def _oracle_grads(x, w, dy, fwd, dgrad, wgrad):
    """float64 GEMMs of operands quantized by the public quantize(): each fn maps an
    operand laid out with its contraction dimension last."""
    out = fwd[0](x).double() @ fwd[1](w).double().t()
    dx = dgrad[0](dy).double() @ dgrad[1](w.t().contiguous()).double().t()
    dw = wgrad[0](dy.t().contiguous()).double() @ wgrad[1](x.t().contiguous()).double().t()
    return out, dx, dw


def _q(fmt, block=None, mode="floor", rounding="rne"):
    return lambda t: quantize(t, fmt, block=block, scale_mode=mode, rounding=rounding)


def _rowwise(t):
    return quantize(t, "e4m3", block=t.shape[-1], scale_mode="pow2")


ORACLES = {
    "fp8_tensorwise": ((_q("e4m3"), _q("e4m3")), (_q("e5m2"), _q("e4m3")), (_q("e5m2"), _q("e4m3"))),
    "fp8_rowwise": ((_rowwise, _rowwise),) * 3,
    # torchao rowwise_with_gw_hp: W tensorwise (power-of-two scale) for dgrad, wgrad in BF16
    "fp8_rowwise_gw_hp": (
        (_rowwise, _rowwise), (_rowwise, _q("e4m3", None, "pow2")), (lambda t: t.bfloat16().float(),) * 2,
    ),
    "mxfp8": ((_q("e4m3", 32),) * 2,) * 3,
    "mxfp4": ((_q("e2m1", 32),) * 2,) * 3,
    "fp8_block": (  # TransformerEngine's default: power-of-two block scales
        (_q("e4m3", 128, "pow2"), _q("e4m3", (128, 128), "pow2")),
        (_q("e4m3", 128, "pow2"), _q("e4m3", (128, 128), "pow2")),
        (_q("e4m3", 128, "pow2"),) * 2,
    ),
    "fp8_block use_f32_scales": (
        (_q("e4m3", 128, "fp32"), _q("e4m3", (128, 128), "fp32")),
        (_q("e4m3", 128, "fp32"), _q("e4m3", (128, 128), "fp32")),
        (_q("e4m3", 128, "fp32"),) * 2,
    ),
    "nvfp4": (
        (_q("e2m1", 16, "nvfp4"), _q("e2m1", (16, 16), "nvfp4")),
        (_q("e2m1", 16, "nvfp4"), _q("e2m1", (16, 16), "nvfp4")),
        (lambda t: _q("e2m1", 16, "nvfp4")(hadamard_last_dim(t)),) * 2,
    ),
}


@pytest.mark.parametrize("name", list(ORACLES))
def test_each_gemm_quantizes_along_its_contraction_dimension(name):
    recipe, _, option = name.partition(" ")
    options = {"stochastic_rounding": False} if name == "nvfp4" else {option: True} if option else {}
    x, w, b, dy = _problem(1, m=128, k=64, n=48)
    out, gx, gw, _ = _run(QuantizedGemm(resolve_recipe(recipe, options)), x, w, b, dy)
    ref_out, ref_dx, ref_dw = _oracle_grads(x, w, dy, *ORACLES[name])
    for got, ref in ((out - b, ref_out), (gx, ref_dx), (gw, ref_dw)):
        # the same operands, FP32 accumulation; BF16-exact operands run as a BF16 GEMM
        # whose output is rounded to BF16 (2^-9). A wrongly oriented operand copy is off
        # by its format's error instead (above 1e-2).
        assert _rel(got, ref) < 3e-3, name


def test_nvfp4_stochastic_rounding_is_seeded_per_layer():
    x, w, b, dy = _problem(2)
    recipe = resolve_recipe("nvfp4")
    a = _run(QuantizedGemm(recipe, seed=1), x, w, b, dy)[2]
    again = _run(QuantizedGemm(recipe, seed=1), x, w, b, dy)[2]
    other = _run(QuantizedGemm(recipe, seed=2), x, w, b, dy)[2]
    assert torch.equal(a, again) and not torch.equal(a, other)


def test_delayed_scaling_uses_the_history_and_keeps_the_scale_on_zero_amax():
    recipe = resolve_recipe("fp8_delayed", {"margin": 1, "amax_history_len": 2})
    gemm = QuantizedGemm(recipe)
    x = torch.tensor([[1.0, -3.0, 0.5]])
    first = gemm.quantize(x, "x")  # scale 1 before any history: plain E4M3 rounding
    assert torch.equal(first, x)  # 1, -3 and 0.5 are E4M3 values
    state = gemm._delayed["x"]
    assert state.scale == pytest.approx(448 / 3 / 2)
    gemm.quantize(torch.zeros(1, 3), "x")  # a zero amax is not recorded
    assert state.scale == pytest.approx(448 / 3 / 2)
    big = torch.tensor([[0.1, 9.0, 0.0]])
    tel = Telemetry()
    tel.active = True
    gemm.telemetry = tel
    out = gemm.quantize(big, "x")  # quantized with the old scale: 9 * 448/6 > 448 saturates
    assert out[0, 1].item() == pytest.approx(448 / (448 / 6))
    summary = tel.summary()
    assert summary["telemetry.x.saturated_frac"] == pytest.approx(1 / 3)
    gemm.quantize(torch.tensor([[1.0, 1.0, 1.0]]), "x")  # history of 2: max(9, 1)
    assert state.scale == pytest.approx(448 / 9 / 2)
    gemm.quantize(torch.tensor([[1.0, 1.0, 1.0]]), "x")  # 9 rolled out of the history
    assert state.scale == pytest.approx(448 / 1 / 2)


def test_telemetry_flushed_fraction_matches_an_oracle():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(64, 64, generator=gen) * torch.exp2(torch.empty(64, 64).uniform_(-12, 0, generator=gen))
    tel = Telemetry()
    tel.active = True
    gemm = QuantizedGemm(resolve_recipe("mxfp4"), telemetry=tel)
    gemm.quantize(x, "x")
    flushed = ((quantize(x, "e2m1", block=32) == 0) & (x != 0)).float().mean().item()
    summary = tel.summary()
    assert flushed > 0.05
    assert summary["telemetry.x.flushed_frac"] == pytest.approx(flushed)
    assert summary["telemetry.x.saturated_frac"] >= 0.0
    assert tel.summary() == {}  # a summary starts the count over
    tel.active = False
    gemm.quantize(x, "x")
    assert tel.summary() == {}  # nothing counted on inactive steps


def test_mor_keeps_fp8_where_the_relative_error_is_small():
    gen = torch.Generator().manual_seed(4)
    # blocks of different shapes: Gaussian, uniform, heavy-tailed
    parts = [torch.randn(8, 128, generator=gen), torch.rand(8, 128, generator=gen),
             torch.randn(8, 128, generator=gen) ** 5]
    x = torch.cat(parts, 1)
    q = quantize(x, "e4m3", block=128, scale_mode="fp32")
    blocks = lambda t: t.view(8, 3, 128)  # noqa: E731
    r = (blocks(q - x).norm(dim=-1) / blocks(x).norm(dim=-1))
    tau = r.median().item()
    tel = Telemetry()
    tel.active = True
    gemm = QuantizedGemm(resolve_recipe("mor", {"granularity": "block", "threshold": tau}), "l0", tel)
    out = gemm.quantize(x, "x")
    keep = (r <= tau)[..., None]
    expect = torch.where(keep, blocks(q), blocks(x.bfloat16().float())).view(8, 384)
    assert torch.equal(out, expect)
    summary = tel.summary()
    assert summary["telemetry.mor.fp8_frac"] == pytest.approx(keep.float().mean().item())
    assert summary["telemetry.mor.fp8_frac.l0"] == summary["telemetry.mor.fp8_frac"]
    # per tensor: all or nothing
    tiny = QuantizedGemm(resolve_recipe("mor", {"threshold": 1e-6}))
    assert torch.equal(tiny.quantize(x, "x"), x.bfloat16().float())
    loose = QuantizedGemm(resolve_recipe("mor", {"threshold": 0.5}))
    assert torch.equal(loose.quantize(x, "x"), quantize(x, "e4m3", block=None))


@pytest.mark.parametrize("name", ["fp8_tensorwise", "fp8_rowwise"])
def test_real_fp8_gemm_path_agrees_with_the_emulation(name, monkeypatch):
    """The `torch._scaled_mm` path (CUDA cc >= 9.0) run on CPU, where torch 2.13 supports
    tensorwise and rowwise scaling: same operands, so only the BF16 output rounding
    differs."""
    recipe = resolve_recipe(name)
    x, w, b, dy = _problem(5, m=64, k=64, n=32)
    calls = []
    scaled_mm = torch._scaled_mm
    monkeypatch.setattr(torch, "_scaled_mm", lambda *a, **k: calls.append(1) or scaled_mm(*a, **k))
    # torch 2.13's CPU build has this path (the version pyproject.toml pins): an error
    # here is a failure, never a skip
    real = _run(QuantizedGemm(recipe, real_fp8=True), x, w, b, dy)
    assert len(calls) == 3  # forward, dgrad and wgrad ran as real FP8 GEMMs
    emulated = _run(QuantizedGemm(recipe), x, w, b, dy)
    assert len(calls) == 3
    for r, e in zip(real[:3], emulated[:3]):
        assert _rel(r, e.double()) < 2**-7


def test_bf16_last_blocks_and_residual_ablation():
    made = {}
    factory = gemm_factory(resolve_recipe("nvfp4", {"bf16_last_blocks": 1}), n_blocks=3)
    for name in ("blocks.0.qkv", "blocks.1.fc2", "blocks.2.qkv", "blocks.2.fc1"):
        made[name] = factory(name)
    assert isinstance(made["blocks.0.qkv"], QuantizedGemm) and isinstance(made["blocks.1.fc2"], QuantizedGemm)
    assert made["blocks.2.qkv"] is reference.linear
    assert residual_quantizer(resolve_recipe("fp8_tensorwise")) is None
    res = residual_quantizer(resolve_recipe("fp8_tensorwise", {"quantize_residual": True}))
    x = torch.randn(2, 8, 64, requires_grad=True)
    y = res(x)
    assert torch.equal(y.detach(), quantize(x.detach().reshape(16, 64), "e4m3").reshape(2, 8, 64))
    y.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))  # straight through
    ref = residual_quantizer(resolve_recipe("bf16", {"quantize_residual": True}))
    assert torch.equal(ref(x).detach(), x.detach().bfloat16().float())


@pytest.mark.parametrize("rowwise", [False, True])
def test_real_fp8_cast_of_a_bf16_activation_equals_the_cast_of_its_fp32_copy(rowwise):
    """The real path casts BF16 activations without an FP32 copy; the product with the
    scale must still be formed in FP32 (one rounding, to float8), as the emulation does."""
    from rcpforge.trainers.precision import gpu

    x = (torch.randn(64, 96, generator=torch.Generator().manual_seed(2)) * 37).bfloat16()
    for fmt in ("e4m3", "e5m2"):
        data, scale = gpu._cast(x, fmt, rowwise)
        ref_data, ref_scale = gpu._cast(x.float(), fmt, rowwise)
        assert data.dtype == ref_data.dtype and torch.equal(data.view(torch.uint8), ref_data.view(torch.uint8))
        assert torch.equal(scale, ref_scale)
        # and it is the emulation's grid: dequantized, what `quantize` gives (up to the
        # FP32 rounding of multiplying by 1/s instead of dividing by s)
        deq = data.float() * scale
        ref = quantize(x.float(), fmt, block=x.shape[-1] if rowwise else None,
                       scale_mode="pow2" if rowwise else "fp32")
        assert torch.allclose(deq, ref, rtol=2**-22, atol=0)


def test_rowwise_gw_hp_quantizes_the_dgrad_weight_tensorwise():
    """torchao's rowwise_with_gw_hp takes a tensorwise (power-of-two) copy of W for the
    dgrad GEMM, not per-row scales. Power-of-two scales change nothing for normal E4M3
    values, so the difference shows on input features 2^22 smaller than the largest:
    one tensor scale pushes them below E4M3's smallest value, per-row scales do not."""
    x, w, b, dy = _problem(3, m=128, k=64, n=48)
    w = w * torch.exp2(2.0 * (torch.arange(64) % 12))
    small = torch.arange(64) % 12 == 0  # the input features (dX columns) at 1x
    gx = _run(QuantizedGemm(resolve_recipe("fp8_rowwise_gw_hp")), x, w, b, dy)[1]
    tensorwise = _rowwise(dy).double() @ quantize(w, "e4m3", scale_mode="pow2").double()
    per_row = _rowwise(dy).double() @ _rowwise(w.t().contiguous()).double().t()
    assert _rel(gx, tensorwise) < 3e-3
    # the small features flush to zero under one tensor scale; per row they survive
    assert torch.count_nonzero(gx[:, small]) == 0 and torch.count_nonzero(tensorwise[:, small]) == 0
    assert torch.count_nonzero(per_row[:, small]) == per_row[:, small].numel()
