"""Fake quantization (quantize, then dequantize) of one tensor, with optional counts of
saturated and flushed values for telemetry. `quantize` is the public entry point."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainers.precision.formats import get_format, round_to_format
from trainers.precision.scaling import (
    Block,
    Grouped,
    e8m0_scale,
    fp32_scale,
    nvfp4_block_scale,
    nvfp4_global_scale,
)

SCALE_MODES = ("floor", "rceil", "fp32", "pow2", "nvfp4", "nvfp4_clamped")


@dataclass
class Counts:
    """Values of one quantization: saturated (clipped to the format's max, or not
    finite) and flushed (nonzero before, zero after)."""

    saturated: torch.Tensor
    flushed: torch.Tensor
    total: int


def _round(y, fmt, rounding, generator, want_counts) -> tuple[torch.Tensor, Counts | None]:
    q = round_to_format(y, fmt, rounding, generator)
    if not want_counts:
        return q, None
    f = get_format(fmt)
    # saturated: would have rounded above the max without the clamp (or not finite)
    limit = f.max + 2.0 ** (f.emax - f.mbits - 1)
    counts = Counts(
        saturated=(~(y.abs() <= limit)).sum() - torch.isnan(y).sum(),
        flushed=((q == 0) & (y != 0)).sum(),
        total=y.numel(),
    )
    return q, counts


def quantize_with_scale(
    x: torch.Tensor, fmt: str, scale: torch.Tensor, *, rounding: str = "rne",
    generator: torch.Generator | None = None, counts: bool = False,
) -> tuple[torch.Tensor, Counts | None]:
    """Fake-quantize with a given FP32 multiplying scale (delayed scaling)."""
    y = x.float() * scale
    q, c = _round(y, fmt, rounding, generator, counts)
    return q.div_(scale), c


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
    f = get_format(fmt)
    if scale_mode not in SCALE_MODES:
        raise ValueError(f"unknown scale_mode {scale_mode!r}; valid: {', '.join(SCALE_MODES)}")
    x = x.float()
    if block is None and not scale_mode.startswith("nvfp4"):
        # tensorwise: FP32 current scaling (E8M0 modes do not apply to one tensor scale)
        return quantize_with_scale(
            x, fmt, fp32_scale(x.abs().amax(), f.max, scale_mode == "pow2"),
            rounding=rounding, generator=generator, counts=counts,
        )
    g = Grouped(x, block)
    amax = g.amax()
    if scale_mode in ("fp32", "pow2"):
        s = fp32_scale(amax, f.max, scale_mode == "pow2")
        q, c = _round(g.view * s, fmt, rounding, generator, counts)
        return g.restore(q.div_(s)), c
    if scale_mode in ("floor", "rceil"):
        d = e8m0_scale(amax, f, scale_mode)
    else:
        s_g = nvfp4_global_scale(x.abs().amax())
        d = nvfp4_block_scale(amax, s_g, clamp=scale_mode == "nvfp4_clamped") * s_g
    # a block scale that flushed to zero flushes its block
    y = torch.where(d > 0, g.view / torch.where(d > 0, d, 1.0), 0.0)
    q, c = _round(y, fmt, rounding, generator, counts)
    return g.restore(q.mul_(d)), c


def quantize(
    x: torch.Tensor,
    fmt: str,
    *,
    block: Block = None,
    scale_mode: str = "floor",
    rounding: str = "rne",
    seed: int | None = None,
) -> torch.Tensor:
    """Quantize `x` to `fmt` (`e4m3`, `e5m2`, `e2m1`) and return the dequantized float32
    tensor.

    block: None for one tensorwise FP32 current scale (`fmax / amax`); an int for 1-D
    blocks along the last dimension; a pair such as (16, 16) for 2-D tiles of a 2-D
    tensor. Shapes that are not a multiple of the block are padded with zeros.
    scale_mode (block scales): `floor` (OCP MX E8M0), `rceil` (NVIDIA MX E8M0), `fp32`
    (per-block `fmax / amax`), `pow2` (that rounded down to a power of two), `nvfp4`
    (two-level: FP32 global, E4M3 block scales, may go subnormal), `nvfp4_clamped`
    (block scales at least 2^-6, as torchao). With block=None only `pow2` changes the
    tensorwise scale; `nvfp4` applies its global scale alone.
    rounding: `rne`, or `sr` (stochastic, seeded by `seed`).
    """
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    return fake_quant(x, fmt, block, scale_mode, rounding, generator)[0]


def fake_quant_tensorwise(x: torch.Tensor, fmt: str) -> torch.Tensor:
    return fake_quant(x, fmt, None, "fp32")[0]


def mor_quantize(
    x: torch.Tensor, threshold: float, block: int | None
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Mixture of Representations: E4M3 with current scaling (per tensor or per 1-D
    block), kept where the relative error ||Q - T|| / ||T|| is at most `threshold`,
    BF16 elsewhere. Returns (values, units kept in FP8, units)."""
    x = x.float()
    if block is None:
        q = fake_quant(x, "e4m3", None, "fp32")[0]
        err, ref = (q - x).norm(), x.norm()
        keep = err <= threshold * ref
        out = torch.where(keep, q, x.bfloat16().float())
        return out, keep.sum(), 1
    g = Grouped(x, block)
    s = fp32_scale(g.amax(), 448.0)
    q = round_to_format(g.view * s, "e4m3").div_(s)
    err = (q - g.view).square().sum(-1, keepdim=True)
    ref = g.view.square().sum(-1, keepdim=True)
    keep = err <= threshold**2 * ref
    out = torch.where(keep, q, g.view.bfloat16().float())
    return g.restore(out), keep.sum(), keep.numel()
