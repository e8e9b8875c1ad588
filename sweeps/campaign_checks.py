"""Checks of a campaign's settings against its budget and its backend: each one setting
that validates alone but cannot work with another (torch-free)."""

from __future__ import annotations

from typing import Any

from rcpforge.sweeps.launch import LaunchSpec


def check_warmup_within_budget(hparams: dict[int, dict[str, Any]], max_tokens: int) -> None:
    """A warm-up longer than the budget never reaches the LR the campaign asks for."""
    for bs, hp in sorted(hparams.items()):
        warmup = hp.get("warmup_tokens")
        if isinstance(warmup, (int, float)) and warmup > max_tokens:
            raise ValueError(
                f"hparams.{bs}.warmup_tokens: {warmup:,} is above budget.max_tokens ({max_tokens:,}), so the run "
                "would end before its LR finished warming up; lower warmup_tokens or raise budget.max_tokens"
            )


def check_schedule_within_budget(recipes: list[Any], max_tokens: int) -> None:
    """A recipe that switches (to BF16, or to its switch_to) after the budget never switches."""
    for r in recipes:
        for option in ("bf16_from_tokens", "switch_from_tokens"):
            at = r.options.get(option)
            if isinstance(at, int) and at >= max_tokens:
                switch_to = r.options.get("switch_to")  # normalized: {target: options}; absent for BF16
                target = next(iter(switch_to)) if isinstance(switch_to, dict) and switch_to else "BF16"
                raise ValueError(
                    f"recipes.{r.name}.{option}: {at:,} is not below budget.max_tokens ({max_tokens:,}), so the "
                    f"run would never switch to {target}; lower it or raise budget.max_tokens"
                )


def check_launch_against_backend(launch: LaunchSpec, backend: Any) -> None:
    """The run's shape is `launch:`; a backend setting that also says it must agree."""
    if backend.kind == "slurm" and backend.nodes != 1:
        raise ValueError(
            f"backend.nodes: a run's nodes are set in launch.nodes now (the gang every backend starts); "
            f"remove backend.nodes and write launch: {{nodes: {backend.nodes}}}"
        )
    if backend.kind == "slurm" and backend.gpus_per_node and launch.gpus_per_process:
        raise ValueError(
            "backend.gpus_per_node: set either it or launch.gpus_per_process (GPUs per rank), not both; "
            "remove backend.gpus_per_node"
        )
    if backend.kind == "ray" and backend.num_gpus and launch.gpus_per_process:
        raise ValueError(
            "backend.num_gpus: set either it or launch.gpus_per_process (GPUs per rank), not both; "
            "remove backend.num_gpus"
        )
