"""The tiny LM's size from its shapes, without building it (torch-free: a campaign's model
axis records each model's size when the campaign loads).

Conventions, those of Kaplan et al. 2020 (arXiv 2001.08361), section 2.1:

- `params`: every parameter of the torch module (trainers/tinylm/model.py), embeddings,
  norms, biases and the LM head included: what "a 1.2B model" counts, and what
  `sum(p.numel() for p in model.parameters())` gives (tests/trainers/test_model_size.py
  holds the two equal);
- `flops_per_token`: training FLOPs per token, 6 N + 6 n_layers context d_model, with N the
  non-embedding parameters (the blocks' weights; no token or position embedding, no LM
  head): 2 FLOPs per weight and token forward, twice that backward, plus the attention
  scores and their weighted sum over the context (2 n_layers context d_model forward,
  tripled for training). Norms, biases, softmax and the LM head are left out, as there.
"""

from __future__ import annotations

from typing import Any

# The byte-level sources' vocabulary (trainers/tinylm/data.py: a text file's bytes).
BYTE_VOCAB = 256


def vocab_of(data: dict[str, Any]) -> int:
    """The vocabulary of a data source: its own `vocab` setting where it has one (the
    Markov source), else bytes."""
    vocab = data.get("vocab")
    return int(vocab) if isinstance(vocab, int) else BYTE_VOCAB


def _layernorm(on: bool, width: int) -> int:
    return 2 * width if on else 0


def block_weights(d: int, mlp_ratio: int) -> int:
    """The weights of one block's linear layers (no biases): N per block."""
    m = mlp_ratio * d
    return d * 3 * d + d * d + 2 * d * m


def block_params(cfg: dict[str, Any]) -> int:
    """Every parameter of one block, as `Block` makes it."""
    d, m = int(cfg["d_model"]), int(cfg["mlp_ratio"]) * int(cfg["d_model"])
    biases = 3 * d + d + m + d
    norms = (_layernorm(not cfg["ln_after_qkv"], d) + _layernorm(cfg["ln_after_qkv"], 3 * d)
             + 2 * _layernorm(cfg["qk_layernorm"], d // int(cfg["n_heads"]))
             + 2 * _layernorm(cfg["ln_after_proj_fc2"], d) + _layernorm(True, d))
    return block_weights(d, int(cfg["mlp_ratio"])) + biases + norms


def model_size(settings: dict[str, Any]) -> tuple[int, float]:
    """(parameters, training FLOPs per token) of the tiny LM of these trainer settings,
    validated (every shape setting present, defaults filled in)."""
    d, layers, context = int(settings["d_model"]), int(settings["n_layers"]), int(settings["context"])
    vocab = vocab_of(settings.get("data") or {})
    embeddings = vocab * d + context * d + vocab * d  # token, position, LM head
    params = layers * block_params(settings) + embeddings + _layernorm(True, d)
    non_embedding = layers * block_weights(d, int(settings["mlp_ratio"]))
    flops = 6.0 * non_embedding + 6.0 * layers * context * d
    return params, flops
