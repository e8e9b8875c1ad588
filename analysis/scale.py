"""How a recipe's convergence factor moves with model size (issue 31): per model, the
factor against the reference recipe of the same model (`analysis/factors.py` on that
model's runs), then per (recipe, batch size) the trend of log factor against log
parameter count, factor = A * params^slope, with a 95% interval on the slope, a verdict,
and, only when asked, the factor predicted at a size beyond the measured ones, labelled
an extrapolation.

The slope's uncertainty is carried from the runs by a bootstrap over runs within cells:
every resample redraws each (model, recipe) cell's runs from its own runs, at its own
size, refits the line, and the percentile interval of the slopes is the slope's. A
weighted fit, each cell weighted by its draws' spread (`method="weighted"`), is kept beside it: the
seeded coverage simulation (tests/analysis/test_scale_coverage.py, docs/scale.md) measured
both, and the bootstrap's coverage is the nearer to 95%, so it is the default.

Runs that did not converge: a model's factor is the one `factors` gives (undefined where
more of a cell's runs failed than olympic scoring drops; that model then sits out the
trend, named in the trend's `excluded` with its reason and a floor on its factor: each
run that did not converge counts at the tokens it trained, since it needed more). Inside
the trend's bootstrap a failed run counts at the largest converged value of its cell, as
the adaptive intervals count it (it needed at least as much), so a resample that draws it
twice does not make the line unbounded."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import stats as scipy_stats

from rcpforge.analysis.factors import OUTCOMES, Factor, cell_values, factors
from rcpforge.analysis.rcp import olympic_mean, trimmed_count
from rcpforge.analysis.stats import resample_olympic

METHODS = ("bootstrap", "weighted")
SHRINKS, GROWS, NO_TREND = "shrinks", "grows", "no trend detectable with these runs"
TOO_FEW = "too few sizes"


def has_model_axis(runs: pa.Table) -> bool:
    """More than one model in the runs: only then is there a trend to fit."""
    return "model" in runs.column_names and len(set(runs["model"].to_pylist()) - {None}) > 1


@dataclass(frozen=True)
class ModelCell:
    """One model's factor for a candidate recipe at a batch size."""

    model: str
    params: int | None
    recipe: str
    batch_size: int
    factor: float | None
    ci_low: float | None
    ci_high: float | None
    ci_low_unbounded: bool
    ci_high_unbounded: bool
    runs_candidate: int
    runs_reference: int
    reason: str | None
    # Where the factor is undefined because too few candidate runs converged: a floor on
    # it (every such run needed more than the tokens it trained), or None.
    factor_above: float | None = None


@dataclass
class Trend:
    """The fit of log factor against log params for one (recipe, batch size)."""

    recipe: str
    batch_size: int
    sizes: int  # models in the fit
    params_min: int | None
    params_max: int | None
    slope: float | None = None
    slope_low: float | None = None
    slope_high: float | None = None
    intercept: float | None = None  # log factor at params = 1 (the fit's, for drawing the line)
    verdict: str = TOO_FEW
    verdict_text: str = ""
    reason: str | None = None
    predicted: dict | None = None  # only with --extrapolate-to
    # models measured but outside the fit (undefined factor): model, params, reason, factor_above
    excluded: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k != "predicted"}
        return out | (self.predicted or {})


@dataclass
class ScaleResult:
    reference: str
    confidence: float
    method: str
    resamples: int
    seed: int
    extrapolate_to: float | None
    cells: list[ModelCell] = field(default_factory=list)
    trends: list[Trend] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"reference": self.reference, "confidence": self.confidence, "method": self.method,
                "resamples": self.resamples, "seed": self.seed, "extrapolate_to": self.extrapolate_to,
                "trends": [t.as_dict() for t in self.trends], "cells": [asdict(c) for c in self.cells]}


def model_params(runs: pa.Table) -> dict[str, int | None]:
    """Each model's parameter count (None where the runs do not record it)."""
    out: dict[str, int | None] = {}
    for model, params in zip(runs["model"].to_pylist(), runs["model_params"].to_pylist(), strict=True):
        if params is not None or model not in out:
            out[model] = None if params is None else int(params)
    return out


