"""Fake quantization (quantize, then dequantize) of one tensor, with optional counts of
saturated and flushed values for telemetry. `quantize` is the public entry point."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from trainers.precision import kernels
from trainers.precision.formats import (
    ElementFormat,
    get_format,
    round_inplace_ok,
    round_to_format,
    stochastic_round_with,
)
from trainers.precision.scaling import (
    Block,
    Grouped,
    block_fp32_scale,
    e8m0_scale,
    nvfp4_block_scale,
    nvfp4_global_scale,
    tensor_scale,
)

SCALE_MODES = ("floor", "rceil", "fp32", "pow2", "nvfp4", "nvfp4_clamped", "nvfp4_4over6", "nvfp4_rowscaled")


@dataclass
class Counts:
    """Values of one quantization: saturated (clipped to the format's max, or not
    finite) and flushed (nonzero before, zero after)."""

    saturated: torch.Tensor
    flushed: torch.Tensor
    total: int


def _counts(y: torch.Tensor, fmt: str, q: torch.Tensor) -> Counts:
    f = get_format(fmt)
    # saturated: would have rounded above the max without the clamp (or not finite)
    limit = f.max + 2.0 ** (f.emax - f.mbits - 1)
    return Counts(
        saturated=(~(y.abs() <= limit)).sum() - torch.isnan(y).sum(),
        flushed=((q == 0) & (y != 0)).sum(),
        total=y.numel(),
    )


def _round(
    y, fmt, rounding, generator, want_counts, saturate=True
) -> tuple[torch.Tensor, Counts | None]:
    if rounding == "rne" and not want_counts:
        return round_inplace_ok(y, fmt, saturate), None  # y is a temporary: round it in place
    q = round_to_format(y, fmt, rounding, generator)
    return q, (_counts(y, fmt, q) if want_counts else None)


@dataclass
class Quantized:
    """A fake-quantized tensor as `core / divisor * multiplier / row_div / col_div`.
    With `exact`, `core` is representable in BF16 (grid values times power-of-two or
    E4M3 block scales), and the FP32 factors that are constant along a GEMM's
    contraction (per tensor, or per row: `row_div`) can be applied to the GEMM's output
    instead (NUMERICS.md, "emulating without losing anything"); `col_div` (per column)
    is constant along the contraction only after a transpose. Otherwise `core` is the
    FP32 dequantized tensor and the factors are 1."""

    core: torch.Tensor
    divisor: float = 1.0
    multiplier: float = 1.0
    exact: bool = True
    row_div: torch.Tensor | None = None  # (rows, 1) FP32 scales, one per row
    col_div: torch.Tensor | None = None  # (1, cols)
    # `core` cast to BF16 and the dequantized tensor, each made once: the forward and
    # wgrad GEMMs (or dgrad and wgrad) share an operand
    _bf16: torch.Tensor | None = field(default=None, repr=False, compare=False)
    _deq: torch.Tensor | None = field(default=None, repr=False, compare=False)

    @property
    def output_factored(self) -> bool:
        """A GEMM contracting over the last dimension can run on the BF16 core with all
        factors applied to its output."""
        return self.exact and self.col_div is None

    def bf16(self) -> torch.Tensor:
        if self._bf16 is None:
            self._bf16 = self.core.bfloat16()
        return self._bf16

    def dequant(self) -> torch.Tensor:
        if self._deq is None:
            out = self.core
            if self.divisor != 1.0:
                out = out / self.divisor
            if self.multiplier != 1.0:
                out = out * self.multiplier
            if self.row_div is not None:
                out = out / self.row_div
            if self.col_div is not None:
                out = out / self.col_div
            self._deq = out
        return self._deq

    def split(self, rows: int) -> tuple[Quantized, Quantized]:
        """The first `rows` rows and the rest (each contiguous when `core` is)."""
        def part(sl: slice) -> Quantized:
            return Quantized(
                self.core[sl], self.divisor, self.multiplier, self.exact,
                None if self.row_div is None else self.row_div[sl], self.col_div,
                None if self._bf16 is None else self._bf16[sl], None if self._deq is None else self._deq[sl],
            )
        return part(slice(None, rows)), part(slice(rows, None))

    def t(self) -> Quantized:
        def t(v: torch.Tensor | None) -> torch.Tensor | None:
            return None if v is None else v.t()
        return Quantized(self.core.t(), self.divisor, self.multiplier, self.exact,
                         t(self.col_div), t(self.row_div), t(self._bf16), t(self._deq))


def _tile_factors(scales: torch.Tensor, tile: tuple[int, int], shape: torch.Size) -> dict:
    """Per-tile FP32 scales (tile rows x tile columns) of a `_factorable` tiling as
    factors of the grid values: one scale (a divisor), one per row (tiles span the
    columns) or one per column (tiles span the rows)."""
    (n_rows, n_cols), (rows, cols) = scales.shape, shape
    if n_rows == 1 and n_cols == 1:
        return {"divisor": float(scales)}
    if n_cols == 1:
        return {"row_div": scales.repeat_interleave(tile[0], 0)[:rows] if tile[0] > 1 else scales}
    if n_rows == 1:
        return {"col_div": scales.repeat_interleave(tile[1], 1)[:, :cols] if tile[1] > 1 else scales}
    raise ValueError(f"{n_rows}x{n_cols} tile scales vary along both dimensions: not factorable")


def _factorable(tile: tuple[int, int], shape) -> bool:
    return len(shape) == 2 and (tile[1] >= shape[1] or tile[0] >= shape[0])


def quantize_with_scale(
    x: torch.Tensor, fmt: str, scale: float, *, rounding: str = "rne",
    generator: torch.Generator | None = None, counts: bool = False, in_range: bool = False,
) -> tuple[Quantized, Counts | None]:
    """Fake-quantize with a given FP32 multiplying scale (tensorwise, delayed).
    `in_range`: the scale is fmax / amax(x) for a finite amax, so no value needs the
    saturating clamp (the largest lands within FP32 rounding of the max)."""
    q, c = _round(x.float() * scale, fmt, rounding, generator, counts, saturate=not in_range)
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
        q, c = _round(g.view * s, fmt, rounding, generator, counts)
        tile = block if isinstance(block, tuple) else (1, block)
        if scale_mode == "fp32" and _factorable(tile, x.shape):
            tiles = s.view(g.view.shape[0], g.view.shape[-2]) if g.dims == -1 else s.view(s.shape[0], s.shape[2])
            return Quantized(g.restore(q), **_tile_factors(tiles, tile, x.shape)), c
        return Quantized(g.restore(q.div_(s)), exact=scale_mode == "pow2"), c
    if scale_mode == "nvfp4_4over6":
        return _nvfp4_4over6(g, amax, fmt, rounding, generator, counts)
    if scale_mode == "nvfp4_rowscaled":
        return _nvfp4_rowscaled(x, g, amax, fmt, rounding, generator, counts)
    if nvfp4:
        s_g = nvfp4_global_scale(amax.amax())
        s_b = nvfp4_block_scale(amax, s_g, clamp=scale_mode == "nvfp4_clamped")
        d = s_b * s_g
        # a block scale flushed to zero flushes its block (x / inf = 0, and 0 * 0 = 0)
        y = g.view / d.masked_fill_(d == 0, float("inf"))
        q, c = _round(y, fmt, rounding, generator, counts)
        return Quantized(g.restore(q.mul_(s_b)), multiplier=s_g), c
    d = e8m0_scale(amax, f, scale_mode)
    q, c = _round(g.view / d, fmt, rounding, generator, counts)
    return Quantized(g.restore(q.mul_(d))), c


# --- issue 17: NVFP4 4-over-6 and row-scaled NVFP4 -----------------------------------


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


def _nvfp4_4over6(
    g: Grouped, amax: torch.Tensor, fmt: str, rounding: str, generator: torch.Generator | None, counts: bool,
) -> tuple[Quantized, Counts | None]:
    """NVFP4 "Four Over Six" (arXiv 2512.02010): each block (or tile) quantized under the
    NVFP4 global scale s_g = amax/(448*6) twice, with the E4M3 block scale of plain NVFP4,
    e4m3_rne(amax_b/6/s_g), and with e4m3_rne(amax_b/4/s_g) (which maps the block amax to
    4; it saturates at 448 for blocks above 2/3 of the tensor's amax); each block keeps
    the candidate whose dequantized values (q * s_b * s_g) have the smaller sum of
    squared error against the input, the 6-candidate on a tie (the paper's reference
    selection; the errors are summed in float64, as the fused kernel sums them).
    Stochastic rounding rounds both candidates with the same draws. The
    6-candidate is plain NVFP4 bit for bit, so no block has more error than under it.
    Unlike the paper's reference code (fouroversix `quantize_to_fp4`), which takes the
    global scale as amax/(256*6) so that the 4-candidate's scale (at most 384) always
    fits E4M3, the global scale here stays plain NVFP4's."""
    s_g = nvfp4_global_scale(amax.amax())
    a = torch.nan_to_num(amax, nan=float(torch.finfo(torch.float32).max))
    s6 = nvfp4_block_scale(amax, s_g, clamp=False)
    s4 = round_inplace_ok(a / 4.0 / s_g, "e4m3")
    u = (torch.rand(g.view.shape, generator=generator, dtype=torch.float32, device=g.view.device)
         if rounding == "sr" else None)
    dims = g.dims if isinstance(g.dims, tuple) else (-1,)
    q6, y6 = _nvfp4_candidate(g, s6, s_g, fmt, rounding, u)
    q4, y4 = _nvfp4_candidate(g, s4, s_g, fmt, rounding, u)
    err6 = (q6 * s6 * s_g - g.view).double().square().sum(dims, keepdim=True)
    err4 = (q4 * s4 * s_g - g.view).double().square().sum(dims, keepdim=True)
    four = err4 < err6
    core = torch.where(four, q4 * s4, q6 * s6)
    c = _counts(torch.where(four, y4, y6), fmt, torch.where(four, q4, q6)) if counts else None
    return Quantized(g.restore(core), multiplier=s_g), c


def nvfp4_row_encode_scale(amax_row: torch.Tensor) -> torch.Tensor:
    """The row-scaled NVFP4 global encode scale S = 448*6 / amax(row) in float32, 1 for
    an amax of 0, inf or NaN (TransformerEngine's encode-scale convention, per row)."""
    ok = torch.isfinite(amax_row) & (amax_row > 0)
    return torch.where(ok, 2688.0 / torch.where(ok, amax_row, 1.0), 1.0)


def _nvfp4_rowscaled(
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
    q, c = _round(y, fmt, rounding, generator, counts)
    return Quantized(g.restore(q.mul_(s_b)), row_div=s.reshape(*x.shape[:-1], 1)), c


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
    if scale_mode in ("nvfp4_4over6", "nvfp4_rowscaled") and not x2.is_contiguous():  # row-major tiles only
        return None
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
    factored = mode == "fp32" and _factorable(tile, x.shape)
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
        return Quantized(core, **_tile_factors(r.scales, tile, x.shape))
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
    """Quantize `x` to `fmt` (`e4m3`, `e5m2`, `e2m1`) and return the dequantized float32
    tensor.

    block: None for one tensorwise FP32 current scale (`fmax / amax`); an int for 1-D
    blocks along the last dimension; a pair such as (16, 16) for 2-D tiles of a 2-D
    tensor. Shapes that are not a multiple of the block are padded with zeros; a zero
    block stays zero.
    scale_mode (block scales): `floor` (OCP MX E8M0), `rceil` (NVIDIA MX E8M0), `fp32`
    (per-block `fmax / amax`), `pow2` (that rounded down to a power of two), `nvfp4`
    (two-level: FP32 global, E4M3 block scales, may go subnormal), `nvfp4_clamped`
    (block scales at least 2^-6, as torchao), `nvfp4_4over6` (each block scaled to 6 or to
    4, whichever has less squared error; arXiv 2512.02010), `nvfp4_rowscaled` (one FP32
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
