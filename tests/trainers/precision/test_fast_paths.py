"""The speed-ups of the emulated recipes give the same bits as the plain computation:
RNE by the magic-number add against torch's float8 casts and an E2M1 grid search
(every float32 pattern class: ties, subnormals, signed zeros, non-finite), two GEMM
operands quantized stacked against one at a time, and the shared BF16 / dequantized
copies against fresh ones. The heap setting of training processes takes effect."""

from __future__ import annotations

import sys

import pytest
import torch

from rcpforge.trainers.precision import kernels
from rcpforge.trainers.precision.formats import round_inplace_ok, round_to_format
from rcpforge.trainers.precision.heap import keep_freed_memory
from rcpforge.trainers.precision.linear import QuantizedGemm, _mm
from rcpforge.trainers.recipes.named import RECIPES
from rcpforge.trainers.recipes.resolve import resolve_recipe

QUANTIZED = [n for n, r in RECIPES.items() if not r.is_reference]


def _patterns() -> torch.Tensor:
    """float32 values of every exponent from 2^-40 to 2^20 with random mantissas, half of
    them cut to few mantissa bits (exact grid points and exact ties for every format),
    both signs, plus zeros, float32 subnormals, huge values, inf and NaN."""
    gen = torch.Generator().manual_seed(0)
    exps = torch.arange(-40, 21).repeat_interleave(2048)
    mant = torch.randint(0, 1 << 23, exps.shape, generator=gen, dtype=torch.int32)
    mant[::2] &= ~((1 << 20) - 1)  # 3 mantissa bits: E4M3 grid points and ties of E5M2/E2M1
    mant[1::4] &= ~((1 << 19) - 1)  # 4 bits: ties of E4M3
    bits = ((exps.int() + 127) << 23) | mant
    v = bits.view(torch.float32)
    special = torch.tensor([0.0, 1e-45, 1e-40, 3e38, float("inf"), float("nan")])
    return torch.cat([v, special, -v, -special])


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    nan = torch.isnan(a)
    same_nan = torch.equal(nan, torch.isnan(b))
    return same_nan and torch.equal(a[~nan].view(torch.int32), b[~nan].view(torch.int32))


@pytest.mark.parametrize(
    "fmt,dtype,fmax", [("e4m3", torch.float8_e4m3fn, 448.0), ("e5m2", torch.float8_e5m2, 57344.0)]
)
def test_rne_matches_torch_float8_cast_bit_for_bit(fmt, dtype, fmax):
    x = _patterns()
    oracle = x.clamp(-fmax, fmax).to(dtype).float()  # torch's cast rounds to nearest even
    assert _same_bits(round_to_format(x, fmt), oracle)
    assert _same_bits(round_inplace_ok(x.clone(), fmt), oracle)
    assert _same_bits(round_inplace_ok(x.clamp(-fmax, fmax), fmt, saturate=False), oracle)


def test_rne_e2m1_matches_nearest_grid_value_ties_to_even():
    x = _patterns()
    x = x[torch.isfinite(x)]
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    even = torch.tensor([True, False, True, False, True, False, True, False])  # mantissa bit 0
    a = x.abs().clamp(max=6.0).double()
    dist = (a[:, None] - grid.double()[None, :]).abs()
    best = dist.min(dim=1, keepdim=True).values
    # among the nearest grid values prefer the even one (there are at most two)
    candidates = (dist == best) & (even[None, :] | ((dist == best).sum(1, keepdim=True) == 1))
    oracle = grid[candidates.float().argmax(dim=1)].copysign(x)
    assert _same_bits(round_to_format(x, "e2m1"), oracle)


