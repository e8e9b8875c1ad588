"""What MLCommons' compliance checker (`mlperf_logging.compliance_checker`, usage training)
will reject in a result file, said per key: the checker itself reads the file, with the
rules it would apply (the ruleset's common rules, then the division's and the benchmark's
that those queue), and rcpforge only sorts its verdicts.

Each key the applied rules require is one of:
- `logged` by the program (or by rcpforge's own MLLOG writer for an in-process trainer),
- `added` by rcpforge to a program's file (the lines it writes carry `file: rcpforge`:
  `config_filename`, and the precision and parallelism a recipe label says),
- `missing` (the rules want it and the file has none),
- `rejected` (the file has it and a rule's test fails: a wrong value, twice with two values).
A key written twice with one value is only a warning of the checker's (`warned`).

Used by `rcpforge run --smoke` (before a campaign) and `rcpforge export --package` (on the
files a package holds), so both say what the checker will say, before it does."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The first ruleset with the mandatory precision, parallelism and run-configuration keys.
DISCLOSURE_RULESET = "6.1.0"
# The keys that mark the run's timeline rather than describe it: a smoke run stopped
# early misses some of them by design.
EVENT_KEYS = frozenset({"init_start", "init_stop", "run_start", "run_stop", "block_start", "block_stop",
                        "epoch_start", "epoch_stop", "eval_start", "eval_stop", "eval_accuracy", "cache_clear"})
STATES = ("logged", "added", "warned", "missing", "rejected")
_ALTERNATIVES = re.compile(r"^Required AT_LEAST_ONE occurrence of '[^']+' or ")


@dataclass(frozen=True)
class KeyVerdict:
    key: str
    state: str  # one of STATES
    value: Any = None  # the file's (first) value
    why: str = ""  # the checker's test that failed, or its warning

    @property
    def event(self) -> bool:
        return self.key in EVENT_KEYS

    @property
    def refused(self) -> bool:
        return self.state in ("missing", "rejected")


@dataclass
class ComplianceVerdict:
    path: Path
    ruleset: str
    keys: list[KeyVerdict] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # the checker's complaints tied to no one key
    rules: list[str] = field(default_factory=list)  # the rule files applied, in order

    def refused(self, *, events: bool = True) -> list[KeyVerdict]:
        return [k for k in self.keys if k.refused and (events or not k.event)]

    def state(self, key: str) -> str | None:
        return next((k.state for k in self.keys if k.key == key), None)


def _rules_folder() -> Path:
    from mlperf_logging.compliance_checker import mlp_compliance

    return Path(mlp_compliance.__file__).parent


def compliance_rulesets() -> list[str]:
    """The training rulesets the installed compliance checker has rules for."""
    found = (p.name.split("_", 1)[1] for p in _rules_folder().glob("training_*.*.*") if p.is_dir())
    return sorted((v for v in found if re.fullmatch(r"\d+\.\d+\.\d+", v)),  # not 0.7.0_warn
                  key=lambda v: tuple(int(x) for x in v.split(".")))


def check_file(path: Path, ruleset: str = DISCLOSURE_RULESET) -> ComplianceVerdict:
    """The compliance checker's verdict on one result file, key by key."""
    import yaml
    from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser
    from mlperf_logging.compliance_checker.mlp_compliance import ComplianceChecker

    verdict = ComplianceVerdict(Path(path), ruleset)
    folder = _rules_folder()
    logging.getLogger().disabled, was = True, logging.getLogger().disabled  # its parser warns per odd line
    try:
        lines, errors = mlp_parser.parse_file(str(path), ruleset=ruleset)
    finally:
        logging.getLogger().disabled = was
    if errors:
        verdict.other.append(f"{len(errors)} MLLOG lines the checker cannot parse (first: {errors[0][1]})")
    checker = ComplianceChecker("training", ruleset, quiet=False, werror=False)
    required: dict[str, str] = {}
    queue = mlp_compliance.enqueued_configs  # the checker's own queue: a rule's POST adds the next file
    queue.clear()
    queue.append(f"training_{ruleset}/common.yaml")
    try:
        while queue:
            rules = folder / queue.pop(0)
            if not rules.is_file():  # a benchmark the ruleset does not have: its submission_benchmark says so
                continue
            verdict.rules.append(rules.name)
            for record in yaml.load(rules.read_text(), Loader=yaml.BaseLoader) or []:
                key = record.get("KEY") if isinstance(record, dict) else None
                if key and key.get("REQ", "OPTIONAL") != "OPTIONAL":
                    required[key["NAME"]] = key["REQ"]
            checker.configured_checks(lines, str(rules))
    finally:
        queue.clear()
    verdict.keys = [_key_verdict(key, req, lines, checker) for key, req in required.items()]
    # the alternatives' complaints ("... of 'block_start' or 'epoch_start'") are in the keys' verdicts
    verdict.other += [_first_words(m) for m in checker.not_overwritable if not _ALTERNATIVES.match(m)]
    verdict.other += [_first_words(m) for k, m in checker.overwritable.items() if k not in required]
    return verdict


def _key_verdict(key: str, req: str, lines: list[Any], checker: Any) -> KeyVerdict:
    found = [line for line in lines if line.key == key]
    value = found[0].value.get("value") if found else None
    if key in checker.overwritable:
        return KeyVerdict(key, "rejected" if found else "missing", value, _first_words(checker.overwritable[key]))
    if not found:  # AT_LEAST_ONE_OR(other, ...): one of them will do
        others = [name.strip() for name in req[req.find("(") + 1:req.rfind(")")].split(",") if name.strip()]
        logged = [name for name in others if any(line.key == name for line in lines)]
        if logged:
            return KeyVerdict(key, "logged", None, f"not logged, but {logged[0]} is, which the rules accept instead")
        return KeyVerdict(key, "missing", None, f"log {key} or {' or '.join(others)}")
    if key in checker.warnings:
        return KeyVerdict(key, "warned", value, _first_words(checker.warnings[key]))
    by_rcpforge = all((line.value.get("metadata") or {}).get("file") == "rcpforge" for line in found)
    return KeyVerdict(key, "added" if by_rcpforge else "logged", value)


def _first_words(message: str) -> str:
    """A checker message in one line: its first line, and the test that failed."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    test = next((line for line in lines if line.startswith("failed test:")), None)
    return lines[0] if not test or test == lines[0] else f"{lines[0].rstrip(':')}; {test}"


def refusal_lines(verdict: ComplianceVerdict, *, events: bool = True) -> list[str]:
    """What the checker refuses in the file, a line each: missing keys in one line, each
    rejected key with the test it failed, then the rest."""
    refused = verdict.refused(events=events)
    missing = [k.key for k in refused if k.state == "missing"]
    out = [f"missing {', '.join(missing)}"] if missing else []
    out += [f"rejected {k.key}{'' if k.value is None else f' = {k.value!r}'}: {k.why}"
            for k in refused if k.state == "rejected"]
    return out + (verdict.other if events else [])
