"""Ablation grids: a recipe's `grid:` options, given as lists, expand into one recipe per
combination, each under a generated name.

    recipes: [bf16, {nvfp4: {grid: {hadamard: [true, false], stochastic_rounding: [true, false]}}}]

is BF16 and four NVFP4 variants: nvfp4-hadamard_on-sr_on, nvfp4-hadamard_on-sr_off,
nvfp4-hadamard_off-sr_on, nvfp4-hadamard_off-sr_off. Only the values under `grid:` are
lists of alternatives: a list elsewhere keeps its meaning, and a grid value that is
itself a list is one alternative (`grid: {w.tile: [[16, 16], [32, 32]]}`).

The naming rule: the recipe's name, then for each grid option in the order written
`-<option>_<value>`. The option is its name (`.` of an operand field such as
`dy.rounding` becomes `_`; a few long ones are shortened, `GRID_ABBREVIATIONS`); the
value is `on`/`off` for true/false, a number as written (`-` becomes `m`: 1e-05 ->
1em05), a list joined by `x` (16x16), text with anything but letters, digits and `.`
as `_`. The names are letters, digits, `_`, `.` and `-`: safe in file names, run
names and CLI arguments. A variant of a named recipe carries `base: <that recipe>` in
its options (the tiny LM runs it as that recipe; a command trainer reads it as
{recipe_base}); a variant of a recipe written by its operands is written too. Two
recipes with one name (two values that print alike, or a listed recipe of that name)
are an error."""

from __future__ import annotations

import copy
import itertools
import re
from typing import Any

GRID_ABBREVIATIONS = {
    "stochastic_rounding": "sr",
    "quantize_residual": "qres",
    "bf16_last_blocks": "bf16last",
    "amax_history_len": "history",
    "use_f32_scales": "f32scales",
}
_OPERANDS = ("x", "w", "dy", "w_dgrad", "x_wgrad", "dy_wgrad", "wgrad")


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return "x".join(_value_text(v) for v in value)
    if isinstance(value, (int, float)):
        return str(value).replace("-", "m").replace("+", "")
    return re.sub(r"[^A-Za-z0-9.]", "_", str(value))


def variant_name(name: str, combo: dict[str, Any]) -> str:
    parts = [name]
    for key, value in combo.items():
        option = GRID_ABBREVIATIONS.get(key, key).replace(".", "_")
        parts.append(f"{option}_{_value_text(value)}")
    return "-".join(parts)


def _set(options: dict[str, Any], name: str, key: str, value: Any) -> None:
    """Set a grid value: an option, or `operand.field` of a written recipe."""
    if "." not in key:
        options[key] = value
        return
    operand, _, field = key.partition(".")
    if operand not in _OPERANDS or "." in field:
        raise ValueError(f"recipes.{name}.grid.{key}: a dotted grid option is <operand>.<field> with the operand "
                         f"one of {', '.join(_OPERANDS)} (e.g. dy.rounding)")
    if operand == "wgrad" and options.get("wgrad") is None:
        options["wgrad"] = {}  # every field of wgrad has a default
    if not isinstance(options.get(operand), dict):
        raise ValueError(f"recipes.{name}.grid.{key}: the recipe has no {operand} operand to vary; write "
                         f"{operand}: {{...}} beside grid:, or vary an option of the recipe")
    options[operand] = {**options[operand], field: value}


def expand_grid(name: str, options: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, options) of each recipe a campaign entry stands for: itself without a
    `grid:`, else one per combination of the grid's values (the first option varying
    slowest)."""
    if "grid" not in options:
        return [(name, options)]
    grid = options["grid"]
    if not isinstance(grid, dict) or not grid:
        raise ValueError(f"recipes.{name}.grid: a mapping of options to lists of values, e.g. "
                         "{hadamard: [true, false]}; got " + repr(grid))
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"recipes.{name}.grid.{key}: give a non-empty list of values to try, e.g. "
                             f"[{'true, false' if isinstance(values, bool) else repr(values)}] (got {values!r})")
        if key == "base" or key in options:
            raise ValueError(f"recipes.{name}.grid.{key}: also set outside grid:; keep it in one place")
    fixed = {k: v for k, v in options.items() if k != "grid"}
    written = any(k in fixed for k in ("x", "w", "dy"))
    out = []
    for values in itertools.product(*grid.values()):
        combo = dict(zip(grid, values, strict=True))
        variant = copy.deepcopy(fixed)
        if not written and "base" not in variant:
            variant["base"] = name
        for key, value in combo.items():
            _set(variant, name, key, value)
        out.append((variant_name(name, combo), variant))
    return out
