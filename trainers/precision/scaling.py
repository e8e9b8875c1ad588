"""Scales: how a tensor is cut into scaling groups and what each group's scale is.

Conventions (docs/numerics.md): an FP32 scale `s` multiplies (`y = x * s`, dequant `q / s`);
an E8M0 (MX) or NVFP4 scale `d` divides (`y = x / d`, dequant `q * d`). Groups whose
amax is 0, inf or NaN never turn finite inputs into NaN. The scale arithmetic works on
the float32 bit patterns where it can: on small tensors the number of torch ops, not
the arithmetic, is what a training step pays for."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from rcpforge.trainers.precision.formats import ElementFormat, round_inplace_ok

Block = int | tuple[int, int] | None
_F32_MAX = float(np.finfo(np.float32).max)
_MANTISSA = 0x7FFFFF


def tensor_scale(amax: float, fmax: float, pow2: bool = False) -> float:
    """Tensorwise current scaling `fmax / amax` in float32 (TransformerEngine); an amax
    of 0, inf or NaN gives 1; `pow2` rounds the scale down to a power of two."""
    if not (math.isfinite(amax) and amax > 0):
        return 1.0
    s = float(np.float32(fmax) / np.float32(amax))
    if pow2:
        s = 2.0 ** math.floor(math.log2(s))
    return s


def block_fp32_scale(amax: torch.Tensor, fmax: float, pow2: bool = False) -> torch.Tensor:
    """Per-group `fmax / amax`. A non-finite amax counts as fmax (scale 1); a zero amax
    gives a large finite scale, harmless since its group is all zeros."""
    a = torch.nan_to_num(amax, nan=fmax, posinf=fmax).clamp_(min=fmax / _F32_MAX)
    s = fmax / a
    if pow2:  # clear the mantissa bits: round down to a power of two
        s = (s.view(torch.int32) & ~_MANTISSA).view(torch.float32)
    return s


def e8m0_scale(amax: torch.Tensor, f: ElementFormat, mode: str) -> torch.Tensor:
    """The MX block scale 2^k, from the float32 exponent bits (exact; a float8_e8m0fnu
    cast would round). FLOOR (OCP): k = floor(log2 amax) - emax_elem, elements then
    saturate. RCEIL (NVIDIA): k = ceil(log2(amax / fmax)), which never overflows.
    k is kept in [-126, 127] (normal float32; torchao also lifts 2^-127 to 2^-126)."""
    if mode == "floor":
        biased = (amax.view(torch.int32) >> 23) - f.emax
    elif mode == "rceil":
        bits = (amax / f.max).view(torch.int32)
        biased = (bits >> 23) + ((bits & _MANTISSA) != 0)
    else:
        raise ValueError(f"unknown MX scale mode {mode!r}; valid: floor, rceil")
    # non-finite amax has exponent bits 255: a huge scale, finite values go to zero
    return (biased.clamp_(1, 254) << 23).view(torch.float32)


def nvfp4_global_scale(amax: torch.Tensor | float) -> float:
    a = float(amax)
    return a / (448.0 * 6.0) if math.isfinite(a) and a > 0 else 1.0


def nvfp4_block_scale(amax_block: torch.Tensor, global_scale: float, clamp: bool) -> torch.Tensor:
    """s_b = e4m3_rne(amax_block / 6 / s_g); `clamp` keeps it at or above 2^-6 (torchao),
    otherwise it may go subnormal or to zero (TransformerEngine). A NaN amax counts as
    the largest block scale."""
    a = torch.nan_to_num(amax_block, nan=_F32_MAX)
    s_b = round_inplace_ok(a / 6.0 / global_scale, "e4m3")
    return s_b.clamp_(min=2.0**-6) if clamp else s_b


class Grouped:
    """A view of a tensor as scaling groups: `view` has the groups on the reduced dims
    (see `amax`), padded with zeros where the shape is not a multiple of the block."""

    def __init__(self, t: torch.Tensor, block: Block):
        self.shape = t.shape
        self.block = block
        flat = t.reshape(-1, t.shape[-1]) if t.dim() != 2 else t
        self._rows, self._cols = rows, cols = flat.shape
        if isinstance(block, int):
            pad = -cols % block
            flat = F.pad(flat, (0, pad)) if pad else flat
            self.view, self.dims = flat.view(rows, -1, block), -1
        else:
            if t.dim() != 2:
                raise ValueError(f"2-D blocks {block} need a 2-D tensor, got shape {tuple(t.shape)}")
            b0, b1 = block
            pr, pc = -rows % b0, -cols % b1
            flat = F.pad(flat, (0, pc, 0, pr)) if (pr or pc) else flat
            self.view = flat.view(flat.shape[0] // b0, b0, flat.shape[1] // b1, b1)
            self.dims = (1, 3)
        self._padded = flat.shape

    def amax(self) -> torch.Tensor:
        a = self.view.abs()
        if self.dims == -1:
            if a.shape[-1] <= 16:  # CPU reductions over 16 contiguous floats are slow
                rows, nb, b = a.shape
                return F.max_pool1d(a.view(1, rows, nb * b), b).view(rows, nb, 1)
            return a.amax(dim=-1, keepdim=True)
        # tiles: reduce across rows first (vectorized over columns), then within rows
        return a.amax(dim=1, keepdim=True).amax(dim=3, keepdim=True)

    def restore(self, v: torch.Tensor) -> torch.Tensor:
        v = v.reshape(self._padded)
        if tuple(self._padded) != (self._rows, self._cols):
            v = v[: self._rows, : self._cols]
        return v.reshape(self.shape)
