"""Scales: how a tensor is cut into scaling groups and what each group's scale is.

Conventions (NUMERICS.md): an FP32 scale `s` multiplies (`y = x * s`, dequant `q / s`);
an E8M0 (MX) or NVFP4 scale `d` divides (`y = x / d`, dequant `q * d`). A group whose
amax is 0, inf or NaN gets the neutral scale 1, so finite inputs never turn into NaN."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainers.precision.formats import ElementFormat, round_to_format

Block = int | tuple[int, int] | None


def _finite_positive(amax: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(amax) & (amax > 0)


def fp32_scale(amax: torch.Tensor, fmax: float, pow2: bool = False) -> torch.Tensor:
    """Current scaling `fmax / amax` (TransformerEngine); `pow2` rounds it down to a
    power of two (torchao rowwise)."""
    ok = _finite_positive(amax)
    s = torch.where(ok, fmax / torch.where(ok, amax, 1.0), 1.0)
    if pow2:
        _, e = torch.frexp(s)
        s = torch.exp2((e - 1).float())
    return s


def e8m0_scale(amax: torch.Tensor, f: ElementFormat, mode: str) -> torch.Tensor:
    """The MX block scale 2^k. FLOOR (OCP): k = floor(log2 amax) - emax_elem, elements then
    saturate. RCEIL (NVIDIA): k = ceil(log2(amax / fmax)), which never overflows.
    Exponents come from frexp, which is exact (a float8_e8m0fnu cast would round)."""
    ok = _finite_positive(amax)
    a = torch.where(ok, amax, 1.0)
    if mode == "floor":
        _, e = torch.frexp(a)  # a = m * 2^e, m in [0.5, 1): floor(log2 a) = e - 1
        k = e - 1 - f.emax
    elif mode == "rceil":
        m, e = torch.frexp(a / f.max)
        k = torch.where(m == 0.5, e - 1, e)
    else:
        raise ValueError(f"unknown MX scale mode {mode!r}; valid: floor, rceil")
    k = torch.where(ok, k.clamp(-127, 127), 0)
    return torch.exp2(k.float())


def nvfp4_block_scale(
    amax_block: torch.Tensor, global_scale: torch.Tensor, clamp: bool
) -> torch.Tensor:
    """s_b = e4m3_rne(amax_block / 6 / s_g); `clamp` keeps it at or above 2^-6 (torchao),
    otherwise it may go subnormal or to zero (TransformerEngine)."""
    ok = _finite_positive(amax_block)
    s_b = round_to_format(torch.where(ok, amax_block, 6.0 * global_scale) / 6.0 / global_scale, "e4m3")
    return s_b.clamp(min=2.0**-6) if clamp else s_b


def nvfp4_global_scale(amax: torch.Tensor) -> torch.Tensor:
    ok = _finite_positive(amax)
    return torch.where(ok, torch.where(ok, amax, 1.0) / (448.0 * 6.0), 1.0)


class Grouped:
    """A 2-D view of a tensor as scaling groups: `view` has the groups on the reduced dims
    (see `amax`), padded with zeros where the shape is not a multiple of the block."""

    def __init__(self, t: torch.Tensor, block: Block):
        self.shape = t.shape
        self.block = block
        if block is None:
            self.view, self.dims = t, None
            return
        flat = t.reshape(-1, t.shape[-1]) if t.dim() != 2 else t
        rows, cols = flat.shape
        if isinstance(block, int):
            pad = -cols % block
            flat = F.pad(flat, (0, pad)) if pad else flat
            self.view, self.dims = flat.view(rows, -1, block), (-1,)
        else:
            if t.dim() != 2:
                raise ValueError(f"2-D blocks {block} need a 2-D tensor, got shape {tuple(t.shape)}")
            b0, b1 = block
            pr, pc = -rows % b0, -cols % b1
            flat = F.pad(flat, (0, pc, 0, pr)) if (pr or pc) else flat
            self.view = flat.view(flat.shape[0] // b0, b0, flat.shape[1] // b1, b1)
            self.dims = (1, 3)
        self._padded = self.view.shape

    def amax(self) -> torch.Tensor:
        a = self.view.abs()
        return a.amax() if self.dims is None else a.amax(dim=self.dims, keepdim=True)

    def restore(self, v: torch.Tensor) -> torch.Tensor:
        if self.dims is None:
            return v
        rows, cols = (self.shape[0], self.shape[1]) if len(self.shape) == 2 else (-1, self.shape[-1])
        if isinstance(self.block, int):
            v = v.reshape(v.shape[0], -1)[:, : self.shape[-1]]
        else:
            v = v.reshape(self._padded[0] * self._padded[1], -1)[:rows, :cols]
        return v.reshape(self.shape)

