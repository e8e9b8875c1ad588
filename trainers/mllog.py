"""MLLOG in: reading `:::MLLOG` lines the way `mlperf_logging.rcp_checker` reads them.

The checker (`read_submission_file`, mlperf-logging 4.1.68) keeps, per line, the text
from the last `:::MLLOG ` token on, and decides what a line is by substring tests on the
JSON text: "global_batch_size", "submission_benchmark", "eval_accuracy"/"eval_error",
"run_stop". The value to converge is the epoch (`round(epoch_num, 3)`) or, for its LLM
benchmarks, the `samples_count` of the last eval line before a `run_stop` with status
`success`; any other `run_stop` status means not converged. `CheckerReading` replays that
rule line by line, so a live reader and the checker agree on every file. Where the
checker would crash (a half-written line, an eval line without the unit it needs), the
line is counted as unreadable and skipped instead.

Not replayed: stable_diffusion's FID/CLIP rule and BERT's `--bert_train_samples`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOKEN = ":::MLLOG "
# Benchmarks whose value to converge is `samples_count` (rcp_checker.read_submission_file).
SAMPLES_BENCHMARKS = frozenset(
    {"llama2_70b_lora", "flux1", "llama31_405b", "llama31_8b", "gpt_oss_20b", "deepseekv3_671b",
     "qwen35_397b_grpo", "dlrmv4"}
)


def mllog_text(line: str) -> str | None:
    """The line from its last MLLOG token on, stripped, or None. The checker's
    `re.sub(".*" + TOKEN, TOKEN, line)` keeps the same text: its greedy `.*` reaches the
    last token of a line that has no newline before its end; `rfind` does it in linear
    time (the regex rescans the rest of the line from every position)."""
    at = line.rfind(TOKEN)
    if at < 0:
        return None
    return line[at:].strip()


def parse_line(line: str) -> dict[str, Any] | None:
    """The event of one output line, or None when the line carries none or its JSON is
    cut off or malformed."""
    text = mllog_text(line)
    if text is None or not text.startswith(TOKEN):
        return None
    return _decode(text)


def _decode(text: str) -> dict[str, Any] | None:
    try:
        event = json.loads(text[len(TOKEN):])
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def convergence_unit(benchmark: str | None) -> str:
    """The eval metadata field the checker reads the value to converge from."""
    return "samples_count" if benchmark in SAMPLES_BENCHMARKS else "epoch_num"


@dataclass
class CheckerReading:
    """The checker's view of a result file, built one line at a time."""

    benchmark: str | None = None
    batch_size: Any = -1
    last_eval: float | None = None  # the checker's `conv_epoch`
    stop_status: str | None = None  # status of the last run_stop line
    value_to_converge: float | None = None  # set by a successful run_stop
    unreadable: int = 0  # lines with the token that the checker could not have read
    lines: list[str] = field(default_factory=list)  # the MLLOG lines, token first
    keep_lines: bool = True  # a live follower writes them to a file instead
    last_text: str | None = None  # the last readable MLLOG line, token first

    @property
    def converged(self) -> bool:
        return self.stop_status == "success" and self.value_to_converge is not None

    def feed(self, line: str) -> dict[str, Any] | None:
        """Take one output line; return its event when it is a readable MLLOG line."""
        text = mllog_text(line)
        if text is None or not text.startswith(TOKEN):
            return None
        body = text[len(TOKEN):]
        event = _decode(text)
        if event is None:
            self.unreadable += 1
            return None
        self.last_text = text
        if self.keep_lines:
            self.lines.append(text)
        try:
            self._apply(body, event)
        except (KeyError, TypeError, ValueError):
            self.unreadable += 1
        return event

    def _apply(self, body: str, event: dict[str, Any]) -> None:
        # Substring tests on the JSON text, in the checker's order.
        if "global_batch_size" in body:
            self.batch_size = event["value"]
        if "submission_benchmark" in body:
            self.benchmark = event["value"]
        if "eval_error" in body or "eval_accuracy" in body:
            unit = convergence_unit(self.benchmark)
            value = event["metadata"][unit]
            self.last_eval = value if unit == "samples_count" else round(value, 3)
        if "run_stop" in body and event.get("key") == "run_stop":
            self.stop_status = event["metadata"]["status"]
            self.value_to_converge = self.last_eval if self.stop_status == "success" else None


def read_result_file(path: Path) -> CheckerReading:
    """Read a result file as the checker does (latin-1, line by line)."""
    reading = CheckerReading()
    with open(path, encoding="latin-1") as fh:
        for line in fh:
            reading.feed(line)
    return reading
