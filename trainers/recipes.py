"""The recipe registry: one public name, one frozen config (torch-free).

A recipe says how the inputs of each linear-layer GEMM are quantized: the forward
operands x and W, and the output gradient dY used by the dgrad and wgrad GEMMs.
Everything that is not a linear-layer GEMM input runs in the reference precision
(bf16 autocast). A new recipe is one entry in `RECIPES`; its numerics live in
`trainers/precision/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

ElementFormat = Literal["e4m3", "e5m2", "e2m1"]
Scaling = Literal["tensorwise"]


@dataclass(frozen=True)
class OperandQuant:
    """How one GEMM operand is quantized (fake-quant: quantize, then dequantize)."""

    fmt: ElementFormat
    scaling: Scaling = "tensorwise"

    def describe(self) -> str:
        return f"{self.fmt.upper()} {self.scaling}"


class RecipeOptions(BaseModel):
    """Options every recipe accepts; recipes with options subclass this."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class RecipeConfig:
    name: str
    description: str
    x: OperandQuant | None = None
    w: OperandQuant | None = None
    dy: OperandQuant | None = None
    options: type[RecipeOptions] = field(default=RecipeOptions)

    def __post_init__(self) -> None:
        quantized = [q is not None for q in (self.x, self.w, self.dy)]
        if any(quantized) and not all(quantized):
            raise ValueError(f"recipe {self.name}: quantize x, W and dY together or none")

    @property
    def is_reference(self) -> bool:
        return self.x is None

    def summary(self) -> dict[str, Any]:
        def fmt(q: OperandQuant | None) -> str:
            return q.describe() if q else "BF16"

        return {
            "name": self.name,
            "description": self.description,
            "x": fmt(self.x),
            "w": fmt(self.w),
            "dy": fmt(self.dy),
            "options": sorted(self.options.model_fields),
        }


_E4M3 = OperandQuant("e4m3")
_E5M2 = OperandQuant("e5m2")

RECIPES: dict[str, RecipeConfig] = {
    r.name: r
    for r in (
        RecipeConfig("bf16", "BF16 autocast: the reference"),
        RecipeConfig(
            "fp8_tensorwise",
            "FP8 hybrid: E4M3 forward, E5M2 gradients, current per-tensor scaling",
            x=_E4M3,
            w=_E4M3,
            dy=_E5M2,
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
            f"unknown recipe {name!r}; valid recipes: {', '.join(sorted(RECIPES))}"
        ) from None


def validate_recipe_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Return the options with defaults filled in, or raise naming the bad option."""
    recipe = get_recipe(name)
    try:
        parsed = recipe.options.model_validate(options)
    except ValidationError as err:
        valid = ", ".join(sorted(recipe.options.model_fields)) or "none"
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()
        )
        raise RecipeError(f"recipe {name} options: {problems} (valid options: {valid})") from None
    return parsed.model_dump(mode="json")
