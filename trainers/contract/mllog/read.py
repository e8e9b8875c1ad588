"""The one reader of `:::MLLOG` result files, replaying the MLCommons RCP checker
(`read_submission_file` / `get_submission_epochs`, mlperf-logging 4.1.68), quirks
included: lines are found by substring, not by key; `epoch_num` is rounded to 3 digits;
the LLM benchmarks count `samples_count`; BERT may count `train_samples`; stable
diffusion's FID/CLIP rule; the value is the last eval before a successful `run_stop`; a
file without one counts as 1e9; files are read as latin-1.

Two ways in, one state machine (`MllogReader`):
- per line, for following a live process (`MllogReader.feed`): a line the checker would
  crash on (a half-written line, an eval without the unit it needs) is counted as
  unreadable and skipped;
- per file, for `rcpforge check` (`read_result_file`): where the checker itself would
  stop with an exception, `CheckerStops` names the file, the line and why; lines it does
  not parse are only warned about."""

from __future__ import annotations

import glob
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

TOKEN = ":::MLLOG "
NOT_CONVERGED = 1e9
SAMPLES_BENCHMARKS = frozenset({"llama2_70b_lora", "flux1", "llama31_405b", "llama31_8b", "gpt_oss_20b",
                                "deepseekv3_671b", "qwen35_397b_grpo", "dlrmv4"})


