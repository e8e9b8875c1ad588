"""Cells whose runs ran on more than one kind of GPU. A convergence factor compares
distributions of tokens-to-target; runs of one cell on an H100 and on an A100 (other
kernels, other accumulation orders, other FP8 paths) are two distributions pooled as one.
`launch.gpu_type` pins a campaign's runs to one kind (docs/clusters.md)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `status` uses `mixed_line` without the analysis' libraries
    import pyarrow as pa


def mixed_line(cell: str, accelerators: Counter) -> str | None:
    """The flag of one cell, given its runs per GPU name; None on one kind (or none known)."""
    if len(accelerators) < 2:
        return None
    kinds = ", ".join(f"{n} on {name}" for name, n in sorted(accelerators.items(), key=lambda kv: (-kv[1], kv[0])))
    return (f"{cell}: its runs ran on {len(accelerators)} kinds of GPU ({kinds}); mixing hardware mixes "
            "convergence: pin launch.gpu_type, or compare the kinds as separate campaigns")


def cell_name(model: str, recipe: str, batch_size: int) -> str:
    return f"{model + ' ' if model else ''}{recipe} at batch size {batch_size}"


def mixed_hardware_notes(runs: pa.Table) -> list[str]:
    """A line per cell (model, recipe, batch size) of the runs table whose runs name more
    than one accelerator."""
    if "accelerator" not in runs.column_names:  # a table made before runs named their GPUs
        return []
    found: dict[tuple[str, str, int], Counter] = defaultdict(Counter)
    models = runs["model"].to_pylist() if "model" in runs.column_names else [""] * runs.num_rows
    columns = (runs[c].to_pylist() for c in ("recipe", "batch_size", "accelerator"))
    for model, recipe, batch_size, accelerator in zip(models, *columns, strict=True):
        if accelerator:
            found[(model or "", recipe, batch_size)][accelerator] += 1
    lines = (mixed_line(cell_name(*cell), counts) for cell, counts in sorted(found.items()))
    return [line for line in lines if line]
