"""The reference precision's GEMMs (BF16 operands, FP32 accumulation, a BF16 output) on a
CPU at the speed of its FP32 GEMMs.

On a GPU a BF16 GEMM multiplies BF16 operands exactly (the product of two 8-bit
significands has at most 16 bits, within FP32's 24), accumulates the products in FP32
and rounds the output to BF16 once. torch's CPU BF16 GEMM (oneDNN, or torch's own loops
where the CPU lacks AVX512-BF16 and AMX) does the same arithmetic 10-25x slower than an
FP32 GEMM of the same shape on such CPUs (2.5-7.5 against 55-79 GFLOP/s for the tiny LM's
shapes on an AVX2 AMD EPYC). So on a CPU every BF16 GEMM of the tiny LM is computed here
as that GEMM is defined:

- each operand is rounded to BF16 (round to nearest even, as `Tensor.bfloat16()`; an
  operand that is BF16 already, or BF16-exact as a fake-quantized core is, is unchanged)
  and held in FP32, which is exact;
- the products and their sum are computed by an FP32 `torch.mm`/`torch.bmm` (every
  product exact, the sum accumulated in FP32 in the order of the FP32 kernel);
- a bias is added to the FP32 sum before the output rounding (addmm's beta*C), as BF16
  values (the bias rounded to BF16, as autocast rounds it);
- the output is rounded to BF16 once (round to nearest even); where a GEMM's output
  feeds an FP32 computation inside attention (S = Q K^T before the softmax), it is kept
  in FP32, as a fused attention kernel keeps it.

What differs from oneDNN's CPU BF16 kernels: only the order in which the FP32 partial
sums are added (oneDNN blocks the contraction in its own way, and torch's fallback loops
in theirs), so an output can differ in the last bit of the FP32 sum before its BF16
rounding, and then, rarely, by one BF16 unit. Both are GEMMs with FP32 accumulation on
BF16 operands; neither is more exact. The backward GEMMs are the same GEMMs (dX = dY W,
dW = dY^T X on BF16 dY, W and X, FP32 accumulation, BF16 outputs), as autocast's backward
runs them. Everything that is not a GEMM (norms, activations, softmax, the bias gradient's
reduction, the optimizer) keeps the precision it has under BF16 autocast.

On CUDA nothing here is used: the native BF16 GEMMs run under autocast. The switch from
torch's CPU BF16 kernels to these GEMMs is one numerics revision of the tiny LM on a CPU
(trainers/contract/revisions.py, `TRAINER_REVISIONS`)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from rcpforge.trainers.precision.autocast import without_autocast

_BF16 = torch.bfloat16


def bf16_values(t: torch.Tensor) -> torch.Tensor:
    """t rounded to BF16 (round to nearest even), held in FP32 (exact)."""
    if t.dtype == _BF16:
        return t.float()
    return t.bfloat16().float()


def gemm_bf16_out(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b for BF16-exact FP32 operands (2-D or batched), accumulated in FP32, the
    output rounded to BF16: the GEMM of a BF16 tensor core, at FP32 GEMM speed."""
    return torch.matmul(a, b).bfloat16()


def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b as the bf16 recipe's GEMM (operands rounded to BF16, FP32 accumulation, the
    output rounded to BF16), widened to FP32: on a CPU as above, elsewhere natively."""
    if a.is_cpu:
        return gemm_bf16_out(bf16_values(a), bf16_values(b)).float()
    return (a.bfloat16() @ b.bfloat16()).float()


class _Linear(torch.autograd.Function):
    """y = x W^T + b as autocast's BF16 linear layer computes it, its GEMMs as above."""

    @staticmethod
    @without_autocast
    def forward(ctx, x, weight, bias):
        x2 = bf16_values(x.reshape(-1, x.shape[-1]))
        w = bf16_values(weight)
        out = torch.mm(x2, w.t()) if bias is None else torch.addmm(bf16_values(bias), x2, w.t())
        ctx.save_for_backward(x2, w)
        ctx.shape, ctx.dtypes = x.shape, (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        return out.bfloat16().reshape(*x.shape[:-1], -1)

    @staticmethod
    @without_autocast
    def backward(ctx, grad):
        x2, w = ctx.saved_tensors
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        g = grad.reshape(-1, grad.shape[-1])
        g32 = bf16_values(g)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = gemm_bf16_out(g32, w).to(x_dtype).reshape(ctx.shape)
        if ctx.needs_input_grad[1]:
            dw = gemm_bf16_out(g32.t(), x2).to(w_dtype)
        if b_dtype is not None and ctx.needs_input_grad[2]:
            # autocast's bias gradient: the BF16 output gradient summed over the tokens
            # (FP32 accumulation, a BF16 result)
            db = g.to(_BF16).sum(0).to(b_dtype)
        return dx, dw, db


class _Matmul(torch.autograd.Function):
    """a @ b (batched) on BF16 operands with FP32 accumulation; the output rounded to
    BF16, or kept in FP32 (`fp32_out`). Backward: dA = dO B^T and dB = A^T dO on BF16 dO,
    each output rounded to BF16."""

    @staticmethod
    @without_autocast
    def forward(ctx, a, b, fp32_out: bool):
        a32, b32 = bf16_values(a), bf16_values(b)
        ctx.save_for_backward(a32, b32)
        ctx.dtypes = (a.dtype, b.dtype)
        out = torch.matmul(a32, b32)
        return out if fp32_out else out.bfloat16()

    @staticmethod
    @without_autocast
    def backward(ctx, grad):
        a32, b32 = ctx.saved_tensors
        g32 = bf16_values(grad)
        da = gemm_bf16_out(g32, b32.transpose(-2, -1)).to(ctx.dtypes[0]) if ctx.needs_input_grad[0] else None
        db = gemm_bf16_out(a32.transpose(-2, -1), g32).to(ctx.dtypes[1]) if ctx.needs_input_grad[1] else None
        return da, db, None


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The reference precision's linear layer: on a CPU the BF16 GEMM above (a BF16
    output, as autocast's); elsewhere F.linear, which autocast runs natively in BF16."""
    if x.is_cpu:
        return _Linear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The reference precision's a @ b: on a CPU the BF16 GEMM above (a BF16 output);
    elsewhere torch's matmul, which autocast runs natively in BF16."""
    if a.is_cpu:
        return _Matmul.apply(a, b, False)
    return a.float() @ b.float()


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention in the reference precision on a CPU, as BF16 autocast's fused
    attention computes it: S = Q K^T on BF16 operands into FP32 (not rounded), scaled by
    1/sqrt(head dim), masked and softmaxed in FP32; P rounded to BF16 for O = P V, whose
    output is rounded to BF16. The backward is autograd's through these steps: dP = dO V^T
    into FP32, the softmax's backward in FP32, dS rounded to BF16 for dQ = dS K and
    dK = dS^T Q, and dV = P^T dO (each GEMM's output rounded to BF16)."""
    s = _Matmul.apply(q, k.transpose(-2, -1), True)
    return _Matmul.apply(_causal_softmax(s, 1.0 / math.sqrt(q.shape[-1])), v, False)


@without_autocast
def _causal_softmax(s: torch.Tensor, scale: float) -> torch.Tensor:
    t = s.shape[-1]
    mask = torch.ones(t, t, dtype=torch.bool, device=s.device).tril()
    return (s * scale).masked_fill(~mask, float("-inf")).softmax(-1)
