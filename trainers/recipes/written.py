"""Recipes written in the campaign file: a recipe given by its GEMM operands (torch-free).

    recipes:
      - bf16
      - my_nvfp4:                      # any name that is not a named recipe
          x:  {format: e2m1, scaling: nvfp4, block: 16}
          w:  {format: e2m1, scaling: nvfp4, tile: [16, 16]}
          dy: {format: e2m1, scaling: nvfp4, block: 16, rounding: sr}
          wgrad: {transform: hadamard}  # or {precision: bf16}; default: quantized, no transform
          # wgrad: {transform: hadamard, size: 32, signs: random}  # mxfp4_sr_rht's transform
          # w_dgrad: {...}              # W's copy for the dgrad GEMM, where unlike w
          # x_wgrad, dy_wgrad: {...}    # the wgrad GEMM's copies, where unlike x and dy
          # quantize_residual, placement (bf16_first_blocks, bf16_last_blocks,
          # bf16_layers), schedule (bf16_from_tokens, or switch_to with switch_from_tokens:
          # trainers/recipes/switch.py), fp8_attention; amax_history_len and margin
          # (delayed operands); threshold (mor operands)

An operand is `format` (e4m3, e5m2, e2m1; e2m3, e3m2: OCP MX FP6), `scaling` (tensorwise, delayed, channelwise,
rowwise, block, mx, nvfp4, mor), `block` (1-D blocks along the GEMM's contraction) or
`tile` ([rows, cols], 2-D tiles), `scale` (the scale type: fp32, pow2, floor, rceil,
nvfp4, nvfp4_clamped, nvfp4_4over6 (and its conventions nvfp4_4over6_mae, _256, _mae_256),
nvfp4_rowscaled; each scaling has a default) and `rounding` (rne, sr). The
definition above is the named `nvfp4` recipe: it trains bit for bit like it. The
normalized definition (every field, defaults filled in) is the recipe's options, so it
enters the run key; a named recipe's options are what they always were."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rcpforge.trainers.contract.run_key import keyed
from rcpforge.trainers.recipes.config import HadamardSigns, RecipeConfig, RecipeError
from rcpforge.trainers.recipes.named import RECIPES, check_recipe_name
from rcpforge.trainers.recipes.operands import ElementFormat, OperandQuant, ScaleMode, Scaling
from rcpforge.trainers.recipes.options import DelayedOptions

OPERANDS = ("x", "w", "dy", "w_dgrad", "x_wgrad", "dy_wgrad")
# the scale types each scaling takes; the first is its default
_SCALES: dict[str, tuple[str, ...]] = {
    "tensorwise": ("fp32", "pow2"),
    "delayed": ("fp32",),
    "channelwise": ("fp32", "pow2"),
    "rowwise": ("pow2", "fp32"),
    "block": ("pow2", "fp32"),
    "mx": ("floor", "rceil"),
    "nvfp4": ("nvfp4", "nvfp4_clamped", "nvfp4_4over6", "nvfp4_rowscaled", "nvfp4_4over6_mae", "nvfp4_4over6_256",
              "nvfp4_4over6_mae_256"),
    "mor": ("fp32",),
}
_DEFAULT_BLOCK = {"mx": 32, "nvfp4": 16}
# options that only operands of one scaling read
_SCALING_OPTIONS = (("amax_history_len", "delayed"), ("margin", "delayed"), ("threshold", "mor"))
_FORMATS = {"delayed": ("e4m3", "e5m2"), "nvfp4": ("e2m1",), "mor": ("e4m3",)}
# options a written recipe got after its definitions entered run keys, with their
# defaults: they enter its run key only off them (trainers/contract/run_key.py: `keyed`),
# so those keys stay what they were; so do the wgrad transform's size and signs
_ADDED_LATER = {"fp8_attention": False, "backward": "quantized"}
_WGRAD_ADDED_LATER = {"size": 16, "signs": "fixed"}


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OperandSpec(_Strict):
    format: ElementFormat
    scaling: Scaling = "tensorwise"
    block: int | None = Field(None, ge=2)
    tile: tuple[int, int] | None = None
    scale: ScaleMode | None = None
    rounding: Literal["rne", "sr"] = "rne"


class WgradSpec(_Strict):
    # quantized: the wgrad GEMM takes the quantized copies of dY and x; bf16: it runs in
    # the reference precision (torchao rowwise_with_gw_hp)
    precision: Literal["quantized", "bf16"] = "quantized"
    # hadamard: a Hadamard transform on the wgrad copies of x and dY along the token
    # dimension, by default the 16-point one with fixed random signs (the nvfp4 recipe's)
    transform: Literal["none", "hadamard"] = "none"
    # its size (a power of two: 32 as mxfp4_sr_rht and mxfp4_dethad) and signs: fixed random
    # ones, random ones drawn per wgrad GEMM from the layer's stream (arXiv 2502.20586), or
    # none, the deterministic Hadamard (arXiv 2605.09825)
    size: int = Field(16, ge=2, le=256)
    signs: HadamardSigns = HadamardSigns.FIXED


class WrittenOptions(DelayedOptions):
    """The options of a written recipe: every recipe's (the residual ablation, placement,
    schedule), the delayed-scaling history (delayed operands) and the MoR threshold (mor
    operands)."""

    threshold: float = Field(0.05, gt=0.0)


def is_written(options: dict[str, Any]) -> bool:
    """Whether a campaign's recipe options define the recipe by its operands."""
    return isinstance(options, dict) and any(k in options for k in ("x", "w", "dy"))


