"""RCP arithmetic exactly as the MLCommons reference checker does it
(`mlperf_logging.rcp_checker`, docs/rcp-rules.md): olympic mean, population stdev over all
runs, the minimum acceptable submission mean by bisection on a one-sided pooled t-test,
and the max speedup."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

ALPHA = 0.05
TOLERANCE = 1e-4


def trimmed_count(benchmark: str) -> int:
    """Runs dropped at each end by olympic scoring (UNet3D drops 4)."""
    return 4 if benchmark == "unet3d" else 1


def olympic_mean(values: Sequence[float], trim: int = 1) -> float:
    ordered = sorted(values)
    return float(np.mean(ordered[trim : len(ordered) - trim]))


def _one_sided_p(mean1: float, stdev: float, n1: int, mean2: float, n2: int) -> float:
    """p-value of 'mean1 < mean2' from a pooled two-sample t-test with equal stdevs."""
    # With one run on each side the pooled variance has no degrees of freedom and the
    # p-value is NaN, as in the checker (whose bisection then ends at the mean); that
    # case is expected, not worth a RuntimeWarning.
    with np.errstate(invalid="ignore", divide="ignore"):
        t_stat, p_two = stats.ttest_ind_from_stats(mean1, stdev, n1, mean2, stdev, n2, equal_var=True)
    return p_two / 2 if t_stat < 0 else 1 - p_two / 2


def min_acceptable_mean(mean: float, stdev: float, n_ref: int, submission_runs: int) -> float:
    """The smallest submission olympic mean that a one-sided test at alpha 0.05 does not
    call faster than the reference, found by bisection on [0, mean] to 1e-4."""
    if stdev == 0:
        return mean
    if not (math.isfinite(mean) and math.isfinite(stdev)):
        # The checker's bisection never ends on an infinite bound (it hangs); no finite
        # answer exists, so say "none" instead of hanging.
        return math.nan
    n_subm = submission_runs - 2
    lo, hi = 0.0, mean
    mid = (lo + hi) / 2
    while hi - lo > TOLERANCE:
        # The checker passes the reference count as the submission's and vice versa;
        # the pooled test is symmetric in them only up to rounding, so keep its order.
        if _one_sided_p(mid, stdev, n_ref, mean, n_subm) > ALPHA:
            hi = mid
        else:
            lo = mid
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            # Above about 1e12 neighbouring doubles lie more than 1e-4 apart, so the
            # interval stops shrinking and the checker's loop never ends. This is the
            # closest answer a double can give; where the checker ends, we never get here.
            break
    return mid


def not_an_rcp(runs: int, submission_runs: int) -> str | None:
    """The mark of a cell with fewer than the 2N runs an RCP needs, or None."""
    need = 2 * submission_runs
    return None if runs >= need else f"not an RCP ({runs} of 2N = {need} runs)"


def _degenerate(mean: float, stdev: float, m_star: float, n_ref: int, submission_runs: int) -> str | None:
    """Why the checker's minimum acceptable mean (and so the max speedup) says nothing
    statistical for these numbers, or None. The checker computes them all the same."""
    dof = n_ref + submission_runs - 2 - 2
    if dof <= 0:
        # Too few runs for any mean or stdev to tell: scipy's p-value is NaN, `p > alpha`
        # is False for NaN, so every bisection step raises the lower end and the answer is
        # the mean itself (max speedup 1). A stdev of 0 gives the same number by the
        # checker's shortcut, and says no more: it is no escape from this rule.
        return (f"the checker's t-test has no degrees of freedom (olympic scoring leaves {n_ref} reference "
                f"run(s) and {submission_runs - 2} submission run(s))")
    if stdev == 0:
        return None  # the rules' own case: max speedup 1
    if not math.isfinite(m_star):
        return "no finite minimum acceptable mean"
    if m_star <= TOLERANCE < mean:
        # the t-test calls no positive mean faster than the RCP: the bisection ends at 0
        return "the checker's t-test tells no submission mean above 0 from this RCP (too few runs for their spread)"
    return None


@dataclass(frozen=True)
class Marks:
    """How a cell's (or an RCP record's) statistics are marked: `degenerate` says why its
    limits say nothing (None where they do); `note` is the note every table and `check`
    show (None where there is nothing to say)."""

    degenerate: str | None
    note: str | None


def cell_marks(runs: int, n_ref: int, submission_runs: int, mean: float, stdev: float, m_star: float) -> Marks:
    """The one rule of small cells, for the RCP table (`analyze`, the report) and for
    `check`'s RCP alike: under 2N runs a cell is not an RCP (the rules' count); with too
    few runs for the checker's t-test (no degrees of freedom, whatever the stdev, 0
    included) or a bisection that ends at 0 or at no finite number, its minimum
    acceptable mean and max speedup are not meaningful. `runs`: the cell's runs;
    `n_ref`: the reference runs the checker's t-test counts (olympic scoring's kept runs;
    2N for an interpolated RCP). Numbers are never changed, only marked."""
    degenerate = _degenerate(mean, stdev, m_star, n_ref, submission_runs)
    parts = [not_an_rcp(runs, submission_runs),
             f"min acceptable mean and max speedup not meaningful: {degenerate}" if degenerate else None]
    return Marks(degenerate, "; ".join(p for p in parts if p) or None)


@dataclass(frozen=True)
class RcpStats:
    batch_size: int
    runs: int
    mean: float
    stdev: float
    min_acceptable_mean: float
    max_speedup: float
    # why min_acceptable_mean and max_speedup are not meaningful (they are still the checker's)
    degenerate: str | None = None
    note: str | None = None  # the cell's note (`cell_marks`)


def rcp_stats(values: Sequence[float], batch_size: int, benchmark: str, submission_runs: int) -> RcpStats:
    trim = trimmed_count(benchmark)
    if len(values) <= 2 * trim:
        raise ValueError(f"an RCP needs more than {2 * trim} runs, got {len(values)}")
    ordered = sorted(values)  # the checker sorts first; the sum's order shows in the last digit
    mean = olympic_mean(ordered, trim)
    stdev = float(np.std(ordered))
    n_ref = len(values) - 2 * trim
    m_star = min_acceptable_mean(mean, stdev, n_ref, submission_runs)
    marks = cell_marks(len(values), n_ref, submission_runs, mean, stdev, m_star)
    return RcpStats(batch_size, len(values), mean, stdev, m_star, mean / m_star, marks.degenerate, marks.note)
