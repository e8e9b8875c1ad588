"""The options a campaign may set on a named recipe, one model per family of recipes, and
how each family's options set the recipe's operands (torch-free)."""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rcpforge.trainers.recipes.operands import MX8, NV, NV_TILED, four_over_six_mode

if TYPE_CHECKING:
    from rcpforge.trainers.recipes.config import RecipeConfig


class Backward(StrEnum):
    """The backward override (TransformerEngine's): which operands the dgrad and wgrad
    GEMMs take."""

    QUANTIZED = "quantized"  # the recipe's own dgrad and wgrad operands
    HIGH_PRECISION = "high_precision"  # both GEMMs on the unquantized BF16 dY, W and x
    DEQUANTIZED = "dequantized"  # on the forward's quantized-then-dequantized W and x, dY in BF16


class RecipeOptions(BaseModel):
    """Options every recipe accepts; recipes with more options subclass this, and those
    whose options change the operands say how in `operands`."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # Ablation: also fake-quantize the residual stream after every block with the
    # recipe's activation format (the FP8 formats paper reports accuracy drops).
    quantize_residual: bool = False
    # Placement: these layers keep their GEMMs in BF16 (the embedding, the attention
    # matmuls and the LM head always are): the first and the last N transformer blocks
    # (the NVFP4 paper keeps the final ones), and layers by name or pattern
    # (`blocks.0.fc2`, `*.qkv`; fnmatch).
    bf16_first_blocks: int = Field(0, ge=0)
    bf16_last_blocks: int = Field(0, ge=0)
    bf16_layers: tuple[str, ...] = ()
    # Schedule: from this token count on, every GEMM of the run in BF16 (the NVFP4
    # paper's switch near the end of training recovers most of the loss gap); the short
    # form of `switch_to: bf16` (any target recipe: trainers/recipes/switch.py).
    bf16_from_tokens: int | None = Field(None, ge=0)
    # FP8 for the two attention matmuls (QK^T and PV) as the FP8 hybrid recipe does its
    # GEMMs: E4M3 operands with tensorwise current scaling, E5M2 gradients
    # (trainers/precision/attention.py); off: BF16 autocast, as before the option existed.
    fp8_attention: bool = False
    backward: Backward = Backward.QUANTIZED

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        """The recipe's operands under these option values (these: as the table has them)."""
        return recipe


# Options every recipe got after run keys existed, with their defaults: a named recipe's
# options enter its run key only off them (trainers/contract/run_key.py: `keyed`), so its
# run keys stay what they were (bf16_last_blocks was an FP4 option: always in theirs).
ADDED_LATER: dict[str, Any] = {"bf16_first_blocks": 0, "bf16_last_blocks": 0, "bf16_layers": [],
                               "bf16_from_tokens": None, "fp8_attention": False, "backward": "quantized",
                               # nvfp4_4over6's convention (issue 33): FourOverSixOptions
                               "error": "mse", "global_scale_max": 448}


def _alike(recipe: RecipeConfig, **change: Any) -> RecipeConfig:
    """The recipe with x, W and dY changed alike."""
    assert recipe.x is not None and recipe.w is not None and recipe.dy is not None
    return replace(recipe, x=replace(recipe.x, **change), w=replace(recipe.w, **change),
                   dy=replace(recipe.dy, **change))


class Fp4Options(RecipeOptions):
    """The FP4 recipes: bf16_last_blocks was theirs first (always in their options)."""


class DelayedOptions(RecipeOptions):
    amax_history_len: int = Field(1024, ge=1)  # TransformerEngine DelayedScaling default
    margin: int = Field(0, ge=0)  # scales divided by 2^margin


class MxOptions(RecipeOptions):
    scale_mode: Literal["floor", "rceil"] = "floor"

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        return _alike(recipe, scale_mode=self.scale_mode)


class Mxfp8Options(MxOptions):
    grad_format: Literal["e4m3", "e5m2"] = "e4m3"

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        scaled = super().operands(recipe)
        assert scaled.dy is not None
        return replace(scaled, dy=replace(scaled.dy, fmt=self.grad_format))


class Mxfp4Options(MxOptions, Fp4Options):
    pass


class Nvfp4Options(Fp4Options):
    stochastic_rounding: bool = True  # on dY only
    hadamard: bool = True  # 16-point random Hadamard on the wgrad copies of x and dY
    weight_2d: bool = True  # 16x16 weight blocks, so Q(W)^T == Q(W^T)
    scale_clamp: bool = False  # block scales >= 2^-6 (torchao) instead of subnormal (TE)

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        scaled = _alike(recipe, scale_mode="nvfp4_clamped" if self.scale_clamp else "nvfp4")
        assert scaled.w is not None and scaled.dy is not None
        return replace(scaled, w=replace(scaled.w, block=(16, 16) if self.weight_2d else 16),
                       dy=replace(scaled.dy, rounding="sr" if self.stochastic_rounding else "rne"),
                       hadamard_wgrad=self.hadamard)


class BlockOptions(RecipeOptions):
    # TransformerEngine Float8BlockScaling rounds its FP32 block scales down to powers of
    # two by default; true keeps the exact fmax / amax scales, as TE does with
    # NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1 (a common setting on Hopper).
    use_f32_scales: bool = False

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        return _alike(recipe, scale_mode="fp32" if self.use_f32_scales else "pow2")


