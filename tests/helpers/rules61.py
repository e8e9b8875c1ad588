"""mlperf-logging's compliance checker for training ruleset 6.1.0 as an oracle of the
disclosure rules (its training_6.1.0/common.yaml: each key exactly once, `config_filename`
not empty, parallelism at least 1), and what a result file discloses."""

from __future__ import annotations

from pathlib import Path

from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser
from mlperf_logging.compliance_checker.mlp_compliance import ComplianceChecker

from rcpforge.trainers.contract.mllog.read import DISCLOSURE_KEYS, parse_line

RULESET = "6.1.0"
COMMON = Path(mlp_compliance.__file__).parent / f"training_{RULESET}" / "common.yaml"


def disclosed(path: Path) -> dict[str, list]:
    """Every value of each disclosure key the file writes, in file order."""
    found: dict[str, list] = {}
    for line in path.read_text().splitlines():
        event = parse_line(line)
        if event and event.get("key") in DISCLOSURE_KEYS:
            found.setdefault(event["key"], []).append(event["value"])
    return found


def compliance(path: Path) -> ComplianceChecker:
    """The checker after reading the file against the 6.1 common rules, where the
    disclosure keys are; `overwritable` holds its complaints by key. Only those: the
    division's rules it would read next name a file per MLPerf benchmark, and the tiny
    LM's benchmark is none (the package checker test runs them all on an MLPerf one)."""
    loglines, errors = mlp_parser.parse_file(str(path), ruleset=RULESET)
    assert not errors, errors
    checker = ComplianceChecker("training", RULESET, quiet=False, werror=True)
    try:
        checker.configured_checks(loglines, str(COMMON))
    finally:
        mlp_compliance.enqueued_configs.clear()  # the division's rules, queued for a next call
    return checker


def disclosure_complaints(path: Path) -> dict[str, str]:
    """The checker's complaints about the disclosure keys, by key ({} where it has none),
    after checking that it read the file: it flags the `cache_clear` no tiny run logs."""
    checker = compliance(path)
    assert "cache_clear" in checker.overwritable, f"{path}: the compliance checker read nothing"
    return {k: str(checker.overwritable.get(k) or checker.warnings.get(k))
            for k in [*checker.overwritable, *checker.warnings] if k in DISCLOSURE_KEYS}
