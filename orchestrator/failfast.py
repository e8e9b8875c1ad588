"""No silent surprises: which failed attempts are configuration errors, which every run
of the campaign would repeat, so that the campaign stops at the first instead of
retrying it and launching the rest.

A failure is a configuration error when
- its worker says so (`ErrorKind.configuration`: the command trainer's unit rule, an
  argv[0] that cannot be started, an input file argv names that does not exist), or
- the startup rule holds: the first attempts of two different runs both failed before
  their program logged any MLLOG line (`ErrorKind.startup`), with the same failure text
  once every absolute path is replaced by `<path>` and every run of digits by `#` (pids,
  ports, times, the run's own folder, its batch size and seed). A lone startup failure,
  or one of a retry, is retried as any transient failure is.

Everything else (a crash after MLLOG lines, a killed worker, a lost node, a stall) keeps
its retries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rcpforge.trainers.contract import ErrorKind, RunResult, RunSpec, RunStatus

_PATH = re.compile(r"/[^\s'\"`:,;()\[\]]+")
_DIGITS = re.compile(r"\d+")


def startup_signature(error: str) -> str:
    """A startup failure's text with what differs between runs of one program taken out."""
    return _DIGITS.sub("#", _PATH.sub("<path>", error)).strip()


def reason_line(error: str | None) -> str:
    """The line of a failure that says what is wrong: for a configuration error its last
    (the fix); for an exit before any MLLOG line, the program's own last line of output."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    if not lines:
        return "the run failed without saying why"
    if lines[-1].startswith("process ended without run_stop") and len(lines) >= 2:
        return f"{lines[-2]} ({lines[-1]})"
    return lines[-1]


@dataclass
class FailFast:
    """The startup failures seen so far, by signature: (run key, run id, run name)."""

    startups: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    def configuration(self, spec: RunSpec, run_id: str, attempt: int,
                      result: RunResult) -> tuple[str, list[str]] | None:
        """Why this failed attempt is a configuration error, and the runs to tag so (run
        ids); None when it is not one (it is retried as before)."""
        if result.status is not RunStatus.failed:
            return None
        if result.error_kind is ErrorKind.configuration:
            return f"run {spec.run_name}: {reason_line(result.error)}", [run_id]
        if result.error_kind is not ErrorKind.startup or attempt != 1:
            return None
        signature = startup_signature(result.error or "")
        earlier = self.startups.setdefault(signature, (spec.run_key, run_id, spec.run_name))
        if earlier[0] == spec.run_key:
            return None
        return (f"runs {earlier[2]} and {spec.run_name} both failed before their first MLLOG line, alike: "
                f"{reason_line(result.error)}; fix the program or trainer.argv"), [earlier[1], run_id]
