"""What a model needs from a recipe beyond one GEMM: a GEMM per named layer (with the
layers its placement names in BF16, as the run's precision map says:
trainers/tinylm/precision_map.py), the FP8 attention matmuls and the residual-stream
ablation."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import torch

from rcpforge.trainers.precision import reference
from rcpforge.trainers.precision.attention import Fp8Attention
from rcpforge.trainers.precision.fused import TorchaoFp8Gemm
from rcpforge.trainers.precision.linear import LinearFn, QuantizedGemm
from rcpforge.trainers.precision.telemetry import Telemetry
from rcpforge.trainers.recipes.config import RecipeConfig
from rcpforge.trainers.tinylm.precision_map import ATTENTION_MATMULS, BF16, in_bf16, layer_gemms

# Each phase of a schedule gets stochastic-rounding streams of its own: the second
# phase's layer indices start here, past any model's layer count and below the seed
# multiplier, so they are neither the first phase's streams again nor another seed's.
PHASE_STREAMS = 1 << 19


def gemm_factory(
    recipe: RecipeConfig, n_blocks: int, telemetry: Telemetry | None = None, seed: int = 0, rank: int = 0,
    fp8_gemm: str | None = None, phase: int = 0,
) -> Callable[[str], LinearFn]:
    """name ("blocks.3.fc1") -> that layer's GEMM. Each layer gets its own state and its
    own stochastic-rounding stream, derived from the run seed, the layer's order, the
    schedule's phase (0 before a switch, 1 after) and, in a data-parallel run, the rank
    (rank 0's streams are those of a one-process run). `fp8_gemm`: the path
    (trainers/precision/fused.py `fp8_gemm_path`); None decides real FP8 by the device
    the GEMM runs on."""
    opts = recipe.opts
    counter = iter(range(phase * PHASE_STREAMS, (phase + 1) * PHASE_STREAMS))

    def make(name: str) -> LinearFn:
        index = next(counter)
        if recipe.is_reference or in_bf16(name, opts, n_blocks):
            return reference.linear
        if fp8_gemm == "torchao":
            return TorchaoFp8Gemm(recipe, name)
        real = None if fp8_gemm is None else fp8_gemm == "scaled_mm"
        return QuantizedGemm(recipe, name, telemetry, seed=seed * 1_000_003 + index + (rank << 40), real_fp8=real)

    return make


def attention_factory(recipe: RecipeConfig, n_blocks: int) -> Callable[[str], Fp8Attention | None]:
    """block name ("blocks.0") -> its FP8 attention matmuls, where the recipe's
    fp8_attention option and placement quantize either (the run's precision map)."""

    def make(block: str) -> Fp8Attention | None:
        qk, pv = (layer_gemms(recipe, f"{block}.{m}", n_blocks)["fprop"] != BF16 for m in ATTENTION_MATMULS)
        return Fp8Attention(qk, pv) if qk or pv else None

    return make


def switch_recipe(model: torch.nn.Module, recipe: RecipeConfig, n_blocks: int, telemetry: Telemetry | None = None,
                  seed: int = 0, rank: int = 0, fp8_gemm: str | None = None) -> None:
    """The recipe's schedule: from now on every linear layer's GEMM, the attention
    matmuls and the residual ablation are the target recipe's (its placement applies),
    with fresh numeric state: new delayed-scaling histories, the second phase's own
    stochastic-rounding streams (numbered in the order the model made its layers)."""
    make = gemm_factory(recipe, n_blocks, telemetry, seed, rank, fp8_gemm, phase=1)
    attend = attention_factory(recipe, n_blocks)
    for name, m in model.named_modules():
        if hasattr(m, "gemm"):
            m.gemm = make(name)
        if hasattr(m, "attn_fn"):
            m.attn_fn = attend(name)
    model.residual = residual_quantizer(recipe)  # type: ignore[assignment]


class _StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, fn):
        return fn(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def numeric_states(model: torch.nn.Module) -> dict[str, dict]:
    """The numeric state of every quantized GEMM in the model, by module name."""
    return {name: m.gemm.numeric_state() for name, m in model.named_modules()
            if isinstance(getattr(m, "gemm", None), QuantizedGemm)}


def load_numeric_states(model: torch.nn.Module, states: dict[str, dict]) -> None:
    for name, m in model.named_modules():
        if name in states:
            m.gemm.load_numeric_state(states[name])


def residual_quantizer(recipe: RecipeConfig) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The ablation that fake-quantizes the residual stream with the recipe's activation
    format (per tensor where the recipe's scaling keeps state), gradients straight
    through; None when the recipe does not ask for it."""
    if not recipe.opts.quantize_residual:
        return None
    if recipe.is_reference:
        fn = lambda t: t.bfloat16().to(t.dtype)  # noqa: E731
    else:
        q = recipe.x
        if q.scaling == "delayed":
            q = replace(q, scaling="tensorwise")
        gemm = QuantizedGemm(replace(recipe, x=q), "residual")

        def fn(t: torch.Tensor) -> torch.Tensor:
            return gemm.quantize(t.reshape(-1, t.shape[-1]).float(), "x").reshape(t.shape).to(t.dtype)

    return lambda t: _StraightThrough.apply(t, fn)
