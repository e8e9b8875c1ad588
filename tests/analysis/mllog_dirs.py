"""Write submission results directories of `:::MLLOG` lines for checker tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rcpforge.trainers.contract.mllog.read import SAMPLES_BENCHMARKS


def mllog(key: str, value: Any, **metadata: Any) -> str:
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME",
                                     "key": key, "value": value, "metadata": metadata})


def result_lines(benchmark: str, bs: Any, converge_at: float | None, evals: int = 3) -> list[str]:
    """A run that evaluates `evals` times, the last at `converge_at`; None = aborted."""
    unit = "samples_count" if benchmark in SAMPLES_BENCHMARKS else "epoch_num"
    end = converge_at if converge_at is not None else 1000.0
    lines = ["noise before the log", mllog("submission_benchmark", benchmark), mllog("global_batch_size", bs),
             mllog("run_start", None)]
    for i in range(1, evals + 1):
        lines.append("[1,0]<stdout>: " + mllog("eval_accuracy", 0.1 * i, **{unit: end * i / evals}))
    lines.append(mllog("run_stop", None, status="success" if converge_at is not None else "aborted"))
    return lines


def write_results(folder: Path, benchmark: str, bs: Any, values: list[float | None]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, v in enumerate(values):
        (folder / f"result_{i}.txt").write_text("\n".join(result_lines(benchmark, bs, v)) + "\n")
    return folder


def rcp_file(path: Path, benchmark: str, records: dict[int, list[float]]) -> Path:
    key = "samples to converge" if benchmark in ("llama2_70b_lora", "flux1") else "Epochs to converge"
    body = {f"{benchmark}_ref_{bs}": {"Benchmark": benchmark, "Creator": "test", "When": "now", "Platform": "x",
                                      "Precision": "bf16", "BS": bs, "Hyperparams": {}, key: vals}
            for bs, vals in records.items()}
    path.write_text(json.dumps(body))
    return path
