"""The named recipes: one public name, one frozen config each (torch-free).

A new recipe is one entry in `RECIPES`; its numerics live in `trainers/precision/`. A
campaign may also write a recipe by its operands (trainers/recipes/written.py) or run a
named one under its own name (`base:`; the `grid:` variants of sweeps/recipe_grid.py are
such): trainers/recipes/resolve.py."""

from __future__ import annotations

import re
from dataclasses import replace

from rcpforge.trainers.recipes.config import REFERENCE, HadamardSigns, RecipeConfig, RecipeError
from rcpforge.trainers.recipes.operands import DELAYED, E4M3, E5M2, MOR, MX4, MX6, MX8, NV, NV_TILED, ROW, OperandQuant
from rcpforge.trainers.recipes.options import (
    BlockOptions,
    DelayedOptions,
    FourOverSixOptions,
    FourOverSixTeOptions,
    MorOptions,
    Mxfp4Options,
    Mxfp8FwdNvfp4BwdOptions,
    Mxfp8Options,
    MxOptions,
    Nvfp4FwdMxfp8BwdOptions,
    Nvfp4Options,
    Nvfp4VariantOptions,
)

RECIPES: dict[str, RecipeConfig] = {
    r.name: r
    for r in (
        REFERENCE,
        RecipeConfig(
            "fp8_tensorwise",
            "FP8 hybrid: E4M3 forward, E5M2 gradients, current per-tensor scaling",
            x=E4M3, w=E4M3, dy=E5M2,
        ),
        RecipeConfig(
            "fp8_channelwise",
            "FP8 formats paper: per-output-channel weight scales, per-tensor activation scales",
            x=E4M3, w=OperandQuant("e4m3", "channelwise", scale_mode="fp32"), dy=E5M2,
        ),
        RecipeConfig(
            "fp8_delayed",
            "TransformerEngine DelayedScaling: per-tensor scales from an amax history",
            x=DELAYED["e4m3"], w=DELAYED["e4m3"], dy=DELAYED["e5m2"], options=DelayedOptions,
        ),
        RecipeConfig(
            "fp8_rowwise", "torchao rowwise: E4M3 everywhere, power-of-two scales per row",
            x=ROW, w=ROW, dy=ROW,
        ),
        RecipeConfig(
            "fp8_rowwise_gw_hp",
            "torchao rowwise_with_gw_hp: as fp8_rowwise, but W tensorwise for dgrad and the wgrad GEMM in BF16",
            x=ROW, w=ROW, dy=ROW, wgrad_hp=True,
            w_dgrad=OperandQuant("e4m3", "tensorwise", scale_mode="pow2"),
        ),
        RecipeConfig(
            "fp8_block",
            "TransformerEngine Float8BlockScaling: x, dY 1x128; W 128x128; power-of-two scales "
            "(TE's default; use_f32_scales for exact FP32 scales)",
            x=OperandQuant("e4m3", "block", 128, "pow2"), w=OperandQuant("e4m3", "block", (128, 128), "pow2"),
            dy=OperandQuant("e4m3", "block", 128, "pow2"), options=BlockOptions,
        ),
        RecipeConfig(
            "mxfp8", "OCP MXFP8: E4M3 elements, E8M0 scales per 1x32 block",
            x=MX8, w=MX8, dy=MX8, options=Mxfp8Options,
        ),
        RecipeConfig(
            "mxfp4", "OCP MXFP4: E2M1 elements, E8M0 scales per 1x32 block",
            x=MX4, w=MX4, dy=MX4, options=Mxfp4Options,
        ),
        # MXFP4 training (Tseng, Yu, Park, arXiv 2502.20586): every GEMM operand E2M1 with
        # E8M0 scales per 1x32 block along the contraction (OCP MX); dY rounded
        # stochastically (an unbiased gradient), and before the wgrad GEMM dW = dY^T X the
        # wgrad copies of dY and x multiplied along the token dimension by the same random
        # 32-point Hadamard transform, H = Sylvester(32)/sqrt(32) times a diagonal of signs
        # drawn per wgrad GEMM from the layer's seeded stream: (dY^T H)(X^T H)^T = dY^T X,
        # outliers spread over 32 values, so the SR variance is bounded. (The paper scales
        # by 3/4 before SR to avoid clipping; here the OCP scale saturates as in mxfp4.)
        RecipeConfig(
            "mxfp4_sr_rht", "MXFP4 with stochastic rounding on dY and a random 32-point Hadamard on the wgrad "
            "copies (arXiv 2502.20586)",
            x=MX4, w=MX4, dy=replace(MX4, rounding="sr"), hadamard_wgrad=True, hadamard_size=32,
            hadamard_signs=HadamardSigns.RANDOM, options=Mxfp4Options,
        ),
        # MXFP4 with a deterministic Hadamard (Cim et al., arXiv 2605.09825, who found that
        # SR and randomized rotations fail to stabilize a quantized wgrad while a
        # deterministic rotation does): as mxfp4, round to nearest everywhere, and the wgrad
        # copies of dY and x multiplied by the plain 32-point Sylvester H / sqrt(32) (no
        # signs) along the token dimension before quantization.
        RecipeConfig(
            "mxfp4_dethad", "MXFP4 with a deterministic 32-point Hadamard on the wgrad copies (arXiv 2605.09825)",
            x=MX4, w=MX4, dy=MX4, hadamard_wgrad=True, hadamard_size=32, hadamard_signs=HadamardSigns.NONE,
            options=Mxfp4Options,
        ),
        # AMD's production MXFP4 recipe of MLPerf Training v6.0 (issue 33): as mxfp4_dethad,
        # round to nearest everywhere, but the deterministic Hadamard on the wgrad copies
        # of dY and x is the 16-point Sylvester H / 4 (no signs).
        RecipeConfig(
            "mxfp4_dethad16", "MXFP4 with a deterministic 16-point Hadamard on the wgrad copies (AMD's production "
            "MXFP4 recipe, MLPerf Training v6.0)",
            x=MX4, w=MX4, dy=MX4, hadamard_wgrad=True, hadamard_size=16, hadamard_signs=HadamardSigns.NONE,
            options=Mxfp4Options,
        ),
        # MXFP6: the OCP Microscaling Formats (MX) Specification v1.0's FP6 elements, E2M3
        # and E3M2, with E8M0 scales per 1x32 block (FLOOR, the spec's; scale_mode: rceil
        # as mxfp4). The spec defines the formats, not which tensor takes which: here the
        # forward operands take E2M3 (one more mantissa bit) and the gradients E3M2 (one
        # more exponent bit, for their range), the split of FP8 training's E4M3 forward
        # and E5M2 gradients, as issue 33 asks.
        RecipeConfig(
            "mxfp6", "OCP MXFP6: E2M3 elements for x and W, E3M2 for dY, E8M0 scales per 1x32 block",
            x=MX6["e2m3"], w=MX6["e2m3"], dy=MX6["e3m2"], options=MxOptions,
        ),
        RecipeConfig(
            "nvfp4", "NVFP4: E2M1, E4M3 scales per 1x16 (W 16x16) under an FP32 global scale",
            x=NV, w=NV_TILED, dy=replace(NV, rounding="sr"),
            hadamard_wgrad=True, options=Nvfp4Options,
        ),
        # --- issue 17: the field's newer NVFP4 recipes (docs/numerics.md terms) ---
        RecipeConfig(
            "nvfp4_4over6",
            "NVFP4 'Four Over Six' (arXiv 2512.02010) in rcpforge's own convention by default: nvfp4's "
            "operands (E2M1, x and dY 1x16, W 16x16, SR on dY, Hadamard on wgrad), each block (tile) quantized "
            "twice under the same FP32 global scale amax/(M*6), with its E4M3 block scale mapping the block "
            "amax to 6 and to 4 (e4m3_rne(amax_b/4/s_g), saturating at 448); the candidate with the smaller "
            "error (6 on a tie) is kept. Options: error mse|mae (sum of squared or absolute dequantized error), "
            "global_scale_max 448|256 (M). Default mse with 448 (rcpforge's): the 6-candidate is plain NVFP4 bit "
            "for bit. The paper's reference code is mse with 256, TransformerEngine's 4over6 (TE#2972) mae with "
            "256 (see nvfp4_4over6_te); at 256 the 4-candidate never saturates and the 6-candidate is no longer "
            "plain NVFP4",
            x=replace(NV, scale_mode="nvfp4_4over6"), w=replace(NV, block=(16, 16), scale_mode="nvfp4_4over6"),
            dy=replace(NV, rounding="sr", scale_mode="nvfp4_4over6"), hadamard_wgrad=True,
            options=FourOverSixOptions,
        ),
        # TransformerEngine's 4over6 (NVIDIA/TransformerEngine#2972, merged): its defaults
        # select by the mean absolute error under the global scale amax/(256*6), and it
        # supports 4over6 only without the random Hadamard transform and stochastic
        # rounding (its options refuse them, as TE does). The 2-D 16x16 weight tiles of
        # TE's NVFP4 recipe stay.
        RecipeConfig(
            "nvfp4_4over6_te",
            "TransformerEngine's 4over6 (TE#2972): NVFP4 Four Over Six with TE's defaults, each block's "
            "candidate picked by the absolute error (mae) under the global scale amax/(256*6); x and dY 1x16, "
            "W 16x16, round to nearest everywhere and no Hadamard on the wgrad copies (TE supports 4over6 only "
            "without the random Hadamard and stochastic rounding; both are refused)",
            x=replace(NV, scale_mode="nvfp4_4over6_mae_256"),
            w=replace(NV, block=(16, 16), scale_mode="nvfp4_4over6_mae_256"),
            dy=replace(NV, scale_mode="nvfp4_4over6_mae_256"), hadamard_wgrad=False,
            options=FourOverSixTeOptions,
        ),
        RecipeConfig(
            "nvfp4_rowscaled",
            "NVFP4 with row-scaled activations (TransformerEngine's row-scaled NVFP4 x): as nvfp4, "
            "but each copy of x (forward: per token; wgrad: per feature, after the Hadamard) has one "
            "FP32 global encode scale per row along its GEMM's contraction, S = 448*6/amax(row), "
            "block scale e4m3_rne(amax_b/6*S), element e2m1_rne(x/(s_b/S)), dequantized q*s_b/S; "
            "W and dY keep the per-tensor global scale",
            x=replace(NV, scale_mode="nvfp4_rowscaled"), w=NV_TILED,
            dy=replace(NV, rounding="sr"), hadamard_wgrad=True, options=Nvfp4VariantOptions,
        ),
        RecipeConfig(
            "mxfp8_fwd_nvfp4_bwd",
            "Hybrid per direction (TransformerEngine's mxfp8_fwd_nvfp4_bwd): forward x and W in MXFP8 "
            "(E4M3 1x32, E8M0); dY in NVFP4 1x16 with SR, W's dgrad copy NVFP4 16x16, the wgrad copies "
            "of x and dY NVFP4 1x16 after the 16-point random Hadamard",
            x=MX8, w=MX8, dy=replace(NV, rounding="sr"), w_dgrad=NV_TILED, x_wgrad=NV,
            hadamard_wgrad=True, options=Mxfp8FwdNvfp4BwdOptions,
        ),
        RecipeConfig(
            "nvfp4_fwd_mxfp8_bwd",
            "Hybrid per direction (TransformerEngine's nvfp4_fwd_mxfp8_bwd): forward x 1x16 and W 16x16 "
            "in NVFP4 (two-level); dY, W's dgrad copy and the wgrad copies of x and dY in MXFP8 (E4M3 "
            "1x32 along each GEMM's contraction, E8M0), each quantized from the high-precision tensor",
            x=NV, w=NV_TILED, dy=MX8, w_dgrad=MX8, x_wgrad=MX8, options=Nvfp4FwdMxfp8BwdOptions,
        ),
        RecipeConfig(
            "mor", "Mixture of Representations: E4M3 or BF16 per tensor/block by relative error",
            x=MOR, w=MOR, dy=MOR, options=MorOptions,
        ),
    )
}


def get_recipe(name: str) -> RecipeConfig:
    try:
        return RECIPES[name]
    except KeyError:
        raise RecipeError(
            f"unknown recipe {name!r}; valid recipes: {', '.join(sorted(RECIPES))}; or write one by its operands "
            f"({{{name}: {{x: ..., w: ..., dy: ...}}}}, see `rcpforge recipes`)"
        ) from None


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}$")


def check_recipe_name(name: str) -> None:
    """A name the campaign gives a recipe: safe in file names, run names and CLI arguments."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise RecipeError(f"recipes: name {name!r}: use letters, digits, '_', '.', '+', '-' (at most 100, starting "
                          "with a letter or digit): it names run folders and MLflow runs")