class MorOptions(RecipeOptions):
    threshold: float = Field(0.05, gt=0.0)  # max relative error ||Q - T|| / ||T|| kept in FP8
    granularity: Literal["tensor", "block"] = "tensor"
    block_size: int = Field(128, ge=2)

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        return _alike(recipe, block=self.block_size if self.granularity == "block" else None)


# --- issue 17: the recipes that build their operands from their options --------------


class Nvfp4VariantOptions(Fp4Options):
    """nvfp4_4over6 and nvfp4_rowscaled: the nvfp4 recipe's options (block scales as
    TransformerEngine, subnormal: no scale_clamp), applied to the named variant's own
    scale types (x's and W's and dY's `scale_mode` as the entry gives them)."""

    stochastic_rounding: bool = True  # on dY only
    hadamard: bool = True  # 16-point random Hadamard on the wgrad copies of x and dY
    weight_2d: bool = True  # 16x16 weight blocks, so Q(W)^T == Q(W^T)

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        assert recipe.x is not None and recipe.w is not None and recipe.dy is not None
        return replace(
            recipe, w=replace(recipe.w, block=(16, 16) if self.weight_2d else 16),
            dy=replace(recipe.dy, rounding="sr" if self.stochastic_rounding else "rne"),
            hadamard_wgrad=self.hadamard,
        )


class FourOverSixOptions(Nvfp4VariantOptions):
    """nvfp4_4over6: the NVFP4 variants' options and the 4-over-6 convention (issue 33):
    `error` picks each block's candidate by the sum of squared (mse) or absolute (mae)
    errors, `global_scale_max` is the E4M3 max M of the global scale amax/(M*6). The
    defaults are rcpforge's own convention (mse, 448: the 6-candidate is plain NVFP4);
    the paper's reference code is mse with 256, TransformerEngine's (TE#2972) mae with
    256 (the named nvfp4_4over6_te). trainers/recipes/operands.py FOUR_OVER_SIX."""

    error: Literal["mse", "mae"] = "mse"
    global_scale_max: Literal[448, 256] = 448

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        return _alike(super().operands(recipe), scale_mode=four_over_six_mode(self.error, self.global_scale_max))


class FourOverSixTeOptions(Fp4Options):
    """nvfp4_4over6_te: TransformerEngine's 4over6 (TE#2972) with its defaults, the
    absolute error and the global scale amax/(256*6), and its constraints: TE supports
    4over6 only without the random Hadamard transform and stochastic rounding, so dY
    rounds to nearest, the wgrad copies are not transformed, and asking for either is
    refused (as TE refuses it)."""

    weight_2d: bool = True  # 16x16 weight blocks, so Q(W)^T == Q(W^T)
    error: Literal["mse", "mae"] = "mae"
    global_scale_max: Literal[448, 256] = 256

    @model_validator(mode="before")
    @classmethod
    def _te_constraints(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for option in ("hadamard", "stochastic_rounding"):
                if data.get(option) is not None:
                    raise ValueError(f"{option}: TransformerEngine's 4over6 runs without the random Hadamard "
                                     "transform and stochastic rounding; remove it, or use nvfp4_4over6 (error: mae, "
                                     "global_scale_max: 256) for 4-over-6 with them")
        return data

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        assert recipe.w is not None
        mode = four_over_six_mode(self.error, self.global_scale_max)
        return _alike(replace(recipe, w=replace(recipe.w, block=(16, 16) if self.weight_2d else 16)),
                      scale_mode=mode, rounding="rne")


class Mxfp8FwdNvfp4BwdOptions(Fp4Options):
    """mxfp8_fwd_nvfp4_bwd: the MXFP8 forward's E8M0 scale rule; the NVFP4 backward as
    the nvfp4 recipe's (SR on dY, the random Hadamard on the wgrad copies; W's dgrad copy
    in 16x16 tiles)."""

    scale_mode: Literal["floor", "rceil"] = "floor"
    stochastic_rounding: bool = True  # on dY
    hadamard: bool = True  # on the wgrad copies of x and dY

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        mx = replace(MX8, scale_mode=self.scale_mode)
        return replace(recipe, x=mx, w=mx, dy=replace(NV, rounding="sr" if self.stochastic_rounding else "rne"),
                       w_dgrad=NV_TILED, x_wgrad=NV, hadamard_wgrad=self.hadamard)


class Nvfp4FwdMxfp8BwdOptions(Fp4Options):
    """nvfp4_fwd_mxfp8_bwd: the NVFP4 forward's W blocks (16x16 with weight_2d, else
    1x16); the MXFP8 backward's E8M0 scale rule."""

    scale_mode: Literal["floor", "rceil"] = "floor"
    weight_2d: bool = True  # 16x16 forward W blocks

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        mx = replace(MX8, scale_mode=self.scale_mode)
        return replace(recipe, x=NV, w=replace(NV, block=(16, 16) if self.weight_2d else 16), dy=mx,
                       w_dgrad=mx, x_wgrad=mx, hadamard_wgrad=False)
