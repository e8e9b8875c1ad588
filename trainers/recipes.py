"""The recipe registry: one public name, one frozen config (torch-free).

A recipe says how the inputs of each linear-layer GEMM are quantized: the forward
operands x and W, and the output gradient dY used by the dgrad and wgrad GEMMs.
Everything that is not a linear-layer GEMM input runs in the reference precision
(bf16 autocast). A new recipe is one entry in `RECIPES`; its numerics live in
`trainers/precision/`. A campaign may also write a recipe by its operands
(trainers/written_recipes.py) or run a named one under its own name (`base:`; the
`grid:` variants of sweeps/recipe_grid.py are such).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainers.contract.revisions import recipe_revision  # noqa: F401 - also this registry's name for it
from trainers.contract.run_key import keyed

ElementFormat = Literal["e4m3", "e5m2", "e2m1"]
# tensorwise: one FP32 current scale; delayed: FP32 scale from an amax history;
# channelwise: one scale per row of the tensor as stored (weights: per output channel);
# rowwise: one power-of-two scale per row along each GEMM's contraction dimension;
# block: FP32 scales per 1-D block along the contraction dimension, or per 2-D tile;
# mx: E8M0 scales per 1x32 block; nvfp4: E4M3 block scales under an FP32 global scale;
# mor: E4M3 or BF16, chosen per tensor or per block by relative error.
Scaling = Literal["tensorwise", "delayed", "channelwise", "rowwise", "block", "mx", "nvfp4", "mor"]
ScaleMode = Literal["fp32", "pow2", "floor", "rceil", "nvfp4", "nvfp4_clamped", "nvfp4_4over6", "nvfp4_rowscaled"]


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


class RecipeOptions(BaseModel):
    """Options every recipe accepts; recipes with more options subclass this."""

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
    # form of `switch_to: bf16` (any target recipe: trainers/recipe_switch.py).
    bf16_from_tokens: int | None = Field(None, ge=0)
    # FP8 for the two attention matmuls (QK^T and PV) as the FP8 hybrid recipe does its
    # GEMMs: E4M3 operands with tensorwise current scaling, E5M2 gradients
    # (trainers/precision/attention.py); off: BF16 autocast, as before the option existed.
    fp8_attention: bool = False
    # The backward override (TransformerEngine's): quantized (the recipe's own dgrad and
    # wgrad operands), high_precision (both GEMMs on the unquantized BF16 dY, W and x) or
    # dequantized (on the forward's quantized-then-dequantized W and x, dY in BF16).
    backward: Literal["quantized", "high_precision", "dequantized"] = "quantized"


# Options every recipe got after run keys existed, with their defaults: a named recipe's
# options enter its run key only off them (trainers/contract/run_key.py: `keyed`), so its
# run keys stay what they were (bf16_last_blocks was an FP4 option: always in theirs).
ADDED_LATER = {"bf16_first_blocks": 0, "bf16_last_blocks": 0, "bf16_layers": [], "bf16_from_tokens": None,
               "fp8_attention": False, "backward": "quantized"}


class Fp4Options(RecipeOptions):
    """The FP4 recipes: bf16_last_blocks was theirs first (always in their options)."""


class DelayedOptions(RecipeOptions):
    amax_history_len: int = Field(1024, ge=1)  # TransformerEngine DelayedScaling default
    margin: int = Field(0, ge=0)  # scales divided by 2^margin


class MxOptions(RecipeOptions):
    scale_mode: Literal["floor", "rceil"] = "floor"


class Mxfp8Options(MxOptions):
    grad_format: Literal["e4m3", "e5m2"] = "e4m3"


class Mxfp4Options(MxOptions, Fp4Options):
    pass


class Nvfp4Options(Fp4Options):
    stochastic_rounding: bool = True  # on dY only
    hadamard: bool = True  # 16-point random Hadamard on the wgrad copies of x and dY
    weight_2d: bool = True  # 16x16 weight blocks, so Q(W)^T == Q(W^T)
    scale_clamp: bool = False  # block scales >= 2^-6 (torchao) instead of subnormal (TE)


class BlockOptions(RecipeOptions):
    # TransformerEngine Float8BlockScaling rounds its FP32 block scales down to powers of
    # two by default; true keeps the exact fmax / amax scales, as TE does with
    # NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1 (a common setting on Hopper).
    use_f32_scales: bool = False


class MorOptions(RecipeOptions):
    threshold: float = Field(0.05, gt=0.0)  # max relative error ||Q - T|| / ||T|| kept in FP8
    granularity: Literal["tensor", "block"] = "tensor"
    block_size: int = Field(128, ge=2)


# --- issue 17: the recipes that build their operands from their options --------------


class OperandOptions(Fp4Options):
    """Options of a recipe whose operands follow from its option values (`operands`)."""

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        raise NotImplementedError


class Nvfp4VariantOptions(OperandOptions):
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


class Mxfp8FwdNvfp4BwdOptions(OperandOptions):
    """mxfp8_fwd_nvfp4_bwd: the MXFP8 forward's E8M0 scale rule; the NVFP4 backward as
    the nvfp4 recipe's (SR on dY, the random Hadamard on the wgrad copies; W's dgrad copy
    in 16x16 tiles)."""

    scale_mode: Literal["floor", "rceil"] = "floor"
    stochastic_rounding: bool = True  # on dY
    hadamard: bool = True  # on the wgrad copies of x and dY

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        mx = replace(_MX8, scale_mode=self.scale_mode)
        return replace(recipe, x=mx, w=mx, dy=replace(_NV, rounding="sr" if self.stochastic_rounding else "rne"),
                       w_dgrad=replace(_NV, block=(16, 16)), x_wgrad=_NV, hadamard_wgrad=self.hadamard)


class Nvfp4FwdMxfp8BwdOptions(OperandOptions):
    """nvfp4_fwd_mxfp8_bwd: the NVFP4 forward's W blocks (16x16 with weight_2d, else
    1x16); the MXFP8 backward's E8M0 scale rule."""

    scale_mode: Literal["floor", "rceil"] = "floor"
    weight_2d: bool = True  # 16x16 forward W blocks

    def operands(self, recipe: RecipeConfig) -> RecipeConfig:
        mx = replace(_MX8, scale_mode=self.scale_mode)
        return replace(recipe, x=_NV, w=replace(_NV, block=(16, 16) if self.weight_2d else 16), dy=mx,
                       w_dgrad=mx, x_wgrad=mx, hadamard_wgrad=False)