class CheckerStops(Exception):
    """The reference checker raises on this input; `where` says where, `reason` why."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


def mllog_text(line: str) -> str | None:
    """The line from its last MLLOG token on, stripped, or None. The checker's
    `re.sub(".*" + TOKEN, TOKEN, line)` keeps the same text: its greedy `.*` reaches the
    last token of a line that has no newline before its end; `rfind` does it in linear
    time (the regex rescans the rest of the line from every position)."""
    at = line.rfind(TOKEN)
    if at < 0:
        return None
    return line[at:].strip()


def _event(text: str) -> dict[str, Any] | None:
    try:
        event = json.loads(text[len(TOKEN):])
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def parse_line(line: str) -> dict[str, Any] | None:
    """The event of one output line, or None when the line carries none or its JSON is
    cut off or malformed."""
    text = mllog_text(line)
    if text is None or not text.startswith(TOKEN):
        return None
    return _event(text)


def is_eval_line(text: str) -> bool:
    """Whether the checker takes an MLLOG line for an eval (its substring test)."""
    return "eval_error" in text or "eval_accuracy" in text


def convergence_unit(benchmark: str | None) -> str:
    """The eval metadata field the checker reads the value to converge from."""
    return "samples_count" if benchmark in SAMPLES_BENCHMARKS else "epoch_num"


def _describe(err: BaseException) -> str:
    if isinstance(err, json.JSONDecodeError):
        return f"not valid JSON ({err.msg} at column {err.colno})"
    if isinstance(err, KeyError):
        return f"missing key {err.args[0]!r}"
    return f"{type(err).__name__}: {err}"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class MllogReader:
    """The state the checker keeps while it walks one file's lines."""

    def __init__(self, ruleset: str = "6.0.0", use_train_samples: bool = False, keep_lines: bool = True,
                 warn: Callable[[str], None] | None = None):
        self.ruleset, self.use_train_samples = ruleset, use_train_samples
        self.warn = warn or (lambda msg: None)
        self.benchmark: Any = None
        self.batch_size: Any = -1
        self.last_eval: Any = None  # the checker's `conv_epoch`
        self.have_eval = False
        self.stop_status: Any = None  # status of the last run_stop line
        self.value_to_converge: Any = None  # set by a successful run_stop (may be non-numeric)
        self.succeeded = False  # the last run_stop was a success the checker accepts
        self.saw_run_stop = False
        self.sd_evals: dict = defaultdict(dict)
        self.unreadable = 0  # lines with the token that the checker could not have read
        self.keep_lines = keep_lines  # a live follower writes them to a file instead
        self.lines: list[str] = []  # the readable MLLOG lines, token first
        self.last_text: str | None = None  # the last readable MLLOG line, token first

    @property
    def converged(self) -> bool:
        return self.succeeded

    @property
    def epochs(self) -> Any:
        """The checker's value for this file: the value to converge, or 1e9."""
        return self.value_to_converge if self.converged else NOT_CONVERGED

    # --- per line (live) ------------------------------------------------------------------

    def feed(self, line: str) -> dict[str, Any] | None:
        """Take one output line; return its event when it is a readable MLLOG line. A line
        the checker would crash on is counted in `unreadable` instead."""
        text = mllog_text(line)
        if text is None or not text.startswith(TOKEN):
            return None
        event = _event(text)
        if event is None:
            self.unreadable += 1
            return None
        self.last_text = text
        if self.keep_lines:
            self.lines.append(text)
        try:
            self.apply(text[len(TOKEN):], event)
        except Exception:  # noqa: BLE001 - whatever the checker would raise on, skip the line
            self.unreadable += 1
        return event

    # --- the checker's rule ---------------------------------------------------------------

    def apply(self, body: str, event: dict[str, Any] | None = None) -> None:
        """One MLLOG line's JSON text, as the checker handles it: substring tests in its
        order; raises where the checker raises. `event` is the line already decoded (a
        dict), so it is not parsed again; without it the text is parsed where the
        checker parses it, and raises where the checker would."""
        def load() -> Any:
            return event if event is not None else json.loads(body)

        if "global_batch_size" in body:
            self.batch_size = load()["value"]
            if not _is_number(self.batch_size):
                self.warn(f"global_batch_size is {self.batch_size!r}, not a number")
        if "submission_benchmark" in body:
            self.benchmark = load()["value"]
            if self.benchmark != "bert" and self.use_train_samples:
                self.use_train_samples = False
        is_eval = is_eval_line(body)
        if self.benchmark == "stable_diffusion" and is_eval:
            record = load()
            unit = "step_num" if self.ruleset == "3.1.0" else "samples_count"
            step, metric = record["metadata"][unit], record["metadata"]["metric"]
            self.sd_evals[step][metric] = record["value"]
        elif self.benchmark in SAMPLES_BENCHMARKS and is_eval:
            record = load()
            self._set_eval(record["metadata"]["samples_count"], "samples_count")
            record["value"]  # the checker reads it, and stops when it is missing
        elif not self.use_train_samples and is_eval:
            self._set_eval(round(load()["metadata"]["epoch_num"], 3), "epoch_num")
        elif self.use_train_samples and "train_samples" in body:
            self._set_eval(load()["value"], "train_samples")
        if "run_stop" in body and load()["key"] == "run_stop":
            self._run_stop(load()["metadata"]["status"])

    def _set_eval(self, value: Any, what: str) -> None:
        if not _is_number(value):
            self.warn(f"{what} is {value!r}, not a finite number; the checker keeps it as it is")
        self.last_eval, self.have_eval = value, True

    def _run_stop(self, status: Any) -> None:
        self.saw_run_stop = True
        self.stop_status, self.value_to_converge, self.succeeded = status, None, False
        if status != "success":
            return
        if self.benchmark == "stable_diffusion":
            passing = [s for s, r in self.sd_evals.items() if r["FID"] <= 90.0 and r["CLIP"] >= 0.15]
            if not passing:
                raise ValueError("no eval passes the stable diffusion criteria before run_stop")
            self.last_eval, self.have_eval = min(passing), True
        if not self.have_eval:
            raise ValueError("run_stop with status success before any eval value")
        self.value_to_converge, self.succeeded = self.last_eval, True


# --- per file (check, import) -----------------------------------------------------------


@dataclass
class FileReading:
    not_converged: int = 1
    epochs: Any = NOT_CONVERGED
    bs: Any = -1
    benchmark: Any = None
    warnings: list[str] = field(default_factory=list)


