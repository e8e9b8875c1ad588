"""What the MLCommons RCP checker fixes per benchmark, in one place for the campaign
validator (`sweeps`) and the analysis: the runs of one submission, N (`submission_runs`
of `mlperf_logging.rcp_checker`, usage "training"). An RCP needs 2N runs; the checker's
minimum acceptable mean uses N - 2 submission runs, so a different N gives different
numbers from the checker's on the same RCP file."""

from __future__ import annotations

SUBMISSION_RUNS: dict[str, int] = {
    "bert": 10, "dlrm_dcnv2": 10, "gpt3": 3, "maskrcnn": 5, "resnet": 5, "ssd": 5,
    "retinanet": 5, "unet3d": 40, "rnnt": 10, "stable_diffusion": 10, "gnn": 10,
    "rgat": 10, "llama2_70b_lora": 10, "flux1": 10, "llama31_405b": 3, "llama31_8b": 10,
    "gpt_oss_20b": 10, "deepseekv3_671b": 3, "qwen35_397b_grpo": 3, "dlrmv4": 10,
}
