"""The numerics revisions: of each recipe, bumped when a change to the code gives a recipe
different results, and of a trainer on a device, bumped when a change gives every run of
that trainer there different results whatever its recipe. Each enters the run key above
1 (trainers/contract/run_key.py: `revision_entries`), so a resumed campaign re-runs the
old runs instead of pooling results of two different numerics. Part of the run
contract, not of the recipe registry, because the run key is computed from them wherever
a RunSpec is (the registry's configs read their revision from here)."""

from __future__ import annotations

from rcpforge.trainers.contract.run_key import FIRST_REVISION

RECIPE_REVISIONS: dict[str, int] = {
    "fp8_channelwise": 2,  # 2: the forward GEMM on BF16 with the channel scales on its output
    "fp8_rowwise_gw_hp": 2,  # 2: W tensorwise for dgrad, the wgrad GEMM in BF16 (was FP32)
    "fp8_block": 2,  # 2: TE's power-of-two scales by default (were FP32), the option use_f32_scales
    "mor": 2,  # 2: per tensor, each GEMM as E4M3 tensorwise or BF16 (was FP32)
}


def recipe_revision(name: str) -> int:
    """The numerics revision of a recipe (1 for names never revised, such as a command
    trainer's own recipes)."""
    return RECIPE_REVISIONS.get(name, FIRST_REVISION)


# (trainer kind, device) -> revision. A command trainer's runs, and the tiny LM's on CUDA,
# are never revised here: their keys stay what they were.
TRAINER_REVISIONS: dict[tuple[str, str], int] = {
    # 2: the BF16 GEMMs on a CPU as FP32 GEMMs on BF16 operands, the output rounded to
    # BF16 (trainers/precision/reference.py); were torch's CPU BF16 kernels under autocast
    ("tinylm", "cpu"): 2,
}


def trainer_revision(trainer: dict) -> int:
    """The numerics revision of a run's trainer on the device it trains on (the tiny LM's
    `device`, CPU by default), 1 where never revised."""
    kind = str(trainer.get("kind"))
    device = str(trainer.get("device", "cpu")) if kind == "tinylm" else ""
    return TRAINER_REVISIONS.get((kind, device), FIRST_REVISION)