@dataclass(frozen=True)
class Switch:
    """A recipe's schedule: from the first step at or after `from_tokens`, the run's GEMMs
    run under the recipe `to` (its placement and options; fresh numeric state)."""

    from_tokens: int
    to: RecipeConfig


@dataclass(frozen=True)
class RecipeConfig:
    name: str
    description: str
    x: OperandQuant | None = None
    w: OperandQuant | None = None
    dy: OperandQuant | None = None
    # the weight's copy for the dgrad GEMM where a recipe quantizes it unlike the forward
    # copy (torchao rowwise_with_gw_hp: tensorwise)
    w_dgrad: OperandQuant | None = None
    # the wgrad GEMM's copies of x and dY where a recipe quantizes them unlike the
    # forward and dgrad copies (each quantized again from the high-precision tensor)
    x_wgrad: OperandQuant | None = None
    dy_wgrad: OperandQuant | None = None
    wgrad_hp: bool = False  # the wgrad GEMM runs in the reference precision (BF16)
    hadamard_wgrad: bool = False
    # the wgrad transform's size and signs: fixed random ones (TransformerEngine's NVFP4),
    # random ones drawn per wgrad GEMM from the layer's stream, or none (deterministic)
    hadamard_size: int = 16
    hadamard_signs: Literal["fixed", "random", "none"] = "fixed"
    options: type[RecipeOptions] = field(default=RecipeOptions)
    # The option values this config was resolved with (None: the defaults).
    settings: RecipeOptions | None = None
    # The named recipe this one is a variant of, under a name of the campaign's own
    # (`{my_name: {base: nvfp4, ...}}`, or a `grid:` variant): its numerics revision.
    base: str | None = None
    # `switch_to` with `switch_from_tokens` (trainers/recipe_switch.py); bf16_from_tokens
    # is read from the options instead (see `switch`).
    schedule: Switch | None = None

    def __post_init__(self) -> None:
        quantized = [q is not None for q in (self.x, self.w, self.dy)]
        if any(quantized) and not all(quantized):
            raise ValueError(f"recipe {self.name}: quantize x, W and dY together or none")

    @property
    def revision(self) -> int:
        """The numerics revision (the run contract's table: trainers/contract/revisions.py)."""
        return recipe_revision(self.base or self.name)

    @property
    def is_reference(self) -> bool:
        return self.x is None

    @property
    def switch(self) -> Switch | None:
        """The run's switch to another recipe, if its schedule has one (BF16 for
        bf16_from_tokens)."""
        if self.schedule is not None:
            return self.schedule
        at = self.opts.bf16_from_tokens
        return None if at is None or self.is_reference else Switch(at, RECIPES["bf16"])

    @property
    def opts(self) -> RecipeOptions:
        return self.settings if self.settings is not None else self.options.model_validate({})

    def resolve(self, options: dict[str, Any] | None = None) -> RecipeConfig:
        """This recipe with its options applied (validated; raises RecipeError)."""
        opts = _parse_options(self, options or {})
        if isinstance(opts, OperandOptions):  # the recipes that build their operands from their options
            return replace(opts.operands(self), settings=opts)
        x, w, dy, had = self.x, self.w, self.dy, self.hadamard_wgrad
        o = opts.model_dump()
        if "scale_mode" in o:
            x, w, dy = (replace(q, scale_mode=o["scale_mode"]) for q in (x, w, dy))
        if "grad_format" in o:
            dy = replace(dy, fmt=o["grad_format"])
        if isinstance(opts, Nvfp4Options):
            mode = "nvfp4_clamped" if opts.scale_clamp else "nvfp4"
            x = replace(x, scale_mode=mode)
            w = replace(w, scale_mode=mode, block=(16, 16) if opts.weight_2d else 16)
            dy = replace(dy, scale_mode=mode, rounding="sr" if opts.stochastic_rounding else "rne")
            had = opts.hadamard
        if isinstance(opts, BlockOptions):
            mode = "fp32" if opts.use_f32_scales else "pow2"
            x, w, dy = (replace(q, scale_mode=mode) for q in (x, w, dy))
        if isinstance(opts, MorOptions):
            block = opts.block_size if opts.granularity == "block" else None
            x, w, dy = (replace(q, block=block) for q in (x, w, dy))
        return replace(self, x=x, w=w, dy=dy, hadamard_wgrad=had, settings=opts)

    def summary(self) -> dict[str, Any]:
        def fmt(q: OperandQuant | None) -> str:
            return q.describe() if q else "BF16"

        wgrad = ("BF16" if self.is_reference or self.wgrad_hp
                 else f"dY {fmt(self.dy_wgrad or self.dy)}, x {fmt(self.x_wgrad or self.x)}")
        if self.hadamard_wgrad and not self.wgrad_hp:
            kind = {"fixed": "random", "random": "random (signs drawn per GEMM)", "none": "deterministic"}
            wgrad += f", {self.hadamard_size}-point {kind[self.hadamard_signs]} Hadamard"
        w = fmt(self.w) + (f"; dgrad copy {fmt(self.w_dgrad)}" if self.w_dgrad else "")
        dy = fmt(self.dy)
        if not self.is_reference and self.opts.backward != "quantized":  # issue 17: the backward override
            hp = self.opts.backward == "high_precision"
            w = fmt(self.w) + ("; dgrad on BF16 W" if hp else "; dgrad on the forward's dequantized W")
            dy = f"BF16 ({self.opts.backward} backward)"
            wgrad = "BF16" if hp else "dY BF16, x the forward's dequantized copy"
        return {
            "name": self.name,
            "description": self.description,
            "x": fmt(self.x),
            "w": w,
            "dy": dy,
            "wgrad": wgrad,
            "options": {k: v for k, v in self.opts.model_dump(mode="json").items()
                        if not (self.is_reference and k in ADDED_LATER)},  # nothing to place in bf16
        }