def scale_analysis(runs: pa.Table, reference: str, benchmark: str, *, confidence: float = 0.95,
                   resamples: int = 10_000, seed: int = 0, extrapolate_to: float | None = None,
                   method: str = "bootstrap") -> ScaleResult:
    """Every model's factors, and per (recipe, batch size) the trend across models."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    trim = trimmed_count(benchmark)
    params = model_params(runs)
    result = ScaleResult(reference, confidence, method, resamples, seed, extrapolate_to)
    # (recipe, bs) -> [(params, candidate values, reference values, the cell's factor)]
    points: dict[tuple[str, int], list[tuple[int, list[float], list[float], Factor]]] = {}
    for model in sorted(params, key=lambda m: (params[m] is None, params[m] or 0, m)):
        rows = runs.filter(pc.equal(runs["model"], model))
        censored = cell_values(rows, not_converged=math.inf)
        size = params[model]
        for f in factors(rows, reference, benchmark, confidence=confidence, resamples=resamples, seed=seed):
            floor = None if f.factor is not None else factor_floor(rows, f.candidate, reference, f.batch_size, trim)
            result.cells.append(ModelCell(model, size, f.candidate, f.batch_size, f.factor, f.ci_low,
                                          f.ci_high, f.ci_low_unbounded, f.ci_high_unbounded, f.runs_candidate,
                                          f.runs_reference, f.reason, floor))
            if f.factor is not None and size is not None:
                points.setdefault((f.candidate, f.batch_size), []).append(
                    (size, censored[(f.candidate, f.batch_size)], censored[(reference, f.batch_size)], f))
    unknown = sorted(m for m, p in params.items() if p is None)
    for (recipe, bs) in sorted({(c.recipe, c.batch_size) for c in result.cells}):
        trend = fit_trend(recipe, bs, points.get((recipe, bs), []), trim, confidence=confidence,
                          resamples=resamples, seed=seed, extrapolate_to=extrapolate_to, method=method,
                          unknown=unknown)
        trend.excluded = [{"model": c.model, "params": c.params, "reason": c.reason, "factor_above": c.factor_above}
                          for c in result.cells if (c.recipe, c.batch_size) == (recipe, bs) and c.factor is None]
        if trend.excluded:
            trend.verdict_text += f"; outside the fit: {_excluded_text(trend.excluded)}"
        result.trends.append(trend)
    return result


def factor_floor(rows: pa.Table, candidate: str, reference: str, bs: int, trim: int) -> float | None:
    """A floor on a factor left undefined because too few candidate runs converged: each
    run that did not converge counts at the tokens it trained (it needed more), over the
    reference's olympic mean. None where the reference's own mean is infinite or a run
    recorded no tokens."""
    def tokens(recipe: str, stopped_at_trained: bool) -> list[float]:
        cell = rows.filter(pc.and_(pc.equal(rows["recipe"], recipe), pc.equal(rows["batch_size"], bs)))
        out = []
        for r in cell.select(["status", "tokens_to_target", "tokens_trained"]).to_pylist():
            if r["status"] == "converged":
                out.append(r["tokens_to_target"])
            elif r["status"] in OUTCOMES:
                out.append(r["tokens_trained"] if stopped_at_trained else math.inf)
        return [math.nan if v is None else float(v) for v in out]
    cand, ref = tokens(candidate, True), tokens(reference, False)
    if min(len(cand), len(ref)) <= 2 * trim or any(math.isnan(v) for v in cand + ref):
        return None
    floor = olympic_mean(cand, trim) / olympic_mean(ref, trim)
    return floor if math.isfinite(floor) else None


def _excluded_text(excluded: list[dict]) -> str:
    def one(e: dict) -> str:
        size = "" if e["params"] is None else f" ({e['params']:,} params)"
        floor = "" if e["factor_above"] is None else f": factor above {e['factor_above']:.2f}"
        return f"{e['model']}{size}{floor or ': factor undefined'}"
    return ", ".join(one(e) for e in excluded)


def fit_trend(recipe: str, bs: int, points: list, trim: int, *, confidence: float, resamples: int, seed: int,
              extrapolate_to: float | None, method: str, unknown: list[str] | None = None) -> Trend:
    """The line through one (recipe, batch size)'s cells; `points`: (params, candidate
    values, reference values, factor) per model whose factor is defined."""
    sizes = sorted({p[0] for p in points})
    trend = Trend(recipe, bs, len(points), sizes[0] if sizes else None, sizes[-1] if sizes else None)
    if len(sizes) < 2:
        missing = f"; models without a recorded parameter count: {', '.join(unknown)}" if unknown else ""
        trend.reason = (f"{len(sizes)} model size(s) with a defined factor; a trend needs at least 2 "
                        f"(better 3){missing}")
        trend.verdict_text = f"{recipe} bs {bs}: no trend: {trend.reason}"
        return trend
    x = np.log([p[0] for p in points])
    fit = _bootstrap_fit if method == "bootstrap" else _weighted_fit
    slope, low, high, intercept, draws = fit(x, points, trim, confidence, resamples, seed)
    trend.slope, trend.slope_low, trend.slope_high, trend.intercept = slope, low, high, intercept
    if len(sizes) == 2:
        trend.reason = "two sizes: a line through two points, with no check that a power law fits"
    trend.verdict, trend.verdict_text = _verdict(trend, x)
    if trend.reason:
        trend.verdict_text += f" ({trend.reason})"
    if extrapolate_to is not None:
        trend.predicted = _prediction(trend, draws, math.log(extrapolate_to), confidence, extrapolate_to)
    return trend


def _slopes(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least-squares slope and intercept of each column of y (cells, draws)."""
    w = weights / weights.sum()
    xc = x - (w * x).sum()
    lever = w * xc / (w * xc * xc).sum()  # slope = sum(lever * y)
    slope = (lever[:, None] * y).sum(axis=0)
    intercept = (w[:, None] * y).sum(axis=0) - slope * (w * x).sum()
    return slope, intercept


