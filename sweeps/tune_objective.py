"""The censored objective: tokens-to-target, where a trial that does not reach the
target within the budget is neither a failure nor a made-up tokens-to-target.

Converged trials score their mean tokens-to-target, which is at most about max_tokens.
A trial with a seed that did not converge is censored at the budget and scores
`2 * max_tokens * (1 + D)`, D the mean over its seeds of the final distance to the target
(0 for a seed that converged): every censored trial ranks behind every converged one,
and among censored trials the one that came closer ranks first, so the sampler still
learns which way is better.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rcpforge.trainers.contract import RunResult, RunStatus, Target

# The distance of a seed whose final metric is not a number (its loss blew up).
NAN_DISTANCE = 1e6


def distance(target: Target, value: float | None) -> float:
    """How far an eval value is from the target, >= 0, 0 when it is reached."""
    if value is None or not math.isfinite(value):
        return NAN_DISTANCE
    gap = value - target.value if target.mode == "min" else target.value - value
    return max(gap, 0.0)


@dataclass(frozen=True)
class TrialScore:
    value: float
    converged: bool  # every seed reached the target
    censored: bool  # some seed did not: the value is the censored encoding
    mean_tokens_to_target: float | None
    mean_distance: float


def score(results: list[RunResult], target: Target, max_tokens: int) -> TrialScore:
    """Score a trial from the outcomes of its seeds (converged / not_converged / diverged)."""
    if not results or not all(r.status.is_outcome for r in results):
        raise ValueError(f"a trial is scored from outcomes only, got {[r.status.value for r in results]}")
    if all(r.status is RunStatus.converged for r in results):
        mean = sum(r.tokens_to_target for r in results) / len(results)
        return TrialScore(mean, True, False, mean, 0.0)
    dists = [0.0 if r.status is RunStatus.converged else max(distance(target, r.final_metric), 1e-12)
             for r in results]
    d = sum(dists) / len(dists)
    return TrialScore(2.0 * max_tokens * (1.0 + d), False, True, None, d)