_E4M3 = OperandQuant("e4m3")
_E5M2 = OperandQuant("e5m2")
_DELAYED = {f: OperandQuant(f, "delayed") for f in ("e4m3", "e5m2")}
_ROW = OperandQuant("e4m3", "rowwise", scale_mode="pow2")
_MX8 = OperandQuant("e4m3", "mx", 32, "floor")
_MX4 = OperandQuant("e2m1", "mx", 32, "floor")
_NV = OperandQuant("e2m1", "nvfp4", 16, "nvfp4")
_MOR = OperandQuant("e4m3", "mor")

RECIPES: dict[str, RecipeConfig] = {
    r.name: r
    for r in (
        RecipeConfig("bf16", "BF16 autocast: the reference"),
        RecipeConfig(
            "fp8_tensorwise",
            "FP8 hybrid: E4M3 forward, E5M2 gradients, current per-tensor scaling",
            x=_E4M3, w=_E4M3, dy=_E5M2,
        ),
        RecipeConfig(
            "fp8_channelwise",
            "FP8 formats paper: per-output-channel weight scales, per-tensor activation scales",
            x=_E4M3, w=OperandQuant("e4m3", "channelwise", scale_mode="fp32"), dy=_E5M2,
        ),
        RecipeConfig(
            "fp8_delayed",
            "TransformerEngine DelayedScaling: per-tensor scales from an amax history",
            x=_DELAYED["e4m3"], w=_DELAYED["e4m3"], dy=_DELAYED["e5m2"], options=DelayedOptions,
        ),
        RecipeConfig(
            "fp8_rowwise", "torchao rowwise: E4M3 everywhere, power-of-two scales per row",
            x=_ROW, w=_ROW, dy=_ROW,
        ),
        RecipeConfig(
            "fp8_rowwise_gw_hp",
            "torchao rowwise_with_gw_hp: as fp8_rowwise, but W tensorwise for dgrad and the wgrad GEMM in BF16",
            x=_ROW, w=_ROW, dy=_ROW, wgrad_hp=True,
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
            x=_MX8, w=_MX8, dy=_MX8, options=Mxfp8Options,
        ),
        RecipeConfig(
            "mxfp4", "OCP MXFP4: E2M1 elements, E8M0 scales per 1x32 block",
            x=_MX4, w=_MX4, dy=_MX4, options=Mxfp4Options,
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
            x=_MX4, w=_MX4, dy=replace(_MX4, rounding="sr"), hadamard_wgrad=True, hadamard_size=32,
            hadamard_signs="random", options=Mxfp4Options,
        ),
        # MXFP4 with a deterministic Hadamard (Cim et al., arXiv 2605.09825, who found that
        # SR and randomized rotations fail to stabilize a quantized wgrad while a
        # deterministic rotation does): as mxfp4, round to nearest everywhere, and the wgrad
        # copies of dY and x multiplied by the plain 32-point Sylvester H / sqrt(32) (no
        # signs) along the token dimension before quantization.
        RecipeConfig(
            "mxfp4_dethad", "MXFP4 with a deterministic 32-point Hadamard on the wgrad copies (arXiv 2605.09825)",
            x=_MX4, w=_MX4, dy=_MX4, hadamard_wgrad=True, hadamard_size=32, hadamard_signs="none",
            options=Mxfp4Options,
        ),
        RecipeConfig(
            "nvfp4", "NVFP4: E2M1, E4M3 scales per 1x16 (W 16x16) under an FP32 global scale",
            x=_NV, w=replace(_NV, block=(16, 16)), dy=replace(_NV, rounding="sr"),
            hadamard_wgrad=True, options=Nvfp4Options,
        ),
        # --- issue 17: the field's newer NVFP4 recipes (NUMERICS.md terms) ---
        RecipeConfig(
            "nvfp4_4over6",
            "NVFP4 'Four Over Six' (arXiv 2512.02010; TransformerEngine's 4over6): nvfp4's operands "
            "(E2M1, x and dY 1x16, W 16x16, SR on dY, Hadamard on wgrad), each block (tile) quantized "
            "twice under the same FP32 global scale amax/(448*6), with its E4M3 block scale mapping the "
            "block amax to 6 and to 4 (e4m3_rne(amax_b/4/s_g), saturating at 448); the candidate with "
            "the smaller sum of squared dequantized error is kept (6 on a tie); the 6-candidate is plain "
            "NVFP4 bit for bit (the paper's reference code instead lowers the global scale's E4M3 max to 256 "
            "so the 4-candidate never saturates)",
            x=replace(_NV, scale_mode="nvfp4_4over6"), w=replace(_NV, block=(16, 16), scale_mode="nvfp4_4over6"),
            dy=replace(_NV, rounding="sr", scale_mode="nvfp4_4over6"), hadamard_wgrad=True,
            options=Nvfp4VariantOptions,
        ),
        RecipeConfig(
            "nvfp4_rowscaled",
            "NVFP4 with row-scaled activations (TransformerEngine's row-scaled NVFP4 x): as nvfp4, "
            "but each copy of x (forward: per token; wgrad: per feature, after the Hadamard) has one "
            "FP32 global encode scale per row along its GEMM's contraction, S = 448*6/amax(row), "
            "block scale e4m3_rne(amax_b/6*S), element e2m1_rne(x/(s_b/S)), dequantized q*s_b/S; "
            "W and dY keep the per-tensor global scale",
            x=replace(_NV, scale_mode="nvfp4_rowscaled"), w=replace(_NV, block=(16, 16)),
            dy=replace(_NV, rounding="sr"), hadamard_wgrad=True, options=Nvfp4VariantOptions,
        ),
        RecipeConfig(
            "mxfp8_fwd_nvfp4_bwd",
            "Hybrid per direction (TransformerEngine's mxfp8_fwd_nvfp4_bwd): forward x and W in MXFP8 "
            "(E4M3 1x32, E8M0); dY in NVFP4 1x16 with SR, W's dgrad copy NVFP4 16x16, the wgrad copies "
            "of x and dY NVFP4 1x16 after the 16-point random Hadamard",
            x=_MX8, w=_MX8, dy=replace(_NV, rounding="sr"), w_dgrad=replace(_NV, block=(16, 16)), x_wgrad=_NV,
            hadamard_wgrad=True, options=Mxfp8FwdNvfp4BwdOptions,
        ),
        RecipeConfig(
            "nvfp4_fwd_mxfp8_bwd",
            "Hybrid per direction (TransformerEngine's nvfp4_fwd_mxfp8_bwd): forward x 1x16 and W 16x16 "
            "in NVFP4 (two-level); dY, W's dgrad copy and the wgrad copies of x and dY in MXFP8 (E4M3 "
            "1x32 along each GEMM's contraction, E8M0), each quantized from the high-precision tensor",
            x=_NV, w=replace(_NV, block=(16, 16)), dy=_MX8, w_dgrad=_MX8, x_wgrad=_MX8, options=Nvfp4FwdMxfp8BwdOptions,
        ),
        RecipeConfig(
            "mor", "Mixture of Representations: E4M3 or BF16 per tensor/block by relative error",
            x=_MOR, w=_MOR, dy=_MOR, options=MorOptions,
        ),
    )
}


