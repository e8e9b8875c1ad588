"""The tiny LM in data parallel: one replica per rank of the run's gang, over
`torch.distributed` (gloo on CPU, nccl on CUDA), started from the rendezvous variables
the backend sets (`trainers/contract/gang.py`).

What each rank does, and why the run is deterministic for a given world size:
- every rank draws the same global batch from the same seeded stream and trains on its
  own slice (batch_size / world_size rows), so tokens are counted globally and the data a
  run sees does not depend on how it is split;
- gradients are averaged over ranks in one all-reduce of a flat buffer (a fixed order:
  the same sums every time), with the step's loss riding along, so every rank takes the
  same divergence decision; every rank evaluates the whole eval set (its quantized
  GEMMs take part in the same collectives on every rank), and the replicas agree;
- numerics under a recipe (docs/numerics.md), where a scale could come from the local shard or
  be reduced over ranks: delayed scaling's amax is reduced (max) over the ranks before it
  enters the history, as TransformerEngine's `DelayedScaling(reduce_amax=True)` does over
  its FP8 group, so every rank holds the same history and scale; current (tensorwise,
  rowwise, block) scales, NVFP4's per-tensor global scale and MoR's per-tensor choice come
  from the rank's own shard of an activation or gradient, as TransformerEngine computes
  them without sequence parallelism (weights are replicated, so theirs agree anyway);
  stochastic rounding draws from a per-rank stream, so ranks do not round alike;
- a checkpoint is written by rank 0 and holds every rank's numeric state.
"""

from __future__ import annotations

import datetime
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from rcpforge.trainers.contract.gang import Rank

# A rank that waits this long on the others fails the run (the backend normally stops a
# gang whose rank died long before).
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=10)


class DataParallel:
    """This rank's place in the run; with one rank every method is the identity."""

    def __init__(self, world_size: int, device: torch.device):
        here = Rank.from_env()
        if here.world_size != world_size:
            raise RuntimeError(
                f"the run's world size is {world_size} (launch: in the campaign) but this process was started as "
                f"rank {here.rank} of {here.world_size} (WORLD_SIZE); launch it through an rcpforge backend"
            )
        self.rank, self.world = here.rank, world_size
        self._own_group = False
        if world_size > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method="env://",
                                    rank=here.rank, world_size=world_size, timeout=COLLECTIVE_TIMEOUT)
            self._own_group = True

    @property
    def active(self) -> bool:
        return self.world > 1

    def shard(self, batch: np.ndarray) -> np.ndarray:
        if batch.shape[0] % self.world:
            raise ValueError(f"batch of {batch.shape[0]} rows cannot be split over {self.world} ranks")
        rows = batch.shape[0] // self.world
        return batch[self.rank * rows : (self.rank + 1) * rows]

    def average_gradients(self, params: list[torch.nn.Parameter], loss: torch.Tensor) -> float:
        """Average every gradient over the ranks; returns the global mean loss."""
        if not self.active:
            return float(loss)
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1).float() for g in grads] + [loss.detach().reshape(1).float()])
        dist.all_reduce(flat)
        flat /= self.world
        offset = 0
        for p, g in zip(params, grads, strict=True):
            n = g.numel()
            if p.grad is None:
                p.grad = g
            p.grad.copy_(flat[offset : offset + n].view_as(g))
            offset += n
        return float(flat[-1])

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order (a collective: all ranks call it)."""
        if not self.active:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def close(self) -> None:
        if self._own_group and dist.is_initialized():
            dist.destroy_process_group()
            self._own_group = False
