"""The NVFP4 variants of issue 17: Four Over Six (each block scaled to 6 or to 4,
whichever has less error; issue 33: which error, and the global scale's E4M3 max, by
convention) and row-scaled NVFP4 (one FP32 global scale per row),
as `quantize`'s scale modes `nvfp4_4over6` and `nvfp4_rowscaled` compute them on the
torch path."""

from __future__ import annotations

import math

import torch

from rcpforge.trainers.precision.formats import get_format, round_inplace_ok, round_to_format, stochastic_round_with
from rcpforge.trainers.precision.quantized import Counts, Quantized, counts_of, round_counted
from rcpforge.trainers.precision.scaling import Grouped, nvfp4_block_scale
from rcpforge.trainers.recipes.operands import FOUR_OVER_SIX


def _nvfp4_candidate(g: Grouped, s_b: torch.Tensor, s_g: float, fmt: str, rounding: str,
                     u: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """One NVFP4 quantization of the blocks under block scales s_b: (the rounded grid
    values, their scaled inputs y)."""
    d = s_b * s_g
    y = g.view / d.masked_fill_(d == 0, float("inf"))
    if rounding == "sr":
        assert u is not None
        return stochastic_round_with(y, get_format(fmt), u), y
    return round_to_format(y, fmt), y


def nvfp4_4over6(
    g: Grouped, amax: torch.Tensor, fmt: str, rounding: str, generator: torch.Generator | None, counts: bool,
    mode: str = "nvfp4_4over6",
) -> tuple[Quantized, Counts | None]:
    """NVFP4 "Four Over Six" (arXiv 2512.02010): each block (or tile) quantized under one
    FP32 global scale s_g = amax/(M*6) twice, with the E4M3 block scale mapping the block
    amax to 6, e4m3_rne(amax_b/6/s_g), and with e4m3_rne(amax_b/4/s_g), mapping it to 4;
    each block keeps the candidate whose dequantized values (q * s_b * s_g) have the
    smaller error against the input, summed over the block in float64 (as the fused
    kernel sums them), the 6-candidate on a tie. Stochastic rounding rounds both
    candidates with the same draws. `mode` (operands.FOUR_OVER_SIX) sets the error and M:

    - M = 448 (nvfp4_4over6, rcpforge's default): s_g is plain NVFP4's, so the
      6-candidate is plain NVFP4 bit for bit and no block has more error (of the kind
      that picks) than under it; the 4-candidate's scale saturates at 448 for blocks
      above 2/3 of the tensor's amax (then both candidates are the same).
    - M = 256 (the paper's reference code and TransformerEngine's default): the
      4-candidate's scale (at most 384) always fits E4M3, but s_g is 448/256 times plain
      NVFP4's, so the 6-candidate is no longer plain NVFP4 (its block scales are coarser
      relative to the block amax: at most 256).
    - error mse: the sum of squared errors (the paper's selection); mae: of absolute
      errors, TransformerEngine's default (the mean over a block of fixed size picks alike)."""
    error, top = FOUR_OVER_SIX[mode]
    a_all = float(amax.amax())
    s_g = a_all / (top * 6.0) if math.isfinite(a_all) and a_all > 0 else 1.0
    a = torch.nan_to_num(amax, nan=float(torch.finfo(torch.float32).max))
    s6 = nvfp4_block_scale(amax, s_g, clamp=False)
    s4 = round_inplace_ok(a / 4.0 / s_g, "e4m3")
    u = (torch.rand(g.view.shape, generator=generator, dtype=torch.float32, device=g.view.device)
         if rounding == "sr" else None)
    dims = g.dims if isinstance(g.dims, tuple) else (-1,)
    q6, y6 = _nvfp4_candidate(g, s6, s_g, fmt, rounding, u)
    q4, y4 = _nvfp4_candidate(g, s4, s_g, fmt, rounding, u)

    def err(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        d = (q * s * s_g - g.view).double()
        return (d.square() if error == "mse" else d.abs()).sum(dims, keepdim=True)

    four = err(q4, s4) < err(q6, s6)
    core = torch.where(four, q4 * s4, q6 * s6)
    c = counts_of(torch.where(four, y4, y6), fmt, torch.where(four, q4, q6)) if counts else None
    return Quantized(g.restore(core), multiplier=s_g), c


def nvfp4_row_encode_scale(amax_row: torch.Tensor) -> torch.Tensor:
    """The row-scaled NVFP4 global encode scale S = 448*6 / amax(row) in float32, 1 for
    an amax of 0, inf or NaN (TransformerEngine's encode-scale convention, per row)."""
    ok = torch.isfinite(amax_row) & (amax_row > 0)
    return torch.where(ok, 2688.0 / torch.where(ok, amax_row, 1.0), 1.0)


def nvfp4_rowscaled(
    x: torch.Tensor, g: Grouped, amax: torch.Tensor, fmt: str, rounding: str,
    generator: torch.Generator | None, counts: bool,
) -> tuple[Quantized, Counts | None]:
    """NVFP4 with one FP32 global scale per row (along the last dimension) instead of one
    per tensor: S = 448*6/amax(row), block scale s_b = e4m3_rne(amax_b / 6 * S) (may go
    subnormal, as TransformerEngine), element q = e2m1(x / (s_b / S)), dequantized
    q * s_b / S. The core q * s_b is BF16-exact and S a per-row divisor, so a GEMM that
    contracts along the rows applies S to its output."""
    if isinstance(g.block, tuple):
        raise ValueError("row-scaled NVFP4 takes 1-D blocks (block=16), not 2-D tiles")
    s = nvfp4_row_encode_scale(amax.amax(dim=1, keepdim=True))  # (rows, 1, 1)
    a = torch.nan_to_num(amax, nan=float(torch.finfo(torch.float32).max))
    s_b = round_inplace_ok(a / 6.0 * s, "e4m3")
    d = s_b / s
    y = g.view / d.masked_fill_(d == 0, float("inf"))
    q, c = round_counted(y, fmt, rounding, generator, counts)
    return Quantized(g.restore(q.mul_(s_b)), row_div=s.reshape(*x.shape[:-1], 1)), c
