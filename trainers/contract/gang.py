"""The shape of one run as a gang of processes, and the environment each of them gets.

A run is `nodes x processes_per_node` ranks (its world size). A backend starts the gang's
*tasks*: one per rank, or one per node for a program that starts its node's ranks
itself (`per_node`, a `torchrun` command). Every task gets the standard rendezvous
variables, so `torch.distributed.init_process_group(init_method="env://")` works in it;
task 0 is the run's one reporter (it alone writes to MLflow and the MLLOG result).

Plain types only: the backends (cluster), the executor (orchestrator) and the trainers
all read this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# The gang task a process is (0: the reporter); set by every backend on every task.
TASK_VAR = "RCPFORGE_GANG_TASK"
TASKS_VAR = "RCPFORGE_GANG_TASKS"
# Variables a backend sets on a task; a reused worker clears them between jobs.
RENDEZVOUS_VARS = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
    "MASTER_ADDR", "MASTER_PORT", TASK_VAR, TASKS_VAR,
)


@dataclass(frozen=True)
class Gang:
    nodes: int = 1
    processes_per_node: int = 1
    gpus_per_process: int = 0
    # One task per node that starts the node's ranks itself (torchrun), not one per rank.
    per_node: bool = False

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes_per_node

    @property
    def tasks_per_node(self) -> int:
        return 1 if self.per_node else self.processes_per_node

    @property
    def tasks(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def gpus_per_task(self) -> int:
        return self.gpus_per_process * (self.processes_per_node if self.per_node else 1)

    def node_of(self, task: int) -> int:
        return task // self.tasks_per_node

    def task_env(self, task: int, master_addr: str, master_port: int | str,
                 devices: list[str] | None = None) -> dict[str, str]:
        """The environment of gang task `task` (0 .. tasks-1). `devices`: the GPU ids
        this task may use (CUDA_VISIBLE_DEVICES), where the backend pins them itself.
        (A port in words: `rcpforge run --dry-run`, where none is chosen yet.)"""
        node, local = divmod(task, self.tasks_per_node)
        env = {
            "WORLD_SIZE": str(self.world_size), "LOCAL_WORLD_SIZE": str(self.processes_per_node),
            "NODE_RANK": str(node), "GROUP_RANK": str(node),
            "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port),
            TASK_VAR: str(task), TASKS_VAR: str(self.tasks),
        }
        if not self.per_node:  # torchrun sets a per-node program's RANK and LOCAL_RANK itself
            env.update(RANK=str(task), LOCAL_RANK=str(local))
        if devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
        return env


def gang_task() -> int:
    """This process's gang task (0 outside any gang: a test, a direct call)."""
    return int(os.environ.get(TASK_VAR, "0") or 0)


@dataclass(frozen=True)
class Rank:
    """Where a training process stands in its run's world, from the rendezvous variables."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> Rank:
        env = os.environ
        return cls(int(env.get("RANK", "0") or 0), int(env.get("WORLD_SIZE", "1") or 1),
                   int(env.get("LOCAL_RANK", "0") or 0))