def read_result_file(path: str, ruleset: str, use_train_samples: bool = False) -> FileReading:
    """One file as the checker reads it; warnings name the file and line; `CheckerStops`
    where the checker raises."""
    warnings: list[str] = []
    line_no = 0
    reader = MllogReader(ruleset, use_train_samples, keep_lines=False,
                         warn=lambda msg: warnings.append(f"{path}:{line_no}: {msg}"))
    with open(path, "r", encoding="latin-1") as fh:
        lines = fh.readlines()
    for line_no, raw in enumerate(lines, 1):
        text = mllog_text(raw)
        if text is None or not text.startswith(TOKEN):
            continue
        event = _event(text)
        try:
            reader.apply(text[len(TOKEN):], event)
        except Exception as err:  # the checker would raise here: say where and why
            raise CheckerStops(f"{path}:{line_no}", _describe(err)) from err
        if event is None:
            warnings.append(f"{path}:{line_no}: MLLOG line is not valid JSON; ignored, as the checker ignores it")
    if not reader.saw_run_stop:
        warnings.append(f"{path}: no run_stop; counted as not converged ({NOT_CONVERGED:g}), as the checker does")
    elif not reader.converged:
        warnings.append(f"{path}: run did not converge; counted as {NOT_CONVERGED:g}")
    return FileReading(int(not reader.converged), reader.epochs, reader.batch_size, reader.benchmark, warnings)


def follow_file(path: str | Path, keep_lines: bool = True) -> MllogReader:
    """A file read line by line as a live follower reads it (unreadable lines skipped)."""
    reader = MllogReader(keep_lines=keep_lines)
    with open(path, encoding="latin-1") as fh:
        for line in fh:
            reader.feed(line)
    return reader


# MLPerf's disclosure keys (mandatory from the 6.1 rules): how low the precision goes and
# how the run is split. rcpforge records them per run as tags `rcpforge.mllog.<key>`.
DISCLOSURE_KEYS = (
    "lowest_numerical_precision_in_linear", "lowest_numerical_precision_in_attn",
    "lowest_numerical_precision_in_comm", "tensor_parallelism", "pipeline_parallelism",
    "context_parallelism", "expert_parallelism", "micro_batch_size", "config_filename",
)
# Disclosure keys as real logs misspell them -> the rules' name. AMD's v6.0 llama31_8b
# results write `lowest_numerical_precision_linear`: read as the rules' key (the file's
# word kept in a warning), so such a submission's precision is not lost.
DISCLOSURE_ALIASES = {f"lowest_numerical_precision_{part}": f"lowest_numerical_precision_in_{part}"
                      for part in ("linear", "attn", "comm")}

# The run's per-layer precision map (trainers/tinylm/precision_map.py), one event of the
# header whose value is the map: which GEMM of which layer ran in which format. rcpforge
# records it per run as the tag `rcpforge.precision_map` (trainers/contract/schema.py).
PRECISION_MAP_KEY = "rcpforge_precision_map"


@dataclass
class RunFacts:
    """What a run's result file says besides its outcome: the MLPerf time to train
    (`run_start` to the last `run_stop`, in seconds), its disclosure keys, when it started
    and stopped (epoch milliseconds; `last_ms` is the last line's time, for a file cut off
    before its `run_stop`) and its `submission_*` values (org, division, platform, ...)."""

    time_to_train_s: float | None = None
    disclosed: dict[str, Any] = field(default_factory=dict)
    started_ms: float | None = None
    stopped_ms: float | None = None
    last_ms: float | None = None
    submission: dict[str, Any] = field(default_factory=dict)
    precision_map: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)  # what was read other than as written


def facts_tags(facts: RunFacts) -> dict[str, str]:
    """The tags a run's facts give it: one per disclosure key, and its precision map."""
    from rcpforge.trainers.contract.schema import MAX_TAG_CHARS, TAG_DISCLOSED, TAG_PRECISION_MAP

    tags = {TAG_DISCLOSED + k: str(v) for k, v in facts.disclosed.items()}
    for note in facts.warnings:
        with_warning(tags, note)
    if facts.precision_map is not None:
        text = json.dumps(facts.precision_map, separators=(",", ":"))
        if len(text) <= MAX_TAG_CHARS:
            tags[TAG_PRECISION_MAP] = text
    return tags


