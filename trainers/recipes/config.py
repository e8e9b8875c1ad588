"""A recipe: one frozen config of how the inputs of every linear-layer GEMM are
quantized, with its placement and schedule options (torch-free).

A recipe says how the inputs of each linear-layer GEMM are quantized: the forward
operands x and W, and the output gradient dY used by the dgrad and wgrad GEMMs.
Everything that is not a linear-layer GEMM input runs in the reference precision
(bf16 autocast); the reference itself is `REFERENCE`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from rcpforge.trainers.contract.revisions import recipe_revision
from rcpforge.trainers.recipes.operands import OperandQuant
from rcpforge.trainers.recipes.options import ADDED_LATER, Backward, RecipeOptions


class RecipeError(ValueError):
    pass


class HadamardSigns(StrEnum):
    """The signs of the wgrad GEMM's Hadamard transform."""

    FIXED = "fixed"  # fixed random ones (TransformerEngine's NVFP4)
    RANDOM = "random"  # random ones drawn per wgrad GEMM from the layer's stream
    NONE = "none"  # none: a deterministic transform


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
    # the wgrad transform's size and signs
    hadamard_size: int = 16
    hadamard_signs: HadamardSigns = HadamardSigns.FIXED
    options: type[RecipeOptions] = field(default=RecipeOptions)
    # The option values this config was resolved with (None: the defaults).
    settings: RecipeOptions | None = None
    # The named recipe this one is a variant of, under a name of the campaign's own
    # (`{my_name: {base: nvfp4, ...}}`, or a `grid:` variant): its numerics revision.
    base: str | None = None
    # `switch_to` with `switch_from_tokens` (trainers/recipes/switch.py); bf16_from_tokens
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
        return None if at is None or self.is_reference else Switch(at, REFERENCE)

    @property
    def opts(self) -> RecipeOptions:
        return self.settings if self.settings is not None else self.options.model_validate({})

    def resolve(self, options: dict[str, Any] | None = None) -> RecipeConfig:
        """This recipe with its options applied (validated; raises RecipeError)."""
        opts = parse_options(self, options or {})
        return replace(opts.operands(self), settings=opts)

    def summary(self) -> dict[str, Any]:
        def fmt(q: OperandQuant | None) -> str:
            return q.describe() if q else "BF16"

        wgrad = ("BF16" if self.is_reference or self.wgrad_hp
                 else f"dY {fmt(self.dy_wgrad or self.dy)}, x {fmt(self.x_wgrad or self.x)}")
        if self.hadamard_wgrad and not self.wgrad_hp:
            kind = {HadamardSigns.FIXED: "random", HadamardSigns.RANDOM: "random (signs drawn per GEMM)",
                    HadamardSigns.NONE: "deterministic"}
            wgrad += f", {self.hadamard_size}-point {kind[self.hadamard_signs]} Hadamard"
        w = fmt(self.w) + (f"; dgrad copy {fmt(self.w_dgrad)}" if self.w_dgrad else "")
        dy = fmt(self.dy)
        backward = self.opts.backward
        if not self.is_reference and backward != Backward.QUANTIZED:  # issue 17: the backward override
            hp = backward == Backward.HIGH_PRECISION
            w = fmt(self.w) + ("; dgrad on BF16 W" if hp else "; dgrad on the forward's dequantized W")
            dy = f"BF16 ({backward.value} backward)"
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


REFERENCE = RecipeConfig("bf16", "BF16 autocast: the reference")


def parse_options(recipe: RecipeConfig, options: dict[str, Any]) -> RecipeOptions:
    """A recipe's option values, validated by its options model (raises RecipeError)."""
    try:
        return recipe.options.model_validate(options)
    except ValidationError as err:
        valid = ", ".join(sorted(recipe.options.model_fields)) or "none"
        problems = "; ".join(  # a check across options (no loc) names its option itself
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else e["msg"].removeprefix("Value error, ")
            for e in err.errors()
        )
        raise RecipeError(f"recipe {recipe.name} options: {problems} (valid options: {valid})") from None


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
