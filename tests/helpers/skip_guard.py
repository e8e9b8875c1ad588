"""A skip in CI is a failure unless its reason is on tests/allowed_skips.txt.

A skipped test passes in silence: a service that did not start, data that is not there
or a path that raised would otherwise turn a green run into one that never tested the
thing. CI (the CI variable set, as .ci/run sets it) fails the session on any other skip
and lists each with its reason; on a developer's machine skips stay skips. Loaded by
tests/conftest.py (its hooks are imported there)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ALLOWLIST = Path(__file__).resolve().parents[1] / "allowed_skips.txt"


def allowed_patterns(path: Path = ALLOWLIST) -> list[re.Pattern[str]]:
    """The allowlist's patterns: one regular expression a line, searched in the reason;
    blank lines and lines starting with # are comments."""
    lines = (line.strip() for line in path.read_text().splitlines())
    return [re.compile(line) for line in lines if line and not line.startswith("#")]


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


_PATTERNS: list[re.Pattern[str]] = []
_UNEXPECTED: list[tuple[str, str]] = []  # (test id, reason) of every skip not allowed


def _enforced() -> bool:
    return bool(os.environ.get("CI"))


def pytest_configure(config: pytest.Config) -> None:
    _PATTERNS[:] = allowed_patterns()
    _UNEXPECTED.clear()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = skip_reason(report)
    if not any(pattern.search(reason) for pattern in _PATTERNS):
        _UNEXPECTED.append((report.nodeid, reason))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _UNEXPECTED and _enforced() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    if not (_UNEXPECTED and _enforced()):
        return
    terminalreporter.section("skips that CI does not allow", sep="=", red=True, bold=True)
    for nodeid, reason in _UNEXPECTED:
        terminalreporter.line(f"{nodeid}: {reason}")
    terminalreporter.line(f"{len(_UNEXPECTED)} skipped for a reason not on {ALLOWLIST.name}: make the test run "
                          "here (start the service in .ci/run, vendor the data), or, for a reason that "
                          "holds on every CI machine (no GPU, opt-in slow), add a pattern with its why")
