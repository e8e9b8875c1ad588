"""A small decoder-only transformer (pre-LN, learned positions) whose linear layers in
the blocks take their GEMM from the run's recipe; embeddings, norms and the LM head stay
in the reference precision, and the attention matmuls too unless the recipe asks for
FP8 attention."""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from rcpforge.trainers.precision import reference
from rcpforge.trainers.precision.linear import LinearFn
from rcpforge.trainers.tinylm.settings import TinyLMSettings

# name of a linear layer ("blocks.0.qkv") -> its GEMM
GemmFactory = Callable[[str], LinearFn]
Residual = Callable[[torch.Tensor], torch.Tensor]
# (q, k, v, logit cap) -> the attention output: quantized attention matmuls
Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "float | None"], torch.Tensor]
# a block's name ("blocks.0") -> its quantized attention, or None for BF16 autocast
AttentionFactory = Callable[[str], "Attention | None"]


class RecipeLinear(nn.Linear):
    def __init__(self, d_in: int, d_out: int, gemm: LinearFn):
        super().__init__(d_in, d_out)
        self.gemm = gemm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gemm(x, self.weight, self.bias)


def _norm_or_identity(on: bool, d: int) -> nn.Module:
    return nn.LayerNorm(d) if on else nn.Identity()


class Block(nn.Module):
    def __init__(self, cfg: TinyLMSettings, make_gemm: GemmFactory, prefix: str,
                 attn_fn: Attention | None = None):
        super().__init__()
        self.attn_fn = attn_fn
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.cap = cfg.softmax_cap
        self.ln1 = _norm_or_identity(not cfg.ln_after_qkv, d)
        self.qkv = RecipeLinear(d, 3 * d, make_gemm(f"{prefix}.qkv"))
        self.qkv_ln = _norm_or_identity(cfg.ln_after_qkv, 3 * d)
        self.q_ln = _norm_or_identity(cfg.qk_layernorm, d // cfg.n_heads)
        self.k_ln = _norm_or_identity(cfg.qk_layernorm, d // cfg.n_heads)
        self.proj = RecipeLinear(d, d, make_gemm(f"{prefix}.proj"))
        self.proj_ln = _norm_or_identity(cfg.ln_after_proj_fc2, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = RecipeLinear(d, cfg.mlp_ratio * d, make_gemm(f"{prefix}.fc1"))
        self.fc2 = RecipeLinear(cfg.mlp_ratio * d, d, make_gemm(f"{prefix}.fc2"))
        self.fc2_ln = _norm_or_identity(cfg.ln_after_proj_fc2, d)

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k = self.q_ln(q), self.k_ln(k)
        if self.attn_fn is not None:
            return self.attn_fn(q, k, v, self.cap)
        if self.cap is None:
            if q.is_cpu:  # BF16 GEMMs at FP32 GEMM speed (trainers/precision/reference.py)
                return reference.attention(q, k, v)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        t = q.shape[-2]
        logits = reference.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        logits = self.cap * torch.tanh(logits / self.cap)
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        return reference.matmul(logits.masked_fill(~mask, float("-inf")).softmax(-1).to(v.dtype), v)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv_ln(self.qkv(self.ln1(x))).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        att = self.attention(q, k, v)
        x = x + self.proj_ln(self.proj(att.transpose(1, 2).reshape(b, t, d)))
        return x + self.fc2_ln(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class TinyLM(nn.Module):
    def __init__(
        self, cfg: TinyLMSettings, vocab: int, gemm: LinearFn | GemmFactory,
        residual: Residual | None = None, per_layer: bool = False, attention: AttentionFactory | None = None,
    ):
        """`gemm` is one GEMM for every layer, or (per_layer) a factory called with each
        linear layer's name. `residual`, if given, is applied to the residual stream after
        every block (the residual-quantization ablation). `attention`, if given, gives each
        block its quantized attention matmuls (the fp8_attention option)."""
        super().__init__()
        make_gemm: GemmFactory = gemm if per_layer else (lambda _name: gemm)  # type: ignore[assignment]
        self.tok = nn.Embedding(vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.context, cfg.d_model)
        attend = attention or (lambda _name: None)
        self.blocks = nn.ModuleList(Block(cfg, make_gemm, f"blocks.{i}", attend(f"blocks.{i}"))
                                    for i in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, vocab, bias=False)
        self.residual = residual
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
            if self.residual is not None:
                x = self.residual(x)
        logits = reference.linear(self.ln_f(x), self.head.weight).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
