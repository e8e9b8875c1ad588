"""What a look's interval answers of an adaptive campaign's question (a verdict against
the margin, equivalence within the band, a precision), and whether any answer is still
within reach of max_seeds (the futility stop). Both read only the runs recorded, so the
looks `orchestrator/adaptive.py` replays decide the same wherever they are replayed."""

from __future__ import annotations

import math

from scipy import special

from rcpforge.analysis.sequential import SequentialInterval, arm, boundaries
from rcpforge.sweeps.adaptive_spec import AdaptiveSpec


def answer(interval: SequentialInterval, settings: AdaptiveSpec) -> str | None:
    """What the interval answers of the campaign's question, or None."""
    verdict = precision = equivalent = None
    if settings.margin is not None:
        if interval.low is not None and interval.low > settings.margin:
            verdict = f"slower than {settings.margin:g} (interval {interval.low:.4f} .. {bound_text(interval.high)})"
        elif interval.high is not None and interval.high < settings.margin:
            verdict = f"within {settings.margin:g} (interval {bound_text(interval.low)} .. {interval.high:.4f})"
    hw = interval.half_width
    if settings.half_width is not None and hw is not None and hw <= settings.half_width:
        precision = f"+-{hw:.2%} (goal +-{settings.half_width:.2%})"
    if (settings.equivalence is not None and interval.low is not None and interval.high is not None
            and 1 / (1 + settings.equivalence) < interval.low and interval.high < 1 + settings.equivalence):
        equivalent = (f"equivalent within {settings.equivalence:.2%} "
                      f"(interval {interval.low:.4f} .. {interval.high:.4f})")
    if settings.require == "all":
        return f"{verdict}; {precision}" if verdict and precision else None
    return verdict or equivalent or precision


# The factors still plausible when judging futility: the estimate +- this many standard
# errors. Smaller stops sooner and loses more answers; 0.5 kept benchmarks/adaptive.py's
# answered rate at the fixed design's (docs/adaptive.md).
FUTILITY_Z = 0.5


def futile(candidate: list[float], reference: list[float], spreads: tuple[float, float], times: list[float],
           settings: AdaptiveSpec, max_seeds: int, trim: int) -> str | None:
    """Why no goal of the question is within reach, or None: at max_seeds on both arms,
    with the runs spreading as `spreads` (the allocation's, pooled over the batch size's
    arms: five runs' own spread is too noisy to judge by), the interval would be +-h
    (log scale); a
    verdict needs a factor h past the margin, equivalence one h inside the band, and
    neither is plausible (within FUTILITY_Z standard errors of the estimate), nor would
    the precision goal be met. Stopping without an answer claims nothing, so any rule
    keeps the intervals' guarantee; this one only costs answers it misjudges."""
    finite = [v for v in (*candidate, *reference) if math.isfinite(v)]
    if not finite:
        return None
    c, r = arm(candidate, trim, max(finite)), arm(reference, trim, max(finite))
    if c is None or r is None or c.censored > trim or r.censored > trim or c.spread + r.spread <= 0:
        return None  # an unbounded side may still give a verdict; no projection to go on
    kept = max_seeds - 2 * trim
    terms = [(max_seeds - 1) * s / (kept * (kept - 1)) for s in spreads]
    se2 = sum(terms)
    df = se2 ** 2 / sum(d * d / (kept - 1) for d in terms)
    # the boundary of a next look at max_seeds: looser than the last one will be, so this errs toward going on
    z = boundaries([*times, 1.0] if times[-1] < 1.0 else times, 1 - settings.confidence, settings.spending)[-1]
    h = float(-special.stdtrit(df, 0.5 * math.erfc(z / math.sqrt(2)))) * math.sqrt(se2)
    diff = c.mean - r.mean
    spread_now = FUTILITY_Z * math.sqrt(c.variance_term + r.variance_term)
    low, high = diff - spread_now, diff + spread_now
    reachable = {}
    if settings.margin is not None:
        edge = math.log(settings.margin)
        reachable["verdict"] = high > edge + h or low < edge - h
    if settings.equivalence is not None:
        band = math.log(1 + settings.equivalence) - h
        reachable["equivalence"] = band > 0 and high > -band and low < band
    if settings.half_width is not None:
        reachable["precision"] = math.sinh(h) <= settings.half_width
    if settings.require == "all" and not (reachable.get("verdict") and reachable.get("precision")):
        pass
    elif any(reachable.values()):
        return None
    names = {"verdict": f"a verdict against {settings.margin}", "equivalence": "equivalence",
             "precision": "the precision goal"}
    goals = [names[g] for g in reachable]
    return (f"{'neither ' + ' nor '.join(goals) if len(goals) > 1 else 'no ' + goals[0]} within reach of "
            f"{max_seeds} runs per cell: the interval there would be about +-{math.sinh(h):.2%} "
            f"around {math.exp(diff):.4f}")


def bound_text(value: float | None) -> str:
    return "unbounded" if value is None else f"{value:.4f}"
