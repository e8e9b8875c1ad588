"""Element formats and per-tensor current scaling (fake-quant: quantize, dequantize).

torch's float8 casts round to nearest even; casting to E5M2 does not saturate, so every
value is clamped to the format's finite range first (NUMERICS.md)."""

from __future__ import annotations

import torch

FP8_DTYPES: dict[str, tuple[torch.dtype, float]] = {
    "e4m3": (torch.float8_e4m3fn, 448.0),
    "e5m2": (torch.float8_e5m2, 57344.0),
}


def cast_saturating(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """Round x (already scaled) to the FP8 grid with saturation; returns float32."""
    dtype, fmax = FP8_DTYPES[fmt]
    return x.float().clamp(-fmax, fmax).to(dtype).float()


def tensorwise_scale(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """scale = fmt_max / amax(x); an amax of 0, inf or NaN gives scale 1."""
    fmax = FP8_DTYPES[fmt][1]
    amax = x.detach().abs().amax().float()
    ok = torch.isfinite(amax) & (amax > 0)
    return torch.where(ok, fmax / torch.where(ok, amax, 1.0), torch.ones_like(amax))


def fake_quant_tensorwise(x: torch.Tensor, fmt: str) -> torch.Tensor:
    scale = tensorwise_scale(x, fmt)
    return cast_saturating(x.float() * scale, fmt) / scale
