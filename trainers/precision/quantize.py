"""Fake quantization (quantize, then dequantize) of one tensor, with optional counts of
saturated and flushed values for telemetry. `quantize` is the public entry point."""

from __future__ import annotations

import math

import torch

from rcpforge.trainers.precision import kernels
from rcpforge.trainers.precision.formats import ElementFormat, get_format, round_inplace_ok
from rcpforge.trainers.precision.nvfp4_variants import nvfp4_4over6, nvfp4_rowscaled
from rcpforge.trainers.precision.quantized import Counts, Quantized, factorable, round_counted, tile_factors
from rcpforge.trainers.precision.scaling import (
    Block,
    Grouped,
    block_fp32_scale,
    e8m0_scale,
    nvfp4_block_scale,
    nvfp4_global_scale,
    tensor_scale,
)
from rcpforge.trainers.recipes.operands import FOUR_OVER_SIX

SCALE_MODES = ("floor", "rceil", "fp32", "pow2", "nvfp4", "nvfp4_clamped", *FOUR_OVER_SIX, "nvfp4_rowscaled")


def quantize_with_scale(
    x: torch.Tensor, fmt: str, scale: float, *, rounding: str = "rne",
    generator: torch.Generator | None = None, counts: bool = False, in_range: bool = False,
) -> tuple[Quantized, Counts | None]:
    """Fake-quantize with a given FP32 multiplying scale (tensorwise, delayed).
    `in_range`: the scale is fmax / amax(x) for a finite amax, so no value needs the
    saturating clamp (the largest lands within FP32 rounding of the max)."""
    q, c = round_counted(x.float() * scale, fmt, rounding, generator, counts, saturate=not in_range)
    return Quantized(q, divisor=scale), c


def abs_max(x: torch.Tensor) -> float:
    """max |x| without materializing |x| (two reductions instead of a full extra pass);
    NaN if x holds a NaN."""
    return max(float(x.amax()), -float(x.amin()))


def fake_quant_factored(
    x: torch.Tensor,
    fmt: str,
    block: Block = None,
    scale_mode: str = "floor",
    rounding: str = "rne",
    generator: torch.Generator | None = None,
    counts: bool = False,
) -> tuple[Quantized, Counts | None]:
    """`quantize` in factored form, plus the counts; see there."""
    f = get_format(fmt)
    if scale_mode not in SCALE_MODES:
        raise ValueError(f"unknown scale_mode {scale_mode!r}; valid: {', '.join(SCALE_MODES)}")
    x = x.float()
    nvfp4 = scale_mode.startswith("nvfp4")
    if not counts and kernels.usable(x):
        fused = _fused(x, f, block, scale_mode, rounding, generator, nvfp4)
        if fused is not None:
            return fused, None
    x = x.contiguous()  # an operand's transposed copy arrives as a view
    if block is None and not nvfp4:
        # tensorwise: FP32 current scaling (E8M0 modes do not apply to one tensor scale)
        amax = abs_max(x)
        s = tensor_scale(amax, f.max, scale_mode == "pow2")
        in_range = math.isfinite(amax) and math.isfinite(s)
        return quantize_with_scale(x, fmt, s, rounding=rounding, generator=generator, counts=counts,
                                   in_range=in_range)
    g = Grouped(x, block if block is not None else x.shape[-1])  # nvfp4, block None: per row
    amax = g.amax()
    if scale_mode in ("fp32", "pow2"):
        s = block_fp32_scale(amax, f.max, scale_mode == "pow2")
        q, c = round_counted(g.view * s, fmt, rounding, generator, counts)
        tile = block if isinstance(block, tuple) else (1, block)
        if scale_mode == "fp32" and factorable(tile, x.shape):
            tiles = s.view(g.view.shape[0], g.view.shape[-2]) if g.dims == -1 else s.view(s.shape[0], s.shape[2])
            return Quantized(g.restore(q), **tile_factors(tiles, tile, x.shape)), c
        return Quantized(g.restore(q.div_(s)), exact=scale_mode == "pow2"), c
    if scale_mode in FOUR_OVER_SIX:
        return nvfp4_4over6(g, amax, fmt, rounding, generator, counts, scale_mode)
    if scale_mode == "nvfp4_rowscaled":
        return nvfp4_rowscaled(x, g, amax, fmt, rounding, generator, counts)
    if nvfp4:
        s_g = nvfp4_global_scale(amax.amax())
        s_b = nvfp4_block_scale(amax, s_g, clamp=scale_mode == "nvfp4_clamped")
        d = s_b * s_g
        # a block scale flushed to zero flushes its block (x / inf = 0, and 0 * 0 = 0)
        y = g.view / d.masked_fill_(d == 0, float("inf"))
        q, c = round_counted(y, fmt, rounding, generator, counts)
        return Quantized(g.restore(q.mul_(s_b)), multiplier=s_g), c
    d = e8m0_scale(amax, f, scale_mode)
    q, c = round_counted(g.view / d, fmt, rounding, generator, counts)
    return Quantized(g.restore(q.mul_(d))), c