def _cell_draws(points: list, trim: int, resamples: int, seed: int) -> np.ndarray:
    """(cells, resamples) log factors, each cell's runs redrawn within the cell. A run
    that did not converge counts at the largest converged value of its cell's two
    recipes (it needed at least as much; as the adaptive intervals count it): a cell's
    factor is defined only where olympic scoring drops its censored runs, and a resample
    that draws one twice is no reason to lose the whole trend."""
    rng = np.random.default_rng(seed)
    y = np.empty((len(points), resamples))
    for i, (_, cand, ref, _) in enumerate(points):
        finite = [v for v in (*cand, *ref) if math.isfinite(v)]
        at = max(finite)
        c = resample_olympic(np.where(np.isinf(cand), at, cand), len(cand), resamples, rng, trim)
        r = resample_olympic(np.where(np.isinf(ref), at, ref), len(ref), resamples, rng, trim)
        y[i] = np.log(c) - np.log(r)
    return y


def _spread(draws: np.ndarray) -> np.ndarray:
    """Each cell's standard deviation of log factor, from its draws' quartiles (robust to
    the censored draws beyond them); a floor keeps a cell of identical runs finite."""
    q1, q3 = np.nanquantile(draws, [0.25, 0.75], axis=1)
    sd = (q3 - q1) / 1.349
    return np.where(np.isfinite(sd) & (sd > 1e-6), sd, 1e-6)


