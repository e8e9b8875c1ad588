"""The quantized linear layer: one autograd function that fake-quantizes the inputs of
the three GEMMs (forward x.W^T, dgrad dY.W, wgrad dY^T.x) as the recipe names, with FP32
master weights and FP32 accumulation."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from trainers.precision.formats import fake_quant_tensorwise
from trainers.recipes import OperandQuant, RecipeConfig

LinearFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def quantize_operand(t: torch.Tensor, q: OperandQuant) -> torch.Tensor:
    if q.scaling == "tensorwise":
        return fake_quant_tensorwise(t, q.fmt)
    raise NotImplementedError(f"scaling {q.scaling!r}")


class _QuantizedLinear(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx, x, weight, bias, recipe: RecipeConfig):
        xq = quantize_operand(x, recipe.x)
        wq = quantize_operand(weight, recipe.w)
        ctx.save_for_backward(xq, wq)
        ctx.recipe = recipe
        ctx.has_bias = bias is not None
        return F.linear(xq, wq, bias)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, dy):
        xq, wq = ctx.saved_tensors
        dyq = quantize_operand(dy.float(), ctx.recipe.dy)
        dx = dyq @ wq
        dw = dyq.reshape(-1, dyq.shape[-1]).T @ xq.reshape(-1, xq.shape[-1])
        db = dy.float().reshape(-1, dy.shape[-1]).sum(0) if ctx.has_bias else None
        return dx, dw, db, None


def linear_for(recipe: RecipeConfig) -> LinearFn:
    """The GEMM function a recipe's linear layers call."""
    if recipe.is_reference:
        return F.linear
    return lambda x, w, b: _QuantizedLinear.apply(x, w, b, recipe)
