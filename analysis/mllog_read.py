"""Read a submission's `result_*.txt` files the way the MLCommons RCP checker does
(`read_submission_file` / `get_submission_epochs`), quirks included: lines are found by
substring, not by key; `epoch_num` is rounded to 3 digits; the LLM benchmarks count
`samples_count`; the value is the last eval before a successful `run_stop`; a file
without one counts as 1e9; files are read as latin-1.

Where the checker itself would stop with an exception (bad JSON on a line it parses, a
missing key, a non-numeric epoch), `CheckerStops` names the file, the line and why; the
lines it does not parse are only warned about."""

from __future__ import annotations

import glob
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

TOKEN = ":::MLLOG "
NOT_CONVERGED = 1e9
SAMPLES_BENCHMARKS = frozenset({"llama2_70b_lora", "flux1", "llama31_405b", "llama31_8b", "gpt_oss_20b",
                                "deepseekv3_671b", "qwen35_397b_grpo", "dlrmv4"})


class CheckerStops(Exception):
    """The reference checker raises on this input; `where` says where, `reason` why."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


def _describe(err: BaseException) -> str:
    if isinstance(err, json.JSONDecodeError):
        return f"not valid JSON ({err.msg} at column {err.colno})"
    if isinstance(err, KeyError):
        return f"missing key {err.args[0]!r}"
    return f"{type(err).__name__}: {err}"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class FileReading:
    not_converged: int = 1
    epochs: Any = NOT_CONVERGED
    bs: Any = -1
    benchmark: Any = None
    warnings: list[str] = field(default_factory=list)


class _Reader:
    """The state the checker keeps while it walks one file's lines."""

    def __init__(self, ruleset: str, use_train_samples: bool, warn: Callable[[str], None]):
        self.ruleset, self.use_train_samples, self.warn = ruleset, use_train_samples, warn
        self.out = FileReading()
        self.conv: Any = None
        self.have_conv = False
        self.sd_evals: dict = defaultdict(dict)

    def _set_conv(self, value: Any, what: str) -> None:
        if not _is_number(value):
            self.warn(f"{what} is {value!r}, not a finite number; the checker keeps it as it is")
        self.conv, self.have_conv = value, True

    def feed(self, text: str) -> None:
        out = self.out
        if "global_batch_size" in text:
            out.bs = json.loads(text)["value"]
            if not _is_number(out.bs):
                self.warn(f"global_batch_size is {out.bs!r}, not a number")
        if "submission_benchmark" in text:
            out.benchmark = json.loads(text)["value"]
            if out.benchmark != "bert" and self.use_train_samples:
                self.use_train_samples = False
        is_eval = "eval_error" in text or "eval_accuracy" in text
        if out.benchmark == "stable_diffusion" and is_eval:
            record = json.loads(text)
            unit = "step_num" if self.ruleset == "3.1.0" else "samples_count"
            step, metric = record["metadata"][unit], record["metadata"]["metric"]
            self.sd_evals[step][metric] = record["value"]
        elif out.benchmark in SAMPLES_BENCHMARKS and is_eval:
            record = json.loads(text)
            self._set_conv(record["metadata"]["samples_count"], "samples_count")
            record["value"]  # the checker reads it, and stops when it is missing
        elif not self.use_train_samples and is_eval:
            self._set_conv(round(json.loads(text)["metadata"]["epoch_num"], 3), "epoch_num")
        elif self.use_train_samples and "train_samples" in text:
            self._set_conv(json.loads(text)["value"], "train_samples")
        if "run_stop" in text and json.loads(text)["key"] == "run_stop":
            self._run_stop(json.loads(text)["metadata"]["status"])

    def _run_stop(self, status: Any) -> None:
        out = self.out
        if status != "success":
            out.not_converged, out.epochs = 1, NOT_CONVERGED
            return
        out.not_converged = 0
        if out.benchmark == "stable_diffusion":
            passing = [s for s, r in self.sd_evals.items() if r["FID"] <= 90.0 and r["CLIP"] >= 0.15]
            if not passing:
                raise ValueError("no eval passes the stable diffusion criteria before run_stop")
            self.conv, self.have_conv = min(passing), True
        if not self.have_conv:
            raise ValueError("run_stop with status success before any eval value")
        out.epochs = self.conv


def read_result_file(path: str, ruleset: str, use_train_samples: bool = False) -> FileReading:
    """One file as the checker reads it; warnings name the file and line."""
    warnings: list[str] = []
    line_no = 0
    reader = _Reader(ruleset, use_train_samples, lambda msg: warnings.append(f"{path}:{line_no}: {msg}"))
    with open(path, "r", encoding="latin-1") as fh:
        lines = fh.readlines()
    saw_run_stop = False
    for line_no, raw in enumerate(lines, 1):
        if TOKEN not in raw:
            continue
        line = re.sub(".*" + TOKEN, TOKEN, raw).strip()
        if not line.startswith(TOKEN):
            continue
        text = line[len(TOKEN):]
        try:
            reader.feed(text)
        except Exception as err:  # the checker would raise here: say where and why
            raise CheckerStops(f"{path}:{line_no}", _describe(err)) from err
        try:
            saw_run_stop |= json.loads(text).get("key") == "run_stop"
        except (json.JSONDecodeError, AttributeError):
            warnings.append(f"{path}:{line_no}: MLLOG line is not valid JSON; ignored, as the checker ignores it")
    out = reader.out
    if not saw_run_stop:
        warnings.append(f"{path}: no run_stop; counted as not converged ({NOT_CONVERGED:g}), as the checker does")
    elif out.not_converged:
        warnings.append(f"{path}: run did not converge; counted as {NOT_CONVERGED:g}")
    out.warnings = warnings
    return out


@dataclass
class Submission:
    """A results directory as `get_submission_epochs` sees it. `epochs` is None when
    more runs failed than olympic scoring may drop; `mismatch` names a disagreement."""

    files: list[str]
    bs: Any
    epochs: list | None
    benchmark: Any
    mismatch: str | None = None
    warnings: list[str] = field(default_factory=list)


def read_submission(results_dir: str, ruleset: str, use_train_samples: bool = False) -> Submission:
    # The checker's own glob, so the files come in its order (which decides ties below).
    files = glob.glob("{folder}/result_*.txt".format(folder=results_dir.rstrip("/")), recursive=True)
    sub = Submission(files, -1, [], None)
    not_converged = 0
    for path in files:
        got = read_result_file(path, ruleset, use_train_samples)
        sub.warnings += got.warnings
        sub.epochs.append(got.epochs)
        not_converged += got.not_converged
        if sub.bs == -1:
            sub.bs = got.bs
        elif got.bs != sub.bs:
            return Submission(files, -1, None, None, f"batch sizes in files do not match ({sub.bs!r} vs {got.bs!r} in {path})", sub.warnings)
        if sub.benchmark is None:
            sub.benchmark = got.benchmark
        elif got.benchmark != sub.benchmark:
            return Submission(files, -1, None, None, f"benchmark names in files do not match ({sub.benchmark!r} vs {got.benchmark!r} in {path})", sub.warnings)
    if (not_converged > 1 and sub.benchmark != "unet3d") or (not_converged > 4 and sub.benchmark == "unet3d"):
        sub.epochs = None
    return sub