def _bootstrap_fit(x, points, trim, confidence, resamples, seed):
    draws = _cell_draws(points, trim, resamples, seed)
    weights = 1 / _spread(draws) ** 2  # fixed across resamples: the estimator stays one
    y0 = np.log([p[3].factor for p in points])
    slope, intercept = (v[0] for v in _slopes(x, y0[:, None], weights))
    slopes, intercepts = _slopes(x, draws, weights)
    low, high = np.quantile(slopes, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(slope), float(low), float(high), float(intercept), (slopes, intercepts)


def _weighted_fit(x, points, trim, confidence, resamples, seed):
    """Weighted least squares with each cell's standard error from its own bootstrap
    draws (their spread, not its reported interval: that is an expanded percentile
    interval, wider than the cell's standard error x z); a normal interval on the slope."""
    z = float(scipy_stats.norm.isf((1 - confidence) / 2))
    f = [p[3] for p in points]
    weights = 1 / _spread(_cell_draws(points, trim, resamples, seed)) ** 2
    y0 = np.log([c.factor for c in f])
    slope, intercept = (float(v[0]) for v in _slopes(x, y0[:, None], weights))
    xbar = float((weights * x).sum() / weights.sum())
    var = 1 / float((weights * (x - xbar) ** 2).sum())
    half = z * math.sqrt(var)
    # the fit's normal draws, for a prediction: slope and the level at the weighted mean independent
    rng = np.random.default_rng(seed)
    slopes = slope + math.sqrt(var) * rng.standard_normal(resamples)
    level = (intercept + slope * xbar) + math.sqrt(1 / weights.sum()) * rng.standard_normal(resamples)
    return slope, slope - half, slope + half, intercept, (slopes, level - slopes * xbar)


def _verdict(trend: Trend, x: np.ndarray) -> tuple[str, str]:
    """Shrinks: the factor moves toward 1 as models grow; grows: away from 1. Which way
    is toward 1 is the fitted factor's side of 1 at the middle of the measured sizes."""
    assert trend.slope is not None and trend.intercept is not None
    middle = trend.intercept + trend.slope * float((x.min() + x.max()) / 2)
    low = -math.inf if trend.slope_low is None else trend.slope_low
    high = math.inf if trend.slope_high is None else trend.slope_high
    interval = f"slope {trend.slope:+.4f}, 95% {_bound(trend.slope_low)} .. {_bound(trend.slope_high)}"
    head = f"{trend.recipe} bs {trend.batch_size}"
    if low <= 0 <= high:
        return NO_TREND, f"{head}: no trend detectable with these runs ({interval})"
    falls = high < 0
    toward_one = falls == (middle > 0)
    verdict = SHRINKS if toward_one else GROWS
    direction = "falls" if falls else "rises"
    what = "penalty" if middle > 0 else "advantage"
    return verdict, f"{head}: the factor {direction} with model size: the {what} {verdict} ({interval})"


def _bound(value: float | None) -> str:
    return "unbounded" if value is None else f"{value:+.4f}"


def _prediction(trend: Trend, draws, at: float, confidence: float, params: float) -> dict:
    """The factor at `at` (log params) from the fitted line, with the percentile interval
    of the resampled lines there; labelled an extrapolation beyond the measured sizes."""
    slopes, intercepts = draws
    assert trend.slope is not None and trend.intercept is not None
    point = math.exp(trend.intercept + trend.slope * at)
    y = intercepts + slopes * at
    tail = (1 - confidence) / 2
    low, high = (float(math.exp(v)) for v in np.quantile(y, [tail, 1 - tail]))
    inside = trend.params_min is not None and trend.params_max is not None and \
        trend.params_min <= params <= trend.params_max
    label = (f"interpolation within the measured sizes ({trend.params_min:.3g} .. {trend.params_max:.3g} params)"
             if inside else f"EXTRAPOLATION beyond the measured sizes ({trend.params_min:.3g} .. "
             f"{trend.params_max:.3g} params) to {params:.3g}: assumes the power law holds there")
    crossing = _crosses_one(trend, at)
    if crossing is not None:
        label += (f"; the line crosses 1 at {crossing:.3g} params, before this size: a power law of the factor "
                  "carries a shrinking penalty on into an advantage (and a shrinking advantage into a penalty), "
                  "so beyond that size the prediction reflects the model of the trend more than the recipe")
    return {"predicted_at_params": params, "predicted_factor": point, "predicted_low": low, "predicted_high": high,
            "extrapolation": not inside, "predicted_label": label, "crosses_one_at": crossing}


def _crosses_one(trend: Trend, at: float) -> float | None:
    """The size, past the smallest measured one, at which the fitted line reaches factor 1
    on the way to `at` (log params), or None where it does not."""
    assert trend.slope is not None and trend.intercept is not None and trend.params_min is not None
    if trend.slope == 0:
        return None
    where = -trend.intercept / trend.slope
    return math.exp(where) if math.log(trend.params_min) < where < at else None


def _fixed(value: float | None, digits: int = 4) -> str:
    return "unbounded" if value is None else f"{value:.{digits}f}"


def scale_markdown(result: ScaleResult) -> list[str]:
    """The summary.md section: the trends with their verdicts, then every model's factor."""
    lines = ["", f"## Factor against model size ({result.confidence:.0%} interval, {result.method} over runs "
             "within cells)", "",
             "Per recipe and batch size, the line log factor = a + slope * log(parameters) through each model's "
             f"factor against `{result.reference}` of the same model. Shrinks: the factor moves toward 1 as models "
             "grow; grows: away from 1.", ""]
    extrapolating = result.extrapolate_to is not None
    head = ["recipe", "batch_size", "sizes", "params", "slope", "slope interval", "verdict"]
    if extrapolating:
        head += [f"factor at {result.extrapolate_to:.3g} params (EXTRAPOLATION)", "prediction interval"]
    lines += [f"| {' | '.join(head)} |", "|" + "---|" * len(head)]
    for t in result.trends:
        span = f"{t.params_min:.3g} .. {t.params_max:.3g}" if t.params_min is not None else "-"
        slope = "-" if t.slope is None else f"{t.slope:+.4f}"
        interval = "-" if t.slope is None else f"{_fixed(t.slope_low)} .. {_fixed(t.slope_high)}"
        row = [t.recipe, str(t.batch_size), str(t.sizes), span, slope, interval, t.verdict]
        if extrapolating:
            p = t.predicted or {}
            row += ["-" if not p else f"{p['predicted_factor']:.4f}",
                    "-" if not p else f"{_fixed(p['predicted_low'])} .. {_fixed(p['predicted_high'])}"]
        lines.append(f"| {' | '.join(row)} |")
    lines += [""] + [f"- {t.verdict_text}" for t in result.trends]
    if extrapolating:
        lines += [f"- {t.recipe} bs {t.batch_size}: {t.predicted['predicted_label']}" for t in result.trends
                  if t.predicted]
    lines += ["", "| model | params | recipe | batch_size | factor | interval | runs (candidate, reference) | reason |",
              "|---|---:|---|---:|---:|---|---|---|"]
    for c in result.cells:
        factor = (f"above {c.factor_above:.4f}" if c.factor_above is not None else "-") if c.factor is None \
            else f"{c.factor:.4f}"
        interval = "-" if c.factor is None else f"{_fixed(c.ci_low)} .. {_fixed(c.ci_high)}"
        params = "unknown" if c.params is None else f"{c.params:,}"
        lines.append(f"| {c.model} | {params} | {c.recipe} | {c.batch_size} | {factor} | {interval} | "
                     f"{c.runs_candidate}, {c.runs_reference} | {c.reason or ''} |")
    return lines
