"""What the MLCommons RCP checker fixes per benchmark, in one place for the campaign
validator (`sweeps`) and the analysis: the runs of one submission, N (`submission_runs`
of `mlperf_logging.rcp_checker`, usage "training"). An RCP needs 2N runs; the checker's
minimum acceptable mean uses N - 2 submission runs, so a different N gives different
numbers from the checker's on the same RCP file."""

from __future__ import annotations

import json
import re
from pathlib import Path

SUBMISSION_RUNS: dict[str, int] = {
    "bert": 10, "dlrm_dcnv2": 10, "gpt3": 3, "maskrcnn": 5, "resnet": 5, "ssd": 5,
    "retinanet": 5, "unet3d": 40, "rnnt": 10, "stable_diffusion": 10, "gnn": 10,
    "rgat": 10, "llama2_70b_lora": 10, "flux1": 10, "llama31_405b": 3, "llama31_8b": 10,
    "gpt_oss_20b": 10, "deepseekv3_671b": 3, "qwen35_397b_grpo": 3, "dlrmv4": 10,
}


def name_as_benchmark(campaign: str) -> str:
    """A campaign's benchmark where it sets no rcp.benchmark: its name, in the characters
    a benchmark name may hold."""
    return re.sub(r"[^A-Za-z0-9_]", "_", campaign)


def benchmark_origin(benchmark: str, campaign: str) -> str:
    """Where a campaign's benchmark comes from, for a message that names a clash with it."""
    return ("rcp.benchmark unset, so the campaign's name" if benchmark == name_as_benchmark(campaign)
            else "the campaign's rcp.benchmark")


# systems/<system>.json fields a round's analysis and import keep (setting name -> field)
SYSTEM_FIELDS: dict[str, str] = {
    "submitter": "submitter", "division": "division", "framework": "framework",
    "accelerator": "accelerator_model_name", "accelerators_per_node": "accelerators_per_node",
    "nodes": "number_of_nodes",
}


def system_settings(folder: Path) -> dict[str, str]:
    """What a results directory's place in a round says: `<submitter>/results/<system>/
    <benchmark>/` gives submitter and system, and `<submitter>/systems/<system>.json`
    beside it the `SYSTEM_FIELDS` it fills in. Empty for a folder outside that layout;
    submitter and system only where the system file is missing or unreadable."""
    folder = folder.resolve()
    if folder.parent.parent.name != "results":
        return {}
    submitter_dir, system = folder.parents[2], folder.parent.name
    found = {"submitter": submitter_dir.name, "system": system}
    try:
        described = json.loads((submitter_dir / "systems" / f"{system}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return found
    if isinstance(described, dict):
        for name, key in SYSTEM_FIELDS.items():
            value = described.get(key)
            if value not in (None, ""):
                found[name] = str(value).strip()
    return found
