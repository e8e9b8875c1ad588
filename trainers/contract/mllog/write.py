"""MLLOG out: a run's `result.txt` in the mlperf-logging format, written with
`mlperf_logging.mllog` around any trainer that does not log MLLOG itself.

The checker reads `epoch_num` for benchmarks outside its LLM list and `samples_count` for
those in it; our RCPs are in samples, so every eval line carries the run's samples in
both, and the value the checker reads equals the run's `samples_to_target`.

Each attempt of a run rewrites the file from its start: a retried run trains again from
scratch, so its result.txt never holds the evals of an earlier attempt twice.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from rcpforge.trainers.contract import EvalPoint, Reporter, RunResult, RunSpec, RunStatus
from rcpforge.trainers.contract.mllog.read import DISCLOSURE_KEYS, TOKEN, run_facts

RESULT_FILE = "result.txt"
# Substrings the checker matches anywhere in a line: a hyperparameter line containing
# one of them would be read as that event, so such names are not logged.
_CHECKER_WORDS = ("global_batch_size", "submission_benchmark", "eval_accuracy", "eval_error", "run_stop")
_ids = itertools.count()


class _StrictFileHandler(logging.FileHandler):
    """logging swallows write errors (it prints a traceback and goes on): a full disk
    would leave a truncated result.txt behind a run recorded as converged. Raise instead,
    so the run fails."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        raise


class MllogWriter:
    """One result file; `close()` must be called (the reporter does it in `stop`)."""

    def __init__(self, path: Path, benchmark: str, spec: RunSpec, disclosure: dict[str, Any] | None = None):
        from mlperf_logging.mllog import constants as c
        from mlperf_logging.mllog.mllog import MLLogger

        self.path = path
        # Written under a temporary name and renamed when the run stops: a result.txt is
        # always whole; an earlier attempt's file is removed first.
        self.partial = path.with_name(path.name + ".partial")
        self._c = c
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        # A private, unregistered logger per file: mllog.config() would add handlers to a
        # shared one, and a worker process runs many runs one after another.
        self._logger = logging.Logger(f"rcpforge.mllog.{next(_ids)}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        self._handler = _StrictFileHandler(self.partial, mode="w", encoding="utf-8")
        self._logger.addHandler(self._handler)
        self.log = MLLogger(logger=self._logger, default_stack_offset=1, root_dir=str(Path(__file__).parent))
        try:
            self._header(benchmark, spec, disclosure or {})
        except OSError:
            self.discard()
            raise

    def _header(self, benchmark: str, spec: RunSpec, disclosure: dict[str, Any]) -> None:
        c, log = self._c, self.log
        log.event(c.SUBMISSION_BENCHMARK, benchmark)
        log.event(c.SUBMISSION_ORG, "rcpforge")
        log.event(c.SUBMISSION_DIVISION, "closed")
        log.event(c.SUBMISSION_STATUS, "research")
        log.event(c.SUBMISSION_PLATFORM, f"rcpforge {spec.trainer_kind} {spec.recipe}")
        log.start(c.INIT_START)
        log.event(c.SEED, spec.seed)
        log.event(c.GLOBAL_BATCH_SIZE, spec.batch_size)
        for name, value in sorted(spec.hparams.items()):
            if not any(word in name for word in _CHECKER_WORDS):
                log.event(c.OPT_BASE_LR if name == "lr" else name, value)
        log.event("target", spec.target.value, metadata={"metric": spec.target.metric, "mode": spec.target.mode})
        for key, value in disclosure.items():  # the precision and parallelism the trainer disclosed
            log.event(key, value)
        log.end(c.INIT_STOP)
        log.start(c.RUN_START)

    def eval_point(self, point: EvalPoint, value: float) -> None:
        self.log.event(
            self._c.EVAL_ACCURACY,
            value,
            metadata={self._c.EPOCH_NUM: point.samples, self._c.SAMPLES_COUNT: point.samples, "tokens": point.tokens},
        )

    def stop(self, result: RunResult) -> None:
        status = self._c.SUCCESS if result.status is RunStatus.converged else self._c.ABORTED
        try:
            self.log.end(self._c.RUN_STOP, metadata={self._c.STATUS: status, "rcpforge_status": result.status.value})
            self._handler.flush()
            os.fsync(self._handler.stream.fileno())
            self.close()
            os.replace(self.partial, self.path)
        except OSError:
            self.discard()
            raise

    def close(self) -> None:
        self._logger.removeHandler(self._handler)
        self._handler.close()

    def discard(self) -> None:
        """Drop a file that could not be written whole."""
        try:
            self.close()
        except OSError:
            pass  # the close's flush fails too on a full disk; the file goes anyway
        self.partial.unlink(missing_ok=True)


class MllogReporter(Reporter):
    """Wraps a run's reporter: every eval point also becomes an `eval_accuracy` line
    (the value of the run's target metric). The rest is the inner reporter's."""

    def __init__(self, inner: Reporter, writer: MllogWriter, metric: str):
        self.inner = Reporter.of(inner)
        self.writer = writer
        self.metric = metric
        self.output_dir, self.campaign_dir = self.inner.output_dir, self.inner.campaign_dir
        self.benchmark, self.run_dir = self.inner.benchmark, self.inner.run_dir

    def idle(self) -> None:
        self.inner.idle()

    def eval_point(self, point: EvalPoint) -> None:
        value = point.metrics.get(self.metric)
        if value is not None:
            self.writer.eval_point(point, value)
        self.inner.eval_point(point)


def add_missing_disclosure(path: Path, values: dict[str, Any]) -> list[str]:
    """Append to a result file written by someone else (a program's MLLOG, an exported
    file) a line for each disclosure key of `values` the file does not write, so it has
    one of each (the 6.1 rules want exactly one); a key the file writes keeps the file's
    value. Returns the keys added; a missing file is left missing."""
    if not path.is_file():
        return []
    facts = run_facts(path)
    missing = {k: v for k, v in values.items() if k in DISCLOSURE_KEYS and k not in facts.disclosed and v is not None}
    if not missing:
        return []
    # Stamped with the file's last time, not now: the same file completed twice (an
    # export's package and its results directory) is the same bytes.
    at = int(facts.last_ms) if facts.last_ms is not None else int(time.time() * 1000)
    with open(path, "rb+") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell():  # a last line cut off without its newline must not swallow ours
            fh.seek(-1, os.SEEK_END)
            ends = fh.read(1) == b"\n"
        else:
            ends = True
        lines = "" if ends else "\n"
        for key, value in missing.items():
            event = {"namespace": "", "time_ms": at, "event_type": "POINT_IN_TIME",
                     "key": key, "value": value, "metadata": {"file": "rcpforge", "lineno": 0}}
            lines += TOKEN + json.dumps(event) + "\n"
        fh.write(lines.encode("utf-8"))
    return list(missing)