def with_warning(tags: dict[str, str], note: str) -> dict[str, str]:
    """`tags` with `note` added to its `rcpforge.warning` (notes joined by '; ')."""
    from rcpforge.trainers.contract.schema import TAG_WARNING

    tags[TAG_WARNING] = "; ".join(filter(None, [tags.get(TAG_WARNING), note]))
    return tags


def events_facts(events: Iterable[dict[str, Any]]) -> RunFacts:
    """The facts of a file's decoded MLLOG events, in file order. A misspelled disclosure
    key (`DISCLOSURE_ALIASES`) counts as the rules' key unless the file also writes that."""
    facts = RunFacts()
    misspelled: dict[str, str] = {}
    for event in events:
        key, at = event.get("key"), event.get("time_ms")
        if _is_number(at):
            facts.last_ms = at
        if key == "run_start" and facts.started_ms is None and _is_number(at):
            facts.started_ms = at
        elif key == "run_stop" and _is_number(at):
            facts.stopped_ms = at
        elif key in DISCLOSURE_KEYS:
            facts.disclosed[key] = event.get("value")
            misspelled.pop(key, None)
        elif key in DISCLOSURE_ALIASES and DISCLOSURE_ALIASES[key] not in facts.disclosed:
            misspelled[DISCLOSURE_ALIASES[key]] = key
            facts.disclosed[DISCLOSURE_ALIASES[key]] = event.get("value")
        elif key == PRECISION_MAP_KEY and isinstance(event.get("value"), dict):
            facts.precision_map = event["value"]
        elif isinstance(key, str) and key.startswith("submission_"):
            facts.submission.setdefault(key[len("submission_"):], event.get("value"))
    facts.warnings += [f"the result file writes {wrote!r}, which MLPerf's rules name {rules!r}: recorded as "
                       f"{rules!r} (a 6.1 compliance check wants the rules' name)" for rules, wrote in misspelled.items()]
    if facts.started_ms is not None and facts.stopped_ms is not None and facts.stopped_ms >= facts.started_ms:
        facts.time_to_train_s = (facts.stopped_ms - facts.started_ms) / 1000.0
    return facts


def run_facts(path: str | Path) -> RunFacts:
    try:
        fh = open(path, encoding="latin-1")
    except OSError:
        return RunFacts()
    with fh:
        return events_facts(event for line in fh if (event := parse_line(line)) is not None)


def follow_events(path: str | Path) -> tuple[MllogReader, list[dict[str, Any]]]:
    """`follow_file` that also keeps every readable line's event (one JSON parse a line)."""
    reader = MllogReader(keep_lines=False)
    events = []
    with open(path, encoding="latin-1") as fh:
        for line in fh:
            event = reader.feed(line)
            if event is not None:
                events.append(event)
    return reader, events


@dataclass
class Submission:
    """A results directory as `get_submission_epochs` sees it. `epochs` is None when
    more runs failed than olympic scoring may drop; `mismatch` names a disagreement.
    `values`: each file's value as read (in `files` order, up to a mismatch)."""

    files: list[str]
    bs: Any
    epochs: list | None
    benchmark: Any
    mismatch: str | None = None
    warnings: list[str] = field(default_factory=list)
    values: list = field(default_factory=list)


def read_submission(results_dir: str, ruleset: str, use_train_samples: bool = False) -> Submission:
    # The checker's own glob, so the files come in its order (which decides ties below).
    files = glob.glob("{folder}/result_*.txt".format(folder=results_dir.rstrip("/")), recursive=True)
    sub = Submission(files, -1, [], None)
    not_converged = 0
    for path in files:
        got = read_result_file(path, ruleset, use_train_samples)
        sub.warnings += got.warnings
        sub.epochs.append(got.epochs)
        sub.values.append(got.epochs)
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
