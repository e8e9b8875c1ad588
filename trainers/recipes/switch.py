"""A recipe's schedule to any recipe: from a token count on, the run trains under another
recipe (torch-free).

    recipes:
      - nvfp4:
          switch_to: mxfp8                 # a named recipe, or {name: {options}}: a named
          switch_from_tokens: 600000       # one with options, `base:`, or written by operands
      - nvfp4: {switch_to: {mxfp8: {scale_mode: rceil, bf16_last_blocks: 1}}, switch_from_tokens: 600000}

The switch happens at the first step that starts at or after `switch_from_tokens`: every
linear layer's GEMM is rebuilt under the target (its placement, its fp8_attention and
quantize_residual options apply), with fresh numeric state (new delayed-scaling
histories; stochastic-rounding streams of their own, not the first phase's again).
`bf16_from_tokens: N` is the short form of `switch_to: bf16, switch_from_tokens: N` and
keeps its own run keys. The target is normalized (`{name: options with defaults}`) into
the recipe's options, so its whole definition enters the run key; a recipe without a
switch has no such keys, so its run key stays what it was. This module reads and checks
the switch itself; trainers/recipes/resolve.py validates and resolves its target, as it
does any recipe.

Refused with a one-line error naming `recipes.<name>.<field>`: a target that is unknown or
invalid, that has a schedule of its own (a run switches once), that is the recipe itself
(the switch would change nothing), a switch on the BF16 reference or beside
bf16_from_tokens, and one half of the pair without the other; a switch point not below
budget.max_tokens is refused by the campaign (sweeps/spec.py), a target placement that does not
fit the model by the tiny LM's settings (`TinyLMSettings.check_campaign`)."""

from __future__ import annotations

from typing import Any

from rcpforge.trainers.recipes.config import RecipeConfig, RecipeError, same_recipe

SWITCH_KEYS = ("switch_to", "switch_from_tokens")
# a target's own schedule: the keys that give one
_TARGET_SCHEDULE = (*SWITCH_KEYS, "bf16_from_tokens")


def split_switch(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A recipe's options without the switch, and the switch's keys given (may be none)."""
    if not isinstance(options, dict):
        return options, {}
    return ({k: v for k, v in options.items() if k not in SWITCH_KEYS},
            {k: options[k] for k in SWITCH_KEYS if k in options})


def _target(name: str, raw: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(raw, str):
        return raw, {}
    if isinstance(raw, dict) and len(raw) == 1:
        (target, options), = raw.items()
        if isinstance(target, str) and isinstance(options or {}, dict):
            return target, dict(options or {})
    raise RecipeError(f"recipes.{name}.switch_to: a recipe name (switch_to: mxfp8) or one recipe with its options "
                      f"(switch_to: {{mxfp8: {{scale_mode: rceil}}}}), got {raw!r}")


def reworded(name: str, target: str, err: RecipeError) -> RecipeError:
    """The target's own error, placed under the recipe's switch_to."""
    message = str(err)
    for prefix in (f"recipes.{target}.", f"recipes.{target}:"):
        if message.startswith(prefix):
            return RecipeError(f"recipes.{name}.switch_to.{target}{message[len(prefix) - 1:]}")
    return RecipeError(f"recipes.{name}.switch_to: {message}")


def switch_target(name: str, source: RecipeConfig, switch: dict[str, Any]) -> tuple[int, str, dict[str, Any]]:
    """The switch of recipe `name` (`source`: the recipe without it), checked but for its
    target's own options: the token count, the target's name and its options as given."""
    if "switch_to" not in switch:
        raise RecipeError(f"recipes.{name}.switch_to: switch_from_tokens needs the recipe to switch to; add "
                          "switch_to: <recipe> (e.g. switch_to: bf16)")
    at = switch.get("switch_from_tokens")
    if "switch_from_tokens" not in switch:
        raise RecipeError(f"recipes.{name}.switch_from_tokens: switch_to needs the token count to switch at; add "
                          "switch_from_tokens: N (e.g. 600000)")
    if isinstance(at, bool) or not isinstance(at, int) or at < 0:
        raise RecipeError(f"recipes.{name}.switch_from_tokens: a token count is a whole number >= 0, got {at!r}")
    if source.is_reference:
        raise RecipeError(f"recipes.{name}.switch_to: {name} runs every GEMM in BF16 (the reference); a schedule "
                          "switches a quantized recipe: give switch_to to that one, or remove it")
    if source.opts.bf16_from_tokens is not None:
        raise RecipeError(f"recipes.{name}.bf16_from_tokens: give either bf16_from_tokens or switch_to, not both "
                          "(switch_to: bf16 is the same switch); remove one")
    target, options = _target(name, switch["switch_to"])
    own = [k for k in _TARGET_SCHEDULE if options.get(k) is not None]
    if own:
        raise RecipeError(f"recipes.{name}.switch_to.{target}.{own[0]}: a switch target has no schedule of its own "
                          "(a run switches once); remove it")
    return at, target, options


def check_changes(name: str, target: str, source: RecipeConfig, resolved: RecipeConfig) -> None:
    """Refuse a switch to a target (`resolved`) that trains as the recipe itself."""
    if same_recipe(source, resolved):
        raise RecipeError(f"recipes.{name}.switch_to: {target} trains as {name} itself, so the switch would change "
                          "nothing; name another recipe (or other options), or remove switch_to")
