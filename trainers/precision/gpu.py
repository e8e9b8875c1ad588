"""Real FP8 GEMMs with `torch._scaled_mm` for `fp8_tensorwise` and `fp8_rowwise` on CUDA
devices of compute capability 9.0 or more (Hopper); everything else is emulated.

The operands are cast to float8 storage with the same scales the emulation uses, so a
real GEMM differs from the emulated one only by accumulation order and output rounding.
`_scaled_mm(a, b)` wants `a` row-major and `b` column-major and takes the reciprocal
(dequantizing) scales; rowwise scales are shaped (M, 1) for `a` and (1, N) for `b`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trainers.precision.formats import FORMATS
from trainers.precision.scaling import block_fp32_scale

if TYPE_CHECKING:
    from trainers.precision.linear import QuantizedGemm

REAL_FP8_RECIPES = ("fp8_tensorwise", "fp8_rowwise")


def hopper_or_newer(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0)


def use_real_fp8(gemm: QuantizedGemm, x: torch.Tensor) -> bool:
    if gemm.recipe.name not in REAL_FP8_RECIPES:
        return False
    if gemm.real_fp8 is not None:  # forced (tests run the CPU `_scaled_mm`)
        return gemm.real_fp8
    return hopper_or_newer(x.device)


def _cast(t: torch.Tensor, fmt: str, rowwise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """float8 data and the dequantizing scale (one, or one per row)."""
    f = FORMATS[fmt]
    amax = t.abs().amax(dim=-1, keepdim=True) if rowwise else t.abs().amax()
    s = block_fp32_scale(amax.float(), f.max, pow2=rowwise)
    data = (t.float() * s).clamp_(-f.max, f.max).to(f.dtype)
    return data, s.reciprocal()


def _mm(a: tuple, b: tuple, rowwise: bool) -> torch.Tensor:
    """a: (M, K) data + scale per row; b: (N, K) data + scale per row -> a @ b^T."""
    (ad, asc), (bd, bsc) = a, b
    if rowwise:
        bsc = bsc.reshape(1, -1)
    out = torch._scaled_mm(ad, bd.t(), scale_a=asc, scale_b=bsc, out_dtype=torch.bfloat16)
    return out.float()


def forward(gemm: QuantizedGemm, x: torch.Tensor, w: torch.Tensor):
    rec = gemm.recipe
    rowwise = rec.name == "fp8_rowwise"
    out = _mm(_cast(x, rec.x.fmt, rowwise), _cast(w, rec.w.fmt, rowwise), rowwise)
    return out, (x, w)


def backward(gemm: QuantizedGemm, dy: torch.Tensor, saved):
    x, w = saved
    rec = gemm.recipe
    rowwise = rec.name == "fp8_rowwise"
    # dgrad dX = dY . W: contraction over the output features (W^T's rows)
    dx = _mm(_cast(dy, rec.dy.fmt, rowwise), _cast(w.t().contiguous(), rec.w.fmt, rowwise), rowwise)
    # wgrad dW = dY^T . X: contraction over the tokens
    dw = _mm(
        _cast(dy.t().contiguous(), rec.dy.fmt, rowwise),
        _cast(x.t().contiguous(), rec.x.fmt, rowwise),
        rowwise,
    )
    return dx, dw
