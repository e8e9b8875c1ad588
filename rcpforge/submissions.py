"""Submissions as the MLCommons checker sees them: one results directory checked against
RCPs (`check`, what `rcpforge check` prints) and a published round, submission by
submission, grouped and scored (`round`, what `rcpforge round` prints and writes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rcpforge.errors import RcpforgeError

if TYPE_CHECKING:
    import pandas as pd

    from rcpforge.analysis.check import CheckResult

DEFAULT_RULESET = "6.0.0"  # the checker's command-line default (analysis/check.py)


def rcp_source(rcps: str | Path, ruleset: str) -> tuple[Path | None, str]:
    """`rcps` as the checker takes it: an RCP file (read with `ruleset`'s rules), or a
    ruleset version, whose shipped RCPs are used."""
    from rcpforge.analysis.rcp_set import RULESETS

    text = str(rcps)
    if text in RULESETS:
        return None, text
    if Path(text).is_file():
        return Path(text), ruleset
    raise RcpforgeError(f"--rcps {text!r} is neither an RCP file nor a ruleset; rulesets: {', '.join(RULESETS)}")


def check(results_dir: str | Path, rcps: str | Path, *, rcp_pass: str = "pruned", ruleset: str = DEFAULT_RULESET,
          bert_train_samples: bool = False, prune: str = "mlperf", submission_runs: int | None = None) -> CheckResult:
    """Check one submission's results directory (its result_*.txt MLLOG files) against
    `rcps` (an RCP JSON file, or a ruleset version such as "5.1.0"), as
    mlperf_logging's RCP checker does. Returns a CheckResult: passed, message and
    norm_factor (the checker's), and the numbers behind them (benchmark, batch_size,
    olympic_mean, rcp_mean, min_acceptable_mean, rcp_used, run_values, warnings;
    `to_json()` is what `rcpforge check --json` prints). `prune="envelope"` is a what-if
    (the true lower convex envelope), not the checker's verdict; `submission_runs`: N of
    a benchmark the checker does not know. Raises RcpforgeError for bad input."""
    from rcpforge.analysis.check import check_directory
    from rcpforge.analysis.rcp_set import RcpError

    if not Path(results_dir).is_dir():
        raise RcpforgeError(f"results_dir {str(results_dir)!r} is not a folder")
    rcp_file, ruleset = rcp_source(rcps, ruleset)
    try:
        result = check_directory(Path(results_dir), rcp_file, ruleset, rcp_pass, bert_train_samples, prune=prune,
                                 submission_runs=submission_runs)
    except RcpError as err:
        raise RcpforgeError(str(err)) from None
    if result.usage_error:
        raise RcpforgeError(result.usage_error)
    if prune != "mlperf":
        result.warnings.append(f"--prune {prune}: the pruned pass differs from the reference checker's")
    return result


@dataclass
class Round:
    """A round analysed by `round`."""

    submissions: list[dict]  # one per results directory: what `rcpforge round --json` prints
    precision_factors: list[dict]  # per (benchmark, precision): submissions, factor, ci_low, ci_high
    group_by: tuple[str, ...]  # the settings that made submissions alike
    notes: list[str] = field(default_factory=list)  # files that could not be read

    def table(self) -> pd.DataFrame:
        """The submissions as a DataFrame, one row each: `round --parquet`'s columns."""
        from rcpforge.analysis.round.report import round_table

        return round_table(self.submissions).to_pandas()

    def groups(self) -> list[dict]:
        """Per group of like submissions: its label, submissions, pass count, flagged."""
        from rcpforge.analysis.round.groups import group_summaries

        return group_summaries(self.submissions)


def round(root: str | Path, rcps: str | Path, *, group_by: str | Sequence[str] | None = None,
          p_threshold: float = 0.001, z_threshold: float = 3.5,
          precision_map: str | Path | Mapping[str, str] | None = None) -> Round:
    """Every submission of a round (a round's root, or any folder of results directories):
    the checker's verdict, message and normalization factor, its olympic mean against the
    RCP (`rcps`: an RCP file, or a ruleset whose shipped RCPs are used, 5.0.0 for the v5.0
    round), the M > N score, its group of like submissions (`group_by`: keys such as
    "benchmark,batch_size"), robust z and p-value, and flags beyond `p_threshold` and
    `z_threshold`; the precision factors where precision is disclosed or mapped
    (`precision_map`: a JSON or CSV file, or a dict, of results directory -> precision).
    Reads files only (`rcpforge round` also imports them into a store). Raises
    RcpforgeError for bad input."""
    from rcpforge.analysis.rcp_set import RcpError
    from rcpforge.analysis.round.groups import FlagSettings, parse_group_keys
    from rcpforge.analysis.round.precision import load_precision_map, precision_factors
    from rcpforge.analysis.round.verdicts import analyze_round

    if not 0 < p_threshold < 1:
        raise RcpforgeError(f"--p-threshold {p_threshold}: give a probability between 0 and 1")
    if z_threshold <= 0:
        raise RcpforgeError(f"--z-threshold {z_threshold}: give a positive number (3.5 is Iglewicz and Hoaglin's)")
    notes: list[str] = []
    try:
        keys = parse_group_keys(group_by if group_by is None or isinstance(group_by, str) else ",".join(group_by))
        mapping = load_precision_map(Path(precision_map)) if isinstance(precision_map, (str, Path)) else precision_map
        rows = analyze_round(Path(root), str(rcps), group_by=keys, flags=FlagSettings(p_threshold, z_threshold),
                             precision_map=None if mapping is None else dict(mapping), notes=notes)
    except RcpError as err:
        raise RcpforgeError(str(err)) from None
    return Round(rows, precision_factors(rows), keys, notes)