def _fused(
    x: torch.Tensor, f: ElementFormat, block: Block, scale_mode: str, rounding: str,
    generator: torch.Generator | None, nvfp4: bool,
) -> Quantized | None:
    """fake_quant_factored on the fused kernel, bit for bit; None where it does not apply
    (pow2 tensorwise, stochastic rounding over zero padding, 2-D tiles of a tensor that
    is not 2-D)."""
    if x.dim() == 0 or (isinstance(block, tuple) and x.dim() != 2):
        return None
    if rounding not in ("rne", "sr") or scale_mode not in kernels.MODES:
        return None
    flat = x.dim() == 2  # the operands of a linear layer: no reshapes (each costs ~1 us)
    x2 = x if flat else x.reshape(-1, x.shape[-1])
    rows, cols = x2.shape
    if (scale_mode in FOUR_OVER_SIX or scale_mode == "nvfp4_rowscaled") and not x2.is_contiguous():
        # row-major tiles only: a transposed copy (a wgrad operand with no Hadamard before
        # it, as nvfp4_4over6_te's) is made contiguous, as the torch path makes it
        x2 = x2.contiguous()
        if flat:
            x = x2
    if scale_mode == "nvfp4_rowscaled" and isinstance(block, tuple):
        return None  # the torch path says why not
    if block is None and not nvfp4:
        if scale_mode == "pow2":
            return None
        mode, tile, draws = "tensor", (rows, cols), x.shape
    else:
        mode = scale_mode
        tile = (1, cols if block is None else block) if not isinstance(block, tuple) else block
        if rows % tile[0] or cols % tile[1]:
            if rounding == "sr":  # the torch path draws for the zero padding too
                return None
            draws = None
        elif isinstance(block, tuple):
            draws = (rows // tile[0], tile[0], cols // tile[1], tile[1])
        else:
            draws = (rows, cols // tile[1], tile[1])
    # the same draws, in the same order, as stochastic_round's
    u = kernels.uniform(draws, generator) if rounding == "sr" else None
    factored = mode == "fp32" and factorable(tile, x.shape)
    exact = scale_mode != "fp32" or mode == "tensor" or factored
    if tile[0] == 1 and mode != "tensor" and flat and rows > 1 and x.stride() == (1, rows):
        # the transposed copy of an operand: read in place, blocks down the columns
        r = kernels.fused_quantize_t(x, f, tile[1], mode, u=u, factored=factored)
    else:
        r = kernels.fused_quantize(x2, f, tile, mode, u=u, factored=factored)
    core = r.core if flat else r.core.view(x.shape)
    if mode == "tensor":
        return Quantized(core, divisor=r.scale)
    if mode == "nvfp4_rowscaled":
        assert r.scales is not None
        return Quantized(core, row_div=r.scales.view(*x.shape[:-1], 1))
    if nvfp4:
        return Quantized(core, multiplier=r.scale)
    if factored:
        return Quantized(core, **tile_factors(r.scales, tile, x.shape))
    return Quantized(core, exact=exact)


def quantize_delayed(x: torch.Tensor, fmt: str, scale: float) -> tuple[Quantized, float]:
    """Delayed scaling's step: quantize with the scale from the history (RNE, saturating)
    and return abs_max(x) for the history, in one fused pass where it can."""
    x = x.float()
    if kernels.usable(x) and x.dim() == 2:
        r = kernels.fused_quantize(x, get_format(fmt), (1, 1), "given", given=scale)
        return Quantized(r.core, divisor=scale), r.amax
    return quantize_with_scale(x, fmt, scale)[0], abs_max(x)


def fake_quant(
    x: torch.Tensor,
    fmt: str,
    block: Block = None,
    scale_mode: str = "floor",
    rounding: str = "rne",
    generator: torch.Generator | None = None,
    counts: bool = False,
) -> tuple[torch.Tensor, Counts | None]:
    """`quantize` plus the counts; see there."""
    q, c = fake_quant_factored(x, fmt, block, scale_mode, rounding, generator, counts)
    return q.dequant(), c


def quantize(
    x: torch.Tensor,
    fmt: str,
    *,
    block: Block = None,
    scale_mode: str = "floor",
    rounding: str = "rne",
    seed: int | None = None,
) -> torch.Tensor:
    """Quantize `x` to `fmt` (`e4m3`, `e5m2`, `e2m1`, `e2m3`, `e3m2`) and return the dequantized float32
    tensor.

    block: None for one tensorwise FP32 current scale (`fmax / amax`); an int for 1-D
    blocks along the last dimension; a pair such as (16, 16) for 2-D tiles of a 2-D
    tensor. Shapes that are not a multiple of the block are padded with zeros; a zero
    block stays zero.
    scale_mode (block scales): `floor` (OCP MX E8M0), `rceil` (NVIDIA MX E8M0), `fp32`
    (per-block `fmax / amax`), `pow2` (that rounded down to a power of two), `nvfp4`
    (two-level: FP32 global, E4M3 block scales, may go subnormal), `nvfp4_clamped`
    (block scales at least 2^-6, as torchao), `nvfp4_4over6` (each block scaled to 6 or to
    4, whichever has less squared error; arXiv 2512.02010; `nvfp4_4over6_mae`, `_256` and
    `_mae_256`: by absolute error, under the global scale amax/(256*6), or both: see
    trainers/recipes/operands.py FOUR_OVER_SIX), `nvfp4_rowscaled` (one FP32
    global scale per row instead of per tensor; 1-D blocks). With block=None only `pow2`
    changes the tensorwise scale, and the nvfp4 modes use one block scale per row.
    rounding: `rne`, or `sr` (stochastic, seeded by `seed`).
    """
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    return fake_quant(x, fmt, block, scale_mode, rounding, generator)[0]


def fake_quant_tensorwise(x: torch.Tensor, fmt: str) -> torch.Tensor:
    return fake_quant(x, fmt, None, "fp32")[0]


def mor_quantize(
    x: torch.Tensor, threshold: float, block: int | None
) -> tuple[Quantized, torch.Tensor | int, int]:
    """Mixture of Representations: E4M3 with current scaling (per tensor or per 1-D
    block), kept where the relative error ||Q - T|| / ||T|| is at most `threshold`,
    BF16 elsewhere. Returns (the operand, units kept in FP8, units). Per tensor, either
    choice is BF16-exact, so its GEMMs run as the E4M3 tensorwise recipe's or as BF16's."""
    x = x.float()
    if block is None:
        q = fake_quant_factored(x, "e4m3", None, "fp32")[0]
        err, ref = (q.dequant() - x).norm(), x.norm()
        if bool(err <= threshold * ref):  # one choice: compute only the kept form
            return q, 1, 1
        half = x.bfloat16()
        return Quantized(half.float(), _bf16=half), 0, 1
    g = Grouped(x, block)
    s = block_fp32_scale(g.amax(), 448.0)
    q = round_inplace_ok(g.view * s, "e4m3").div_(s)
    err = (q - g.view).square().sum(-1, keepdim=True)
    ref = g.view.square().sum(-1, keepdim=True)
    keep = err <= threshold**2 * ref
    out = torch.where(keep, q, g.view.bfloat16().float())
    return Quantized(g.restore(out), exact=False), keep.sum(), keep.numel()
