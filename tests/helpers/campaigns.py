"""Small campaigns for tests: real tiny-LM runs of a few seconds each."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

# A 1-layer, d_model 32 model on an 8-symbol Markov language: converges in ~1-3 s.
TINY: dict[str, Any] = {
    "name": "tiny",
    "trainer": {
        "kind": "tinylm",
        "data": {"source": "markov", "vocab": 8, "branching": 2, "noise": 0.01, "data_seed": 7},
        "context": 8,
        "d_model": 32,
        "n_layers": 1,
        "n_heads": 2,
        "eval_tokens": 2048,
    },
    "target": {"metric": "eval_excess_loss", "mode": "min", "value": 0.3},
    "budget": {"max_tokens": 400_000, "eval_every_tokens": 4096},
    "recipes": ["bf16", "fp8_tensorwise"],
    "batch_sizes": [16, 64],
    "seeds": 3,
    "hparams": {16: {"lr": 0.01, "warmup_tokens": 8192}, 64: {"lr": 0.02, "warmup_tokens": 8192}},
    "backend": {"kind": "local", "workers": 2},
    "rcp": {"benchmark": "rcpforge_tiny", "submission_runs": 3},
}


def tiny_campaign(**overrides: Any) -> dict[str, Any]:
    data = copy.deepcopy(TINY)
    data.update(overrides)
    return data


def tiny_run_specs(recipes: list[Any], max_tokens: int = 512, every: int | None = None) -> dict[str, Any]:
    """The batch-size-16 run of each recipe, as a campaign expands it: 128 tokens a step,
    an eval every 256, a target no run reaches; `every`: checkpoint_every_evals."""
    from rcpforge.sweeps.expand import expand
    from rcpforge.sweeps.spec import parse_campaign

    data = tiny_campaign(
        recipes=recipes, seeds=1, budget={"max_tokens": max_tokens, "eval_every_tokens": 256},
        target={"metric": "eval_excess_loss", "mode": "min", "value": -1.0},
        hparams={16: {"lr": 0.01, "warmup_tokens": 256}, 64: {"lr": 0.02, "warmup_tokens": 256}},
    )
    if every is not None:
        data["trainer"] = dict(data["trainer"], checkpoint_every_evals=every)
    return {s.recipe: s for s in expand(parse_campaign(data)) if s.batch_size == 16}


def write_campaign(folder: Path, data: dict[str, Any], filename: str = "campaign.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
