"""The per-layer precision map of a tiny-LM run (torch-free): which GEMM of which layer
runs in which format, after the recipe's placement and schedule, and the MLPerf 6.1
disclosure keys derived from it. It is the tiny LM's: the layers it names are its model's
(trainers/tinylm/settings.py).

Every GEMM of the model has three products: `fprop` (the forward product), `dgrad` (the
gradient of its first input) and `wgrad` (of its second: the weight of a linear layer).
For a linear layer `y = x W^T` they are x.W^T, dY.W and dY^T.x; for the attention
matmuls (`attn_qk`: S = Q K^T, `attn_pv`: O = P V) the dgrads are dQ = dS.K and
dP = dO.V^T, the wgrads dK = dS^T.Q and dV = P^T.dO. A product's format is its two
operands' (`e5m2 x e4m3`: the gradient in E5M2 times an E4M3 operand), or one name where
both agree; `bf16` is the reference precision (BF16 autocast).

The map is a pure function of the recipe, the model's depth and the run's tokens per
step, so it is written into the run's MLLOG header before training (the event
`rcpforge_precision_map`, `rcpforge.trainers.contract.mllog.read.PRECISION_MAP_KEY`), beside the
disclosure keys it gives; the same function decides the model's placement
(`rcpforge.trainers.precision.layers.gemm_factory`), so the two cannot disagree. A run with a
schedule (`switch_to` with `switch_from_tokens`, or `bf16_from_tokens`) has two phases:
the recipe's map from 0 tokens and the target recipe's (its own placement; all-BF16 for
bf16_from_tokens) from the first step at or after the switch; the disclosure keys are
the lowest over both."""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from rcpforge.trainers.recipes.config import RecipeConfig
from rcpforge.trainers.recipes.operands import OperandQuant
from rcpforge.trainers.recipes.options import Backward, RecipeOptions
from rcpforge.trainers.tinylm.settings import ATTENTION_MATMULS, LINEAR_LAYERS

GEMMS = ("fprop", "dgrad", "wgrad")
HEAD = "lm_head"
BF16 = "bf16"
# Gradients are all-reduced over a data-parallel gang in FP32 (trainers/tinylm/distributed.py).
COMM = {"gradients": "fp32"}
# A GEMM's format name -> MLPerf's value (trainers/command/settings.py MLPERF_PRECISIONS),
# lowest first: FP4 below FP8 below BF16; NVFP4 ranks below MXFP4 so a run mixing both
# discloses NVFP4, as `mlperf_precision` did; FP6 between them.
_MLPERF = {"nvfp4": "nvfp4", "mxfp4": "mxfp4", "e2m1": "mxfp4", "mxfp6": "mxfp6", "e2m3": "mxfp6", "e3m2": "mxfp6",
           "e4m3": "fp8", "e5m2": "fp8", "mxfp8": "fp8", "mxfp8_e5m2": "fp8", "e4m3|bf16": "fp8",
           "bf16": "bfloat16", "fp32": "fp32"}
_ORDER = ("nvfp4", "mxfp4", "mxfp6", "fp8", "bfloat16", "fp32")
_BLOCK = re.compile(r"blocks\.(\d+)\.")
_ATTN_FP8 = {"fprop": "e4m3", "dgrad": "e5m2 x e4m3", "wgrad": "e5m2 x e4m3"}


def layer_names(n_blocks: int) -> list[str]:
    """Every GEMM-carrying layer of the tiny LM, in the order of its forward pass (the
    embeddings are lookups, not GEMMs)."""
    per_block = (LINEAR_LAYERS[0], *ATTENTION_MATMULS, *LINEAR_LAYERS[1:])
    return [f"blocks.{i}.{g}" for i in range(n_blocks) for g in per_block] + [HEAD]


def in_bf16(name: str, opts: RecipeOptions, n_blocks: int) -> bool:
    """Whether the recipe's placement keeps this layer's GEMMs in BF16: the first or last
    blocks, or a layer named (or matched by a pattern) in bf16_layers."""
    m = _BLOCK.match(name + ".")
    if m and not opts.bf16_first_blocks <= int(m.group(1)) < n_blocks - opts.bf16_last_blocks:
        return True
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in opts.bf16_layers)


def operand_format(q: OperandQuant | None) -> str:
    """One operand's format name: its element format, or the block format it makes."""
    if q is None:
        return BF16
    if q.scaling == "mor":
        return "e4m3|bf16"
    if q.fmt == "e2m1":
        return {"nvfp4": "nvfp4", "mx": "mxfp4"}.get(q.scaling, "e2m1")
    if q.fmt in ("e2m3", "e3m2"):  # OCP MXFP6 in either element format (MLPerf's one value: mxfp6)
        return "mxfp6" if q.scaling == "mx" else q.fmt
    if q.scaling == "mx":  # OCP MXFP8 in its E4M3 or E5M2 variant
        return "mxfp8" if q.fmt == "e4m3" else f"mxfp8_{q.fmt}"
    return q.fmt


