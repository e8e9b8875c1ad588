"""A small decoder-only transformer (pre-LN, learned positions) whose linear layers in
the blocks take their GEMM from the run's recipe; embeddings, norms, attention matmuls
and the LM head stay in the reference precision."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainers.precision.linear import LinearFn
from trainers.tinylm.settings import TinyLMSettings


class RecipeLinear(nn.Linear):
    def __init__(self, d_in: int, d_out: int, gemm: LinearFn):
        super().__init__(d_in, d_out)
        self.gemm = gemm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gemm(x, self.weight, self.bias)


class Block(nn.Module):
    def __init__(self, cfg: TinyLMSettings, gemm: LinearFn):
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = RecipeLinear(d, 3 * d, gemm)
        self.proj = RecipeLinear(d, d, gemm)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = RecipeLinear(d, cfg.mlp_ratio * d, gemm)
        self.fc2 = RecipeLinear(cfg.mlp_ratio * d, d, gemm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, cfg: TinyLMSettings, vocab: int, gemm: LinearFn):
        super().__init__()
        self.tok = nn.Embedding(vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, gemm) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, vocab, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1])
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x)).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
