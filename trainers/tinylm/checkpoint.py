"""Checkpoints of a tiny-LM run: everything the training loop's future depends on (model,
optimizer, the data stream's and torch's RNG states, the quantized GEMMs' stochastic-
rounding streams and delayed-scaling histories, the position in tokens), so a resumed
run continues bit for bit as if it had never stopped."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rcpforge.trainers.precision.layers import load_numeric_states, numeric_states
from rcpforge.trainers.tinylm.distributed import DataParallel

FILENAME = "checkpoint.pt"
# One line per start of the run ("start tokens=N"): how a run shows it resumed.
STARTS = "starts.log"


def save(folder: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, data_rng: Any, loop: dict,
         dp: DataParallel | None = None) -> None:
    """In a data-parallel run every rank calls it (the numeric states are gathered) and
    rank 0 writes: the replicas agree on the rest."""
    numerics = numeric_states(model)
    by_rank = dp.gather(numerics) if dp is not None and dp.active else None
    if dp is not None and dp.rank != 0:
        return
    state = {
        "model": model.state_dict(),
        "opt": opt.state_dict(),
        "data_rng": data_rng.bit_generator.state,
        "torch_rng": torch.get_rng_state(),
        "numerics": numerics,
        "loop": dict(loop),
    }
    if by_rank is not None:
        state["numerics_by_rank"] = by_rank
    tmp = folder / f"{FILENAME}.tmp"
    torch.save(state, tmp)
    # A job killed mid-save leaves the previous checkpoint whole.
    os.replace(tmp, folder / FILENAME)


def restore(folder: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, data_rng: Any,
            rank: int = 0, before_numerics: Callable[[dict], None] | None = None) -> dict | None:
    """Load the run's checkpoint if it has one; returns the loop state, or None. Each rank
    of a data-parallel run takes its own numeric state. `before_numerics(loop)` is called
    before the numeric states load: a run past its schedule's switch rebuilds its GEMMs
    under the target recipe there, so the states saved from those GEMMs land in them."""
    path = folder / FILENAME
    if not path.exists():
        return None
    state = torch.load(path, weights_only=False)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    data_rng.bit_generator.state = state["data_rng"]
    by_rank = state.get("numerics_by_rank")
    if by_rank is not None and len(by_rank) <= rank:
        raise RuntimeError(
            f"{path} holds {len(by_rank)} ranks' numerics, not rank {rank}'s: the run's world size changed"
        )
    if before_numerics is not None:
        before_numerics(state["loop"])
    load_numeric_states(model, by_rank[rank] if by_rank is not None else state["numerics"])
    torch.set_rng_state(state["torch_rng"])
    return state["loop"]


def note_start(folder: Path, tokens: int) -> None:
    with open(folder / STARTS, "a") as fh:
        fh.write(f"start tokens={tokens}\n")


def discard(folder: Path) -> None:
    (folder / FILENAME).unlink(missing_ok=True)
