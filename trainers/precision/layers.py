"""What a model needs from a recipe beyond one GEMM: a GEMM per named layer (with the
last blocks in BF16 where a recipe says so) and the residual-stream ablation."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import replace
from typing import Callable

import torch
import torch.nn.functional as F

from trainers.precision.linear import LinearFn, QuantizedGemm
from trainers.precision.telemetry import Telemetry
from trainers.recipes import RecipeConfig, RecipeOptions

_BLOCK = re.compile(r"blocks\.(\d+)\.")


def gemm_factory(
    recipe: RecipeConfig, n_blocks: int, telemetry: Telemetry | None = None, seed: int = 0, rank: int = 0
) -> Callable[[str], LinearFn]:
    """name ("blocks.3.fc1") -> that layer's GEMM. Each layer gets its own state and its
    own stochastic-rounding stream, derived from the run seed, the layer's order and, in
    a data-parallel run, the rank (rank 0's streams are those of a one-process run)."""
    opts = recipe.opts
    counter = iter(range(1 << 30))

    def make(name: str) -> LinearFn:
        index = next(counter)
        if recipe.is_reference or in_bf16(name, opts, n_blocks):
            return F.linear
        return QuantizedGemm(recipe, name, telemetry, seed=seed * 1_000_003 + index + (rank << 40))

    return make


def in_bf16(name: str, opts: RecipeOptions, n_blocks: int) -> bool:
    """Whether the recipe's placement keeps this layer's GEMM in BF16: the first or last
    blocks, or a layer named (or matched by a pattern) in bf16_layers."""
    m = _BLOCK.match(name + ".")
    if m and not opts.bf16_first_blocks <= int(m.group(1)) < n_blocks - opts.bf16_last_blocks:
        return True
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in opts.bf16_layers)


def switch_to_bf16(model: torch.nn.Module) -> int:
    """The recipe's schedule: every quantized GEMM of the model (and the residual
    ablation) runs in BF16 from now on; the number of GEMMs switched."""
    switched = 0
    for m in model.modules():
        if isinstance(getattr(m, "gemm", None), QuantizedGemm):
            m.gemm = F.linear  # type: ignore[assignment]
            switched += 1
    if getattr(model, "residual", None) is not None:
        model.residual = None  # type: ignore[assignment]
    return switched


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
