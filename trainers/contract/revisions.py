"""The numerics revision of each recipe: bumped when a change to the code gives a recipe
different results. It enters the run key (above 1), so a resumed campaign re-runs that
recipe's old runs instead of pooling results of two different numerics. Part of the run
contract, not of the recipe registry, because the run key is computed from it wherever
a RunSpec is (the registry's configs read their revision from here)."""

from __future__ import annotations

RECIPE_REVISIONS: dict[str, int] = {
    "fp8_channelwise": 2,  # 2: the forward GEMM on BF16 with the channel scales on its output
    "fp8_rowwise_gw_hp": 2,  # 2: W tensorwise for dgrad, the wgrad GEMM in BF16 (was FP32)
    "fp8_block": 2,  # 2: TE's power-of-two scales by default (were FP32), the option use_f32_scales
    "mor": 2,  # 2: per tensor, each GEMM as E4M3 tensorwise or BF16 (was FP32)
}


def recipe_revision(name: str) -> int:
    """The numerics revision of a recipe (1 for names never revised, such as a command
    trainer's own recipes)."""
    return RECIPE_REVISIONS.get(name, 1)
