"""What one quantization gives: the tensor in factored form (`Quantized`, whose FP32
factors a GEMM may apply to its output), and the counts of saturated and flushed values
for telemetry (`Counts`); the rounding that takes the counts on the way."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rcpforge.trainers.precision.formats import get_format, round_inplace_ok, round_to_format


@dataclass
class Counts:
    """Values of one quantization: saturated (clipped to the format's max, or not
    finite) and flushed (nonzero before, zero after)."""

    saturated: torch.Tensor
    flushed: torch.Tensor
    total: int


def counts_of(y: torch.Tensor, fmt: str, q: torch.Tensor) -> Counts:
    f = get_format(fmt)
    # saturated: would have rounded above the max without the clamp (or not finite)
    limit = f.max + 2.0 ** (f.emax - f.mbits - 1)
    return Counts(
        saturated=(~(y.abs() <= limit)).sum() - torch.isnan(y).sum(),
        flushed=((q == 0) & (y != 0)).sum(),
        total=y.numel(),
    )


def round_counted(
    y, fmt, rounding, generator, want_counts, saturate=True
) -> tuple[torch.Tensor, Counts | None]:
    if rounding == "rne" and not want_counts:
        return round_inplace_ok(y, fmt, saturate), None  # y is a temporary: round it in place
    q = round_to_format(y, fmt, rounding, generator)
    return q, (counts_of(y, fmt, q) if want_counts else None)


@dataclass
class Quantized:
    """A fake-quantized tensor as `core / divisor * multiplier / row_div / col_div`.
    With `exact`, `core` is representable in BF16 (grid values times power-of-two or
    E4M3 block scales), and the FP32 factors that are constant along a GEMM's
    contraction (per tensor, or per row: `row_div`) can be applied to the GEMM's output
    instead (docs/numerics.md, "why emulation loses nothing"); `col_div` (per column)
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


def tile_factors(scales: torch.Tensor, tile: tuple[int, int], shape: torch.Size) -> dict:
    """Per-tile FP32 scales (tile rows x tile columns) of a `factorable` tiling as
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


def factorable(tile: tuple[int, int], shape) -> bool:
    return len(shape) == 2 and (tile[1] >= shape[1] or tile[0] >= shape[0])