class RecipeError(ValueError):
    pass


def get_recipe(name: str) -> RecipeConfig:
    try:
        return RECIPES[name]
    except KeyError:
        raise RecipeError(
            f"unknown recipe {name!r}; valid recipes: {', '.join(sorted(RECIPES))}; or write one by its operands "
            f"({{{name}: {{x: ..., w: ..., dy: ...}}}}, see `rcpforge recipes`)"
        ) from None


def _parse_options(recipe: RecipeConfig, options: dict[str, Any]) -> RecipeOptions:
    try:
        return recipe.options.model_validate(options)
    except ValidationError as err:
        valid = ", ".join(sorted(recipe.options.model_fields)) or "none"
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()
        )
        raise RecipeError(f"recipe {recipe.name} options: {problems} (valid options: {valid})") from None


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}$")


def check_recipe_name(name: str) -> None:
    """A name the campaign gives a recipe: safe in file names, run names and CLI arguments."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise RecipeError(f"recipes: name {name!r}: use letters, digits, '_', '.', '+', '-' (at most 100, starting "
                          "with a letter or digit): it names run folders and MLflow runs")


def _based(name: str, options: dict[str, Any]) -> tuple[RecipeConfig, dict[str, Any]]:
    """A named recipe under a campaign's own name (`{name: {base: nvfp4, ...}}`): the
    named one and the options left for it."""
    base = options["base"]
    check_recipe_name(name)
    if name in RECIPES:
        raise RecipeError(f"recipes.{name}.base: {name} is itself a named recipe; give the variant its own name "
                          f"(e.g. my_{name}) or remove base")
    if not isinstance(base, str) or base not in RECIPES:
        raise RecipeError(f"recipes.{name}.base: {base!r} is not a named recipe; valid: {', '.join(sorted(RECIPES))}")
    return RECIPES[base], {k: v for k, v in options.items() if k != "base"}


def options_dump(recipe: RecipeConfig, opts: RecipeOptions) -> dict[str, Any]:
    """A named recipe's options with defaults filled in, less the options added later
    at their defaults (`ADDED_LATER`); refused on the reference, which has nothing to place."""
    always = {"bf16_last_blocks"} if issubclass(recipe.options, Fp4Options) else set()
    added_later = {k: default for k, default in ADDED_LATER.items() if k not in always}
    out = keyed(opts.model_dump(mode="json"), added_later)
    placed = sorted(set(out) & set(added_later))
    if recipe.is_reference and placed:
        raise RecipeError(f"recipes.{recipe.name}.{placed[0]}: {recipe.name} runs every GEMM in BF16 already; "
                          "remove it")
    return out


def validate_recipe_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Return the options with defaults filled in, or raise naming the bad option: a
    named recipe's options, a named recipe's under another name (`base:`), or the
    normalized definition of a recipe written by its operands (trainers/written_recipes.py)."""
    from trainers.recipe_switch import split_switch, validate_switch
    from trainers.written_recipes import is_written, validate_written

    options, switch = split_switch(options)
    if is_written(options):
        out = validate_written(name, options)
    elif "base" in options:
        recipe, rest = _based(name, options)
        out = {"base": recipe.name, **options_dump(recipe, _parse_options(recipe, rest))}
    else:
        recipe = get_recipe(name)
        out = options_dump(recipe, _parse_options(recipe, options))
    if switch:  # only where given: options at their defaults leave run keys as they were
        out.update(validate_switch(name, resolve_recipe(name, out), switch))
    return out


