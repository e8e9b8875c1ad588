"""The `launch:` section of a campaign: the shape of every run, the same on every backend.

    launch: {nodes: 2, processes_per_node: 8, gpus_per_process: 1}
    launch: {processes_per_node: 2}           # two CPU ranks on one node (gloo)
    launch: {gpu_type: h100}                  # no cell ever mixes hardware

The world size (nodes x processes_per_node) decides a run's result, so it enters the run
key; the default (one process on one node) keeps the keys of every campaign written
before this section existed. `--backend ray|slurm` keeps it. Torch-free.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rcpforge.trainers.contract.gang import Gang


class LaunchSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    nodes: int = Field(1, ge=1, le=4096)
    processes_per_node: int = Field(1, ge=1, le=1024)
    # GPUs each rank holds (0: a CPU run). Local runs are pinned to their own GPUs,
    # Slurm asks for --gpus-per-task, Ray puts them in each rank's bundle.
    gpus_per_process: int = Field(0, ge=0, le=64)
    # The GPU type every run of the campaign gets: Slurm `--constraint`, Ray
    # `accelerator_type` (e.g. H100). None: whatever the cluster gives.
    gpu_type: str | None = None

    @field_validator("gpu_type")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[A-Za-z0-9_.-]+$", value):
            raise ValueError(f"{value!r} is not a GPU type name (letters, digits, _ . -), e.g. H100")
        return value

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes_per_node

    def gang(self, per_node: bool = False) -> Gang:
        return Gang(self.nodes, self.processes_per_node, self.gpus_per_process, per_node)
