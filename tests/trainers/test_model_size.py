"""The tiny LM's size from its shapes (trainers/tinylm/size.py) against the torch module
it describes: every parameter counted, whatever the stability options add."""

from __future__ import annotations

import pytest

from rcpforge.trainers.registry import validate_trainer_settings
from rcpforge.trainers.tinylm.settings import TinyLMSettings
from rcpforge.trainers.tinylm.size import model_size


@pytest.mark.parametrize("shape", [
    {"d_model": 64, "n_heads": 4},
    {"d_model": 96, "n_heads": 6, "n_layers": 3, "context": 32, "mlp_ratio": 2},
    {"d_model": 32, "n_heads": 2, "qk_layernorm": True, "ln_after_qkv": True, "ln_after_proj_fc2": True,
     "data": {"source": "text", "path": "corpus.txt"}},
])
def test_parameters_are_the_torch_modules(shape):
    from rcpforge.trainers.tinylm.model import TinyLM

    settings = validate_trainer_settings({"kind": "tinylm", **shape})
    cfg = TinyLMSettings.model_validate({k: v for k, v in settings.items() if k != "kind"})
    vocab = 256 if shape.get("data") else cfg.data.vocab  # type: ignore[union-attr]
    module = TinyLM(cfg, vocab, lambda x, w, b: x)
    params, flops = model_size(settings)
    assert params == sum(p.numel() for p in module.parameters())
    blocks = sum(p.numel() for name, p in module.named_parameters() if name.startswith("blocks.") and
                 name.endswith(".weight") and p.dim() == 2)  # the blocks' linear weights: N, without embeddings
    assert flops == 6 * blocks + 6 * cfg.n_layers * cfg.context * cfg.d_model
