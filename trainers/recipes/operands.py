"""How one GEMM operand is quantized, and the operands the named recipes are made of
(torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, cast

# e2m3, e3m2: OCP MX v1.0's FP6 elements (MXFP6 with mx scaling)
ElementFormat = Literal["e4m3", "e5m2", "e2m1", "e2m3", "e3m2"]
# tensorwise: one FP32 current scale; delayed: FP32 scale from an amax history;
# channelwise: one scale per row of the tensor as stored (weights: per output channel);
# rowwise: one power-of-two scale per row along each GEMM's contraction dimension;
# block: FP32 scales per 1-D block along the contraction dimension, or per 2-D tile;
# mx: E8M0 scales per 1x32 block; nvfp4: E4M3 block scales under an FP32 global scale;
# mor: E4M3 or BF16, chosen per tensor or per block by relative error.
Scaling = Literal["tensorwise", "delayed", "channelwise", "rowwise", "block", "mx", "nvfp4", "mor"]
ScaleMode = Literal["fp32", "pow2", "floor", "rceil", "nvfp4", "nvfp4_clamped", "nvfp4_4over6", "nvfp4_4over6_mae",
                    "nvfp4_4over6_256", "nvfp4_4over6_mae_256", "nvfp4_rowscaled"]

# The 4-over-6 scale modes (trainers/precision/nvfp4_variants.py): (the error that picks
# a block's candidate, the E4M3 max M of the global scale amax/(M*6)). Whose convention:
# nvfp4_4over6 is rcpforge's own (squared error, NVFP4's 448: the 6-candidate is plain
# NVFP4 bit for bit); the paper's reference code (fouroversix `quantize_to_fp4`) takes
# squared error and 256 (nvfp4_4over6_256); TransformerEngine's merged 4over6 (TE#2972)
# defaults to the absolute error and 256 (nvfp4_4over6_mae_256).
FOUR_OVER_SIX: dict[str, tuple[str, int]] = {
    "nvfp4_4over6": ("mse", 448),
    "nvfp4_4over6_mae": ("mae", 448),
    "nvfp4_4over6_256": ("mse", 256),
    "nvfp4_4over6_mae_256": ("mae", 256),
}


def four_over_six_mode(error: str, global_scale_max: int) -> ScaleMode:
    """The scale mode of a 4-over-6 convention (FOUR_OVER_SIX read backwards)."""
    return cast(ScaleMode, next(m for m, conv in FOUR_OVER_SIX.items() if conv == (error, global_scale_max)))


@dataclass(frozen=True)
class OperandQuant:
    """How one GEMM operand is quantized (fake-quant: quantize, then dequantize)."""

    fmt: ElementFormat
    scaling: Scaling = "tensorwise"
    # None: one scale; int: 1-D blocks along the contraction dimension; pair: 2-D tiles
    block: int | tuple[int, int] | None = None
    scale_mode: ScaleMode = "fp32"
    rounding: Literal["rne", "sr"] = "rne"

    @property
    def per_gemm(self) -> bool:
        """Scales along the contraction dimension: the dgrad/wgrad copy of the operand is
        quantized again from the high-precision tensor, not transposed."""
        return self.scaling == "rowwise" or isinstance(self.block, int)

    def describe(self) -> str:
        fmt = "E4M3|BF16" if self.scaling == "mor" else self.fmt.upper()
        parts = [fmt, self.scaling]
        if self.block is not None:
            parts.append("1x%d" % self.block if isinstance(self.block, int) else "%dx%d" % self.block)
        if self.scaling in ("mx", "nvfp4") or self.scale_mode == "pow2":
            parts.append(f"scale {self.scale_mode}")
        if self.rounding == "sr":
            parts.append("stochastic rounding")
        return " ".join(parts)


E4M3 = OperandQuant("e4m3")
E5M2 = OperandQuant("e5m2")
DELAYED = {f: OperandQuant(f, "delayed") for f in ("e4m3", "e5m2")}
ROW = OperandQuant("e4m3", "rowwise", scale_mode="pow2")
MX8 = OperandQuant("e4m3", "mx", 32, "floor")
MX4 = OperandQuant("e2m1", "mx", 32, "floor")
MX6 = {f: OperandQuant(f, "mx", 32, "floor") for f in ("e2m3", "e3m2")}
NV = OperandQuant("e2m1", "nvfp4", 16, "nvfp4")
NV_TILED = replace(NV, block=(16, 16))  # NVFP4's weights: 16x16 tiles, so Q(W)^T == Q(W^T)
MOR = OperandQuant("e4m3", "mor")