def resolve_recipe(name: str, options: dict[str, Any] | None = None) -> RecipeConfig:
    """The frozen config of a recipe name with a campaign's options applied."""
    from trainers.recipe_switch import build_switch, split_switch
    from trainers.written_recipes import build_written, is_written

    options, switch = split_switch(options or {})
    if is_written(options):
        recipe = build_written(name, options)
    elif "base" in options:
        named, rest = _based(name, options)
        recipe = replace(named.resolve(rest), name=name, base=named.name)
    else:
        recipe = get_recipe(name).resolve(options)
    return replace(recipe, schedule=build_switch(name, recipe, switch)) if switch else recipe


def same_gemms(a: RecipeConfig, b: RecipeConfig) -> bool:
    """Whether two recipes quantize every GEMM operand alike (whatever their names)."""
    def gemms(r: RecipeConfig) -> tuple:
        return (r.x, r.w, r.dy, r.w_dgrad, r.x_wgrad, r.dy_wgrad, r.wgrad_hp, r.hadamard_wgrad,
                r.hadamard_wgrad and (r.hadamard_size, r.hadamard_signs), r.opts.backward)

    return gemms(a) == gemms(b)


def same_recipe(a: RecipeConfig, b: RecipeConfig) -> bool:
    """Whether two recipes train alike: the same GEMM operands and the same values of
    the options both have (placement, attention, delayed-scaling history...; the options
    only one has shape its operands, which `same_gemms` compares)."""
    oa, ob = a.opts.model_dump(), b.opts.model_dump()
    return same_gemms(a, b) and all(oa[k] == ob[k] for k in oa.keys() & ob.keys())


