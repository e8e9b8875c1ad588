"""FP8 attention matmuls (the `fp8_attention` option): S = Q K^T and O = P V with E4M3
operands and E5M2 output gradients, each tensor under one current scale (fmax / amax),
as the FP8 hybrid recipe quantizes its GEMMs (docs/numerics.md, `fp8_tensorwise`) and as
TransformerEngine's FP8 DotProductAttention keeps one scale per tensor (Q, K, V, S, dO,
dP). The products accumulate in FP32; softmax, its scale, the causal mask and the
logit cap run in FP32 between them."""

from __future__ import annotations

import math

import torch

from rcpforge.trainers.precision import reference
from rcpforge.trainers.precision.autocast import without_autocast
from rcpforge.trainers.precision.quantize import fake_quant_tensorwise


class _Fp8Matmul(torch.autograd.Function):
    """a @ b over the last two dimensions: forward on E4M3 copies of a and b, backward
    dA = Q(dO) Q(b)^T and dB = Q(a)^T Q(dO) with dO in E5M2 (the forward copies reused:
    a per-tensor scale does not depend on the orientation)."""

    @staticmethod
    @without_autocast
    def forward(ctx, a, b):
        aq, bq = fake_quant_tensorwise(a.float(), "e4m3"), fake_quant_tensorwise(b.float(), "e4m3")
        ctx.save_for_backward(aq, bq)
        return aq @ bq

    @staticmethod
    @without_autocast
    def backward(ctx, grad):
        aq, bq = ctx.saved_tensors
        gq = fake_quant_tensorwise(grad.float(), "e5m2")
        return gq @ bq.transpose(-2, -1), aq.transpose(-2, -1) @ gq


def _matmul(fp8: bool, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _Fp8Matmul.apply(a, b) if fp8 else reference.matmul(a, b)


class Fp8Attention:
    """Causal attention of one block with its QK^T and/or PV matmul in FP8 (the other,
    where placement keeps it in BF16, in BF16 operands with FP32 accumulation)."""

    def __init__(self, qk: bool = True, pv: bool = True):
        self.qk, self.pv = qk, pv

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cap: float | None) -> torch.Tensor:
        if not self.qk:
            q, k = q.bfloat16(), k.bfloat16()
        logits = _matmul(self.qk, q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        if cap is not None:
            logits = cap * torch.tanh(logits / cap)
        t = q.shape[-2]
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        p = logits.masked_fill(~mask, float("-inf")).softmax(-1)
        if not self.pv:
            p, v = p.bfloat16(), v.bfloat16()
        return _matmul(self.pv, p, v)