def _fail(name: str, where: str, message: str) -> RecipeError:
    return RecipeError(f"recipes.{name}{'.' + where if where else ''}: {message}")


def _pydantic_problem(name: str, prefix: str, err: ValidationError) -> RecipeError:
    e = err.errors()[0]
    loc = ".".join(str(p) for p in e["loc"])
    where = f"{prefix}.{loc}" if prefix and loc else prefix or loc
    if e["type"] == "extra_forbidden":
        return _fail(name, where, "is not a field of a written recipe here; check its spelling "
                     "(see `rcpforge recipes`)")
    if e["type"] == "missing":
        return _fail(name, where, "is required; add it (e.g. format: e4m3)")
    return _fail(name, where, f"{e['msg']} (got {e['input']!r})")


def _operand(name: str, which: str, raw: Any) -> OperandSpec:
    if not isinstance(raw, dict):
        raise _fail(name, which, f"an operand is a mapping {{format: ..., scaling: ...}}, got {raw!r}")
    try:
        spec = OperandSpec.model_validate(raw)
    except ValidationError as err:
        raise _pydantic_problem(name, which, err) from None
    scales = _SCALES[spec.scaling]
    formats = _FORMATS.get(spec.scaling)
    if formats and spec.format not in formats:
        raise _fail(name, f"{which}.format", f"{spec.scaling} scaling takes {' or '.join(formats)}, not {spec.format}")
    if spec.scale is not None and spec.scale not in scales:
        raise _fail(name, f"{which}.scale", f"{spec.scaling} scaling takes scale {' or '.join(scales)}, "
                    f"not {spec.scale}; leave it out for {scales[0]}")
    if spec.block is not None and spec.tile is not None:
        raise _fail(name, f"{which}.tile", "give either block (1-D) or tile (2-D), not both")
    blocked = spec.block is not None or spec.tile is not None
    if spec.scaling in ("tensorwise", "delayed", "channelwise", "rowwise") and blocked:
        raise _fail(name, f"{which}.{'block' if spec.block is not None else 'tile'}",
                    f"{spec.scaling} scaling has no blocks; remove it or use scaling: block")
    if spec.scaling == "block" and not blocked:
        raise _fail(name, f"{which}.block", "block scaling needs block: N (1xN) or tile: [R, C]")
    if spec.scaling == "mx" and spec.tile is not None:
        raise _fail(name, f"{which}.tile", "MX scales are per 1-D block along the contraction; use block: 32")
    if spec.scale == "nvfp4_rowscaled" and spec.tile is not None:
        raise _fail(name, f"{which}.tile", "row-scaled NVFP4 has one global scale per row: use block: 16, not a tile")
    if spec.tile is not None and min(spec.tile) < 1:
        raise _fail(name, f"{which}.tile", f"tile sides are positive, got {list(spec.tile)}")
    if spec.rounding == "sr" and spec.scaling in ("delayed", "mor"):
        raise _fail(name, f"{which}.rounding", f"{spec.scaling} scaling rounds to nearest; remove rounding: sr")
    if spec.format == "e2m1" and spec.scaling not in ("mx", "nvfp4", "block"):
        raise _fail(name, f"{which}.scaling", "E2M1 needs block scales; use scaling: mx, nvfp4 or block")
    if spec.format in ("e2m3", "e3m2") and spec.scaling not in ("mx", "block"):
        raise _fail(name, f"{which}.scaling", f"{spec.format.upper()} (FP6) needs block scales; use scaling: mx "
                    "(MXFP6) or block")
    block = spec.block if spec.block is not None else (None if spec.tile else _DEFAULT_BLOCK.get(spec.scaling))
    return spec.model_copy(update={"scale": spec.scale or scales[0], "block": block})