@pytest.mark.parametrize("fused", [False, True], ids=["torch-stacked", "fused-in-place"])
@pytest.mark.parametrize("name", QUANTIZED)
def test_stacked_operands_quantize_as_one_at_a_time(name, fused, monkeypatch):
    """On the torch path the two operands are stacked and quantized in one call; the
    fused kernel takes each in place (transposed views too). Either way each operand
    gets what it gets alone."""
    monkeypatch.setattr(kernels, "_enabled", fused)
    gemm = QuantizedGemm(resolve_recipe(name))
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(200, 96, generator=gen) * 3, torch.randn(80, 96, generator=gen) * 0.01
    # contiguous operands, and transposed views as the dgrad and wgrad copies are
    pairs = [(a, b), (a, b.t().contiguous().t()), (a.t().contiguous().t(), b.t().contiguous().t())]
    for (wa, wb), (a, b) in zip((("x", "w"), ("dy", "w"), ("dy", "x")), pairs):
        if not gemm._stackable(wa, wb):
            continue
        qa, qb = gemm.quantize_pair(a, wa, b, wb)
        for got, t, which in ((qa, a, wa), (qb, b, wb)):
            alone = gemm.quantize_factored(t.contiguous(), which)
            assert _same_bits(got.core, alone.core) and _same_bits(got.dequant(), alone.dequant())
            assert got.exact == alone.exact
            if not fused:  # the halves of the stacked result are contiguous rows
                assert got.core.stride() == alone.core.stride()
            if alone.exact:
                assert _same_bits(got.bf16().float(), alone.core.bfloat16().float())
    stackable = {n for n in QUANTIZED if QuantizedGemm(resolve_recipe(n))._stackable("x", "w")}
    assert stackable == {"fp8_rowwise", "fp8_rowwise_gw_hp", "mxfp8", "mxfp4", "mxfp8_fwd_nvfp4_bwd",
                         "mxfp4_sr_rht", "mxfp4_dethad", "mxfp4_dethad16", "mxfp6"}  # per-row x and W


@pytest.mark.parametrize("name", QUANTIZED)
def test_shared_copies_equal_fresh_ones(name):
    gemm = QuantizedGemm(resolve_recipe(name))
    x = torch.randn(64, 48, generator=torch.Generator().manual_seed(2))
    q = gemm.quantize_factored(x, "x")
    deq, t = q.dequant(), q.t()
    fresh = q.core / q.divisor * q.multiplier
    if q.row_div is not None:  # per-row FP32 scales (1-D blocks spanning the row)
        fresh = fresh / q.row_div
    assert _same_bits(deq, fresh) and _same_bits(t.dequant(), fresh.t())
    if q.exact:
        assert _same_bits(q.bf16().t().float(), q.core.t().bfloat16().float())
        assert t.bf16().stride() == q.core.t().bfloat16().stride()  # the GEMM sees the same layout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_training_processes_keep_freed_memory():
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True  # idempotent


def test_per_row_fp32_scales_are_applied_to_the_gemm_output():
    """docs/numerics.md: per-row FP32 factors move to the GEMM output, so the GEMM runs on the
    BF16-exact grid values: channelwise weights (one scale per output channel), 1x128
    blocks that span a row, and 128x128 tiles that span the rows or the columns (the
    latter after the transpose that the dgrad GEMM takes)."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(96, 64, generator=gen)
    cw = QuantizedGemm(resolve_recipe("fp8_channelwise")).quantize_factored(w, "w")
    assert cw.output_factored and cw.row_div is not None and cw.row_div.shape == (96, 1)
    assert _same_bits(cw.core, cw.core.bfloat16().float())  # grid values only
    block = QuantizedGemm(resolve_recipe("fp8_block", {"use_f32_scales": True}))
    x = block.quantize_factored(torch.randn(40, 64, generator=gen), "x")
    assert x.output_factored and x.row_div.shape == (40, 1)
    wide = block.quantize_factored(torch.randn(64, 256, generator=gen), "w")  # 1 x 2 tiles
    assert not wide.output_factored and wide.t().output_factored
    assert _same_bits(wide.t().dequant(), wide.dequant().t())
    # a 1x128 block that does not span the row stays dequantized (FP32 GEMM)
    assert not block.quantize_factored(torch.randn(40, 256, generator=gen), "x").exact


@pytest.mark.parametrize("threshold,expect", [(1e9, "fp8_tensorwise"), (1e-12, "bf16")])
def test_mor_per_tensor_runs_each_gemm_as_the_representation_it_chose(threshold, expect):
    """A tensor MoR keeps in E4M3 multiplies as the E4M3 tensorwise recipe's forward;
    one it keeps in BF16 as BF16 autocast's GEMM (BF16 operands and output)."""
    gen = torch.Generator().manual_seed(4)
    x, w = torch.randn(32, 64, generator=gen), torch.randn(48, 64, generator=gen)
    mor = QuantizedGemm(resolve_recipe("mor", {"threshold": threshold}))
    xq, wq = mor.quantize_pair(x, "x", w, "w")
    got = _mm(xq, wq)
    if expect == "bf16":
        want = (x.bfloat16() @ w.bfloat16().t()).float()
    else:
        ref = QuantizedGemm(resolve_recipe("fp8_tensorwise"))
        want = _mm(*ref.quantize_pair(x, "x", w, "w"))
    assert _same_bits(got, want)
