"""Real FP8 GEMMs with `torch._scaled_mm` for `fp8_tensorwise` and `fp8_rowwise` on CUDA
devices of compute capability 9.0 or more (Hopper); everything else is emulated.

The operands are cast to float8 storage with the same scales the emulation uses, so a
real GEMM differs from the emulated one only by accumulation order and output rounding.
`_scaled_mm(a, b)` wants `a` row-major and `b` column-major and takes the reciprocal
(dequantizing) scales; rowwise scales are shaped (M, 1) for `a` and (1, N) for `b`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rcpforge.trainers.precision.formats import FORMATS
from rcpforge.trainers.precision.scaling import block_fp32_scale
from rcpforge.trainers.recipes.config import RecipeConfig, same_gemms
from rcpforge.trainers.recipes.named import RECIPES

if TYPE_CHECKING:
    from rcpforge.trainers.precision.linear import QuantizedGemm

REAL_FP8_RECIPES = ("fp8_tensorwise", "fp8_rowwise")
_REAL_FP8 = {n: RECIPES[n].resolve() for n in REAL_FP8_RECIPES}


def hopper_or_newer(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0)


def real_fp8_kind(recipe: RecipeConfig) -> str | None:
    """Which of the real FP8 recipes this one's GEMMs are, by definition, not by name
    (a variant or a recipe written in the campaign file with the same operands runs
    the same real GEMMs); None for any other."""
    return next((n for n, ref in _REAL_FP8.items() if same_gemms(recipe, ref)), None)


def use_real_fp8(gemm: QuantizedGemm, x: torch.Tensor) -> bool:
    if real_fp8_kind(gemm.recipe) is None:
        return False
    if gemm.real_fp8 is not None:  # forced (tests run the CPU `_scaled_mm`)
        return gemm.real_fp8
    return hopper_or_newer(x.device)


def _cast(t: torch.Tensor, fmt: str, rowwise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """float8 data and the dequantizing scale (one, or one per row). No clamp: the scale
    is at most fmax / amax, so |t * s| <= fmax up to one float32 rounding, which the
    float8 cast rounds back to fmax (it turns to NaN only from 480 up, for E4M3). An inf
    input becomes NaN here where the emulation saturates it; the run diverges either way."""
    f = FORMATS[fmt]
    # the infinity norm is amax in one pass, without the |t| temporary; exact in t's dtype
    amax = torch.linalg.vector_norm(t, float("inf"), dim=-1 if rowwise else None, keepdim=rowwise)
    s = block_fp32_scale(amax.float(), f.max, pow2=rowwise)
    # A scale with dimensions makes a BF16 t promote to FP32 inside the multiply, with
    # no FP32 copy of t (a 0-dim FP32 scale would keep the product in BF16: a second
    # rounding). Contiguous: `_scaled_mm` wants row-major operands, t may be a transposed view.
    y = t * (s if rowwise else s.reshape(1, 1))
    return y.to(f.dtype).contiguous(), s.reciprocal()


def _transposed(cast: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """A tensorwise cast laid out for the GEMM that contracts over its other dimension:
    the same scale, the float8 data transposed (a 1-byte copy, not a new cast)."""
    data, scale = cast
    return data.t().contiguous(), scale


def _mm(a: tuple, b: tuple, rowwise: bool) -> torch.Tensor:
    """a: (M, K) data + scale per row; b: (N, K) data + scale per row -> a @ b^T."""
    (ad, asc), (bd, bsc) = a, b
    if rowwise:
        bsc = bsc.reshape(1, -1)
    out = torch._scaled_mm(ad, bd.t(), scale_a=asc, scale_b=bsc, out_dtype=torch.bfloat16)
    return out.float()


def forward(gemm: QuantizedGemm, x: torch.Tensor, w: torch.Tensor):
    """The output and what backward needs: for tensorwise scaling the float8 operands
    themselves (their scale does not depend on the orientation; a quarter of the FP32
    memory), for rowwise the high-precision operands (each GEMM scales other rows)."""
    rec = gemm.recipe
    rowwise = real_fp8_kind(rec) == "fp8_rowwise"
    xq, wq = _cast(x, rec.x.fmt, rowwise), _cast(w, rec.w.fmt, rowwise)
    out = _mm(xq, wq, rowwise)
    return out, ((x, w) if rowwise else (*xq, *wq))


def backward(gemm: QuantizedGemm, dy: torch.Tensor, saved):
    rec = gemm.recipe
    if real_fp8_kind(rec) == "fp8_rowwise":
        x, w = saved
        # dgrad dX = dY . W: contraction over the output features (W^T's rows)
        dx = _mm(_cast(dy, rec.dy.fmt, True), _cast(w.t(), rec.w.fmt, True), True)
        # wgrad dW = dY^T . X: contraction over the tokens
        dw = _mm(_cast(dy.t(), rec.dy.fmt, True), _cast(x.t(), rec.x.fmt, True), True)
        return dx, dw
    xd, xs, wd, ws = saved
    dyq = _cast(dy, rec.dy.fmt, False)
    dx = _mm(dyq, _transposed((wd, ws)), False)
    dw = _mm(_transposed(dyq), _transposed((xd, xs)), False)
    return dx, dw