def validate_written(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The normalized definition of a written recipe (every field, defaults filled in),
    or a RecipeError naming the recipe, the operand and the field, and the fix."""
    check_recipe_name(name)
    if name in RECIPES:
        raise _fail(name, "", f"{name} is a named recipe; give your written recipe its own name "
                    f"(e.g. my_{name}), or drop x/w/dy to use the named one")
    missing = [o for o in ("x", "w", "dy") if o not in options]
    if missing:
        raise _fail(name, missing[0], "a written recipe gives x, w and dy (w_dgrad and wgrad where they differ); "
                    f"add {', '.join(missing)}")
    operands = {o: _operand(name, o, options[o]) for o in OPERANDS if options.get(o) is not None}
    try:
        wgrad = WgradSpec.model_validate(options.get("wgrad") or {})
    except ValidationError as err:
        raise _pydantic_problem(name, "wgrad", err) from None
    if wgrad.precision == "bf16" and wgrad.transform != "none":
        raise _fail(name, "wgrad.transform", "a BF16 wgrad GEMM quantizes nothing to transform; remove one of them")
    for field, default in _WGRAD_ADDED_LATER.items():
        if wgrad.transform == "none" and getattr(wgrad, field) != default:
            raise _fail(name, f"wgrad.{field}", "is the Hadamard transform's; add transform: hadamard or remove it")
    if wgrad.size & (wgrad.size - 1):
        raise _fail(name, "wgrad.size", f"a Hadamard transform's size is a power of two (16, 32, 64, ...), "
                    f"not {wgrad.size}")
    for which in ("x_wgrad", "dy_wgrad"):
        if which in operands and wgrad.precision == "bf16":
            raise _fail(name, which, "the wgrad GEMM runs in BF16 (wgrad: {precision: bf16}); remove one of them")
    rest = {k: v for k, v in options.items() if k not in (*OPERANDS, "wgrad")}
    try:
        opts = WrittenOptions.model_validate(rest)
    except ValidationError as err:
        raise _pydantic_problem(name, "", err) from None
    scalings = {q.scaling for q in operands.values()}
    unused = {option for option, scaling in _SCALING_OPTIONS if scaling not in scalings}
    for option in sorted(unused & set(rest)):
        raise _fail(name, option, f"applies to {dict(_SCALING_OPTIONS)[option]} operands only, and this recipe "
                    "has none; remove it")
    out: dict[str, Any] = {o: q.model_dump(mode="json") for o, q in operands.items()}
    out["wgrad"] = keyed(wgrad.model_dump(mode="json"), _WGRAD_ADDED_LATER)
    out.update(keyed({k: v for k, v in opts.model_dump(mode="json").items() if k not in unused}, _ADDED_LATER))
    return out


def build_written(name: str, options: dict[str, Any]) -> RecipeConfig:
    """The frozen config of a written recipe (validated; raises RecipeError)."""
    d = validate_written(name, options)

    def quant(which: str) -> OperandQuant | None:
        q = d.get(which)
        if q is None:
            return None
        block = q["block"] if q["block"] is not None else (tuple(q["tile"]) if q["tile"] else None)
        return OperandQuant(q["format"], q["scaling"], block, q["scale"], q["rounding"])

    settings = WrittenOptions.model_validate({k: v for k, v in d.items() if k not in (*OPERANDS, "wgrad")})
    return RecipeConfig(
        name, "written in the campaign file",
        x=quant("x"), w=quant("w"), dy=quant("dy"), w_dgrad=quant("w_dgrad"),
        x_wgrad=quant("x_wgrad"), dy_wgrad=quant("dy_wgrad"),
        wgrad_hp=d["wgrad"]["precision"] == "bf16", hadamard_wgrad=d["wgrad"]["transform"] == "hadamard",
        hadamard_size=d["wgrad"].get("size", _WGRAD_ADDED_LATER["size"]),
        hadamard_signs=HadamardSigns(d["wgrad"].get("signs", _WGRAD_ADDED_LATER["signs"])),
        options=WrittenOptions, settings=settings,
    )


def grammar_lines() -> list[str]:
    """The grammar of a written recipe and of a grid, for `rcpforge recipes`."""
    scalings = "; ".join(
        f"{k} (scale {'|'.join(v)}{', block ' + str(_DEFAULT_BLOCK[k]) if k in _DEFAULT_BLOCK else ''}"
        f"{', format ' + '|'.join(_FORMATS[k]) if k in _FORMATS else ''})"
        for k, v in _SCALES.items()
    )
    return [
        "A recipe written in the campaign file: a name of your own (not a named recipe's) with its GEMM operands "
        "x, w (forward) and dy (dgrad, wgrad); where they differ w_dgrad (W's dgrad copy, from the FP32 W; "
        "rowwise and 1-D blocks along W's output features, dgrad's contraction), x_wgrad and dy_wgrad (the "
        "wgrad GEMM's copies, quantized again from the high-precision "
        "tensors), and wgrad: {precision: quantized|bf16, transform: none|hadamard, size: 16 (a power of two), "
        "signs: fixed|random|none} (the Hadamard on the wgrad copies of x and dY: fixed random signs as nvfp4's, "
        "random ones drawn per GEMM as mxfp4_sr_rht's, none: deterministic, as mxfp4_dethad's).",
        "An operand: format e4m3|e5m2|e2m1|e2m3|e3m2 (e2m3, e3m2: OCP MX FP6, with mx or block scaling), scaling "
        "(default tensorwise), block: N (1xN along the contraction) or "
        "tile: [R, C], scale (the first listed is the default), rounding rne|sr (default rne).",
        f"Scalings: {scalings}.",
        "Beside the operands: quantize_residual, placement and schedule (below); amax_history_len and margin "
        "(delayed operands); threshold (mor operands). {my_name: {base: nvfp4, option: value}} is a named recipe "
        "under your name.",
        "Placement and schedule (every quantized recipe): bf16_first_blocks: K, bf16_last_blocks: K, "
        "bf16_layers: [blocks.0.fc2, '*.qkv'] keep those GEMMs in BF16 (embedding and LM head always are); "
        "bf16_from_tokens: 600000 runs every GEMM in BF16 from that token count on; fp8_attention: true runs the "
        "attention matmuls (blocks.<i>.attn_qk, attn_pv; else BF16) in FP8: E4M3, E5M2 gradients, per tensor.",
        "Schedule to any recipe (every quantized recipe, named or written): switch_to: <recipe> (a name, or "
        "{name: {options}} as in recipes:, base: or operands too) with switch_from_tokens: N runs under that recipe "
        "from the first step at or after N tokens (its placement and options, fresh numeric state); the target has "
        "no schedule of its own and is not the recipe itself; switch_to: bf16 is bf16_from_tokens' switch. E.g.",
        "  recipes: [bf16, {nvfp4: {switch_to: mxfp8, switch_from_tokens: 600000}}]",
        "  recipes: [bf16, {nvfp4: {switch_to: {mxfp8: {scale_mode: rceil}}, switch_from_tokens: 600000}}]",
        "Backward override (every quantized recipe, named or written): backward: quantized (default: the recipe's "
        "own dgrad/wgrad operands) | high_precision (dgrad and wgrad on the unquantized BF16 dY, W, x) | "
        "dequantized (on the forward's dequantized W and x, dY in BF16).",
        "Example (the named nvfp4 written out; it trains bit for bit like it):",
        "  recipes:",
        "    - bf16",
        "    - my_nvfp4:",
        "        x:  {format: e2m1, scaling: nvfp4, block: 16}",
        "        w:  {format: e2m1, scaling: nvfp4, tile: [16, 16]}",
        "        dy: {format: e2m1, scaling: nvfp4, block: 16, rounding: sr}",
        "        wgrad: {transform: hadamard}",
        "Ablation grid: options under grid: given as lists expand into one recipe per combination, named "
        "<name>-<option>_<value>... (true/false as on/off; dy.rounding as dy_rounding; stochastic_rounding as sr):",
        "  recipes: [bf16, {nvfp4: {grid: {hadamard: [true, false], stochastic_rounding: [true, false]}}}]",
        "  -> nvfp4-hadamard_on-sr_on, nvfp4-hadamard_on-sr_off, nvfp4-hadamard_off-sr_on, nvfp4-hadamard_off-sr_off",
    ]