def _product(a: OperandQuant | None, b: OperandQuant | None) -> str:
    fa, fb = operand_format(a), operand_format(b)
    return fa if fa == fb else f"{fa} x {fb}"


def linear_gemms(recipe: RecipeConfig) -> dict[str, str]:
    """The formats of a quantized linear layer's three GEMMs under the recipe."""
    if recipe.is_reference:
        return dict.fromkeys(GEMMS, BF16)
    fprop = _product(recipe.x, recipe.w)
    backward = recipe.opts.backward  # the backward override: dgrad and wgrad on other operands
    if backward == Backward.HIGH_PRECISION:  # on the unquantized BF16 dY, W and x
        return {"fprop": fprop, "dgrad": BF16, "wgrad": BF16}
    if backward == Backward.DEQUANTIZED:  # dY in BF16, W and x as the forward quantized them
        return {"fprop": fprop, "dgrad": _product(None, recipe.w), "wgrad": _product(None, recipe.x)}
    wgrad = BF16 if recipe.wgrad_hp else _product(recipe.dy_wgrad or recipe.dy, recipe.x_wgrad or recipe.x)
    return {"fprop": fprop, "dgrad": _product(recipe.dy, recipe.w_dgrad or recipe.w), "wgrad": wgrad}


def quantized_attention(recipe: RecipeConfig) -> bool:
    return not recipe.is_reference and bool(getattr(recipe.opts, "fp8_attention", False))


def layer_gemms(recipe: RecipeConfig, name: str, n_blocks: int) -> dict[str, str]:
    """One layer's GEMM formats after the recipe's placement."""
    kind = name.rsplit(".", 1)[-1]
    if name == HEAD or recipe.is_reference or in_bf16(name, recipe.opts, n_blocks):
        return dict.fromkeys(GEMMS, BF16)
    if kind in ATTENTION_MATMULS:
        return dict(_ATTN_FP8) if quantized_attention(recipe) else dict.fromkeys(GEMMS, BF16)
    return linear_gemms(recipe)


def switch_tokens(recipe: RecipeConfig, tokens_per_step: int, max_tokens: int | None = None) -> int | None:
    """The token count at which the run's schedule switches recipe (to BF16 or to its
    switch_to): the first step that starts at or after the switch point (None: no
    switch, or none within max_tokens)."""
    switch = recipe.switch
    if switch is None:
        return None
    at = -(-switch.from_tokens // tokens_per_step) * tokens_per_step
    return None if max_tokens is not None and at >= max_tokens else at


def _phase_layers(recipe: RecipeConfig, n_blocks: int) -> dict[str, list[str]]:
    return {n: [layer_gemms(recipe, n, n_blocks)[g] for g in GEMMS] for n in layer_names(n_blocks)}


def precision_map(recipe: RecipeConfig, n_blocks: int, tokens_per_step: int = 1,
                  max_tokens: int | None = None) -> dict[str, Any]:
    """The run's map: `{"gemms": [...], "phases": [{"from_tokens": 0, "layers": {layer:
    [fprop, dgrad, wgrad]}}, ...], "comm": {...}}` (one phase more after a switch)."""
    phases = [{"from_tokens": 0, "layers": _phase_layers(recipe, n_blocks)}]
    at = switch_tokens(recipe, tokens_per_step, max_tokens)
    if at is not None:
        assert recipe.switch is not None
        later = {"from_tokens": at, "layers": _phase_layers(recipe.switch.to, n_blocks)}
        phases = [later] if at == 0 else [*phases, later]  # switched from the first step: the recipe never runs
    return {"gemms": list(GEMMS), "phases": phases, "comm": dict(COMM)}


def lowest(formats: list[str]) -> str:
    """The lowest of some GEMM format names in MLPerf's words."""
    values = {_MLPERF[part] for f in formats for part in f.split(" x ")} or {"bfloat16"}
    return min(values, key=_ORDER.index)


def mlperf_precision(recipe: RecipeConfig) -> str:
    """The recipe's lowest precision in a quantized linear layer, in the words of MLPerf's
    `lowest_numerical_precision_in_linear` (FP8 formats are `fp8`; FP4 by its scaling),
    before placement: a run discloses its precision map's."""
    return lowest(list(linear_gemms(recipe).values()))


def disclosed_precisions(pmap: dict[str, Any]) -> dict[str, str]:
    """MLPerf's `lowest_numerical_precision_in_linear` / `_attn` / `_comm` from a map:
    the lowest format of any phase's linear layers (the LM head included), attention
    matmuls, and gradient communication."""
    linear: list[str] = []
    attn: list[str] = []
    for phase in pmap["phases"]:
        for name, gemms in phase["layers"].items():
            (attn if name.rsplit(".", 1)[-1] in ATTENTION_MATMULS else linear).extend(gemms)
    return {"lowest_numerical_precision_in_linear": lowest(linear),
            "lowest_numerical_precision_in_attn": lowest(attn),
            "lowest_numerical_precision_in_comm": lowest(list(pmap["comm"].values()))}
