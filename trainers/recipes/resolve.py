"""A campaign's recipe entry into its normalized options and its frozen config
(torch-free): a named recipe with options, a named one under another name (`base:`),
one written by its operands, each with or without a switch to another recipe. This is
the one place that recurses into a switch target, which is itself such an entry."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rcpforge.trainers.contract.run_key import keyed
from rcpforge.trainers.recipes.config import RecipeConfig, RecipeError, Switch, parse_options
from rcpforge.trainers.recipes.named import RECIPES, check_recipe_name, get_recipe
from rcpforge.trainers.recipes.options import ADDED_LATER, Fp4Options, RecipeOptions
from rcpforge.trainers.recipes.switch import check_changes, reworded, split_switch, switch_target
from rcpforge.trainers.recipes.written import build_written, is_written, validate_written


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
    # an option whose default in this recipe is not the added-later one (nvfp4_4over6_te's
    # error) is always kept: dropped, it would resolve back to the recipe's default
    defaults = recipe.options.model_validate({}).model_dump(mode="json")
    added_later = {k: default for k, default in ADDED_LATER.items()
                   if k not in always and defaults.get(k, default) == default}
    out = keyed(opts.model_dump(mode="json"), added_later)
    placed = sorted(set(out) & set(added_later))
    if recipe.is_reference and placed:
        raise RecipeError(f"recipes.{recipe.name}.{placed[0]}: {recipe.name} runs every GEMM in BF16 already; "
                          "remove it")
    return out


def validate_recipe_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Return the options with defaults filled in, or raise naming the bad option: a
    named recipe's options, a named recipe's under another name (`base:`), or the
    normalized definition of a recipe written by its operands (trainers/recipes/written.py)."""
    options, switch = split_switch(options)
    if is_written(options):
        out = validate_written(name, options)
    elif "base" in options:
        recipe, rest = _based(name, options)
        out = {"base": recipe.name, **options_dump(recipe, parse_options(recipe, rest))}
    else:
        recipe = get_recipe(name)
        out = options_dump(recipe, parse_options(recipe, options))
    if switch:  # only where given: options at their defaults leave run keys as they were
        out.update(_switch(name, resolve_recipe(name, out), switch)[0])
    return out


def resolve_recipe(name: str, options: dict[str, Any] | None = None) -> RecipeConfig:
    """The frozen config of a recipe name with a campaign's options applied."""
    options, switch = split_switch(options or {})
    if is_written(options):
        recipe = build_written(name, options)
    elif "base" in options:
        named, rest = _based(name, options)
        recipe = replace(named.resolve(rest), name=name, base=named.name)
    else:
        recipe = get_recipe(name).resolve(options)
    return replace(recipe, schedule=_switch(name, recipe, switch)[1]) if switch else recipe


def _switch(name: str, source: RecipeConfig, switch: dict[str, Any]) -> tuple[dict[str, Any], Switch]:
    """The switch of recipe `name` (`source`: the recipe without it), normalized
    ({"switch_to": {target: its options, defaults filled in}, "switch_from_tokens": N})
    and resolved (validated; raises RecipeError)."""
    at, target, options = switch_target(name, source, switch)
    try:
        normalized = validate_recipe_options(target, options)
        resolved = resolve_recipe(target, normalized)
    except RecipeError as err:
        raise reworded(name, target, err) from None
    check_changes(name, target, source, resolved)
    return {"switch_to": {target: normalized}, "switch_from_tokens": at}, Switch(at, resolved)
