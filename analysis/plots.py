"""The report's figures (matplotlib, rendered to PNG bytes)."""

from __future__ import annotations

import io
from collections import defaultdict

import matplotlib
import matplotlib.cm
import matplotlib.colors
import matplotlib.lines
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402


def _tokens_axis(ax) -> None:
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
        lambda v, _: f"{v / 1e6:g}M" if abs(v) >= 1e6 else f"{v / 1e3:g}k" if v else "0"))


def _batch_axis(ax, sizes) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(sizes)), [str(b) for b in sorted(set(sizes))])
    ax.minorticks_off()


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _cells(runs: pa.Table) -> list[tuple[str, int]]:
    return sorted({(r, b) for r, b in zip(runs["recipe"].to_pylist(), runs["batch_size"].to_pylist())})


# Up to this many seeds get a legend entry each (one colour of tab10 per seed); more get a
# colour scale with a colour bar, which stays readable at any count.
LEGEND_SEEDS = 10


def eval_curves(runs: pa.Table, curves: pa.Table, metric: str, target: float) -> bytes:
    return _png(eval_curves_figure(runs, curves, metric, target))


def _seed_colours(seeds: list[int]):
    """Each seed's colour (the same in every panel) and what names them: a legend's
    handles, or the mappable of a colour bar when there are many seeds."""
    if len(seeds) <= LEGEND_SEEDS:
        colour = {s: plt.get_cmap("tab10")(i) for i, s in enumerate(seeds)}
        return colour, [matplotlib.lines.Line2D([], [], color=colour[s], label=str(s)) for s in seeds]
    norm = matplotlib.colors.Normalize(min(seeds), max(seeds))
    cmap = matplotlib.colormaps["viridis"]
    return {s: cmap(norm(s)) for s in seeds}, matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)


def eval_curves_figure(runs: pa.Table, curves: pa.Table, metric: str, target: float):
    """One panel per (recipe, batch size): every seed's eval curve, one colour per seed
    named in a legend (or a colour bar), and the target line."""
    cells = _cells(runs)
    recipes = sorted({c[0] for c in cells})
    sizes = sorted({c[1] for c in cells})
    fig, axes = plt.subplots(len(recipes), len(sizes), figsize=(4.2 * len(sizes), 3.0 * len(recipes)),
                             squeeze=False, sharey=True, layout="constrained")
    seed_of = dict(zip(runs["run_id"].to_pylist(), runs["seed"].to_pylist()))
    cell_of = dict(zip(runs["run_id"].to_pylist(), zip(runs["recipe"].to_pylist(), runs["batch_size"].to_pylist())))
    colour, key = _seed_colours(sorted(set(seed_of.values())))
    series: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for run_id, name, tokens, value in zip(*(curves[c].to_pylist() for c in ("run_id", "metric", "tokens", "value"))):
        if name == metric and tokens is not None:  # an imported run's points step by samples, not tokens
            series[run_id][0].append(tokens)
            series[run_id][1].append(value)
    for run_id, (xs, ys) in series.items():
        recipe, bs = cell_of[run_id]
        ax = axes[recipes.index(recipe)][sizes.index(bs)]
        ax.plot(xs, ys, lw=1, color=colour[seed_of[run_id]], label=f"seed {seed_of[run_id]}")
    for i, recipe in enumerate(recipes):
        for j, bs in enumerate(sizes):
            ax = axes[i][j]
            ax.axhline(target, color="black", ls="--", lw=1)
            ax.set_title(f"{recipe}, batch {bs}", fontsize=10)
            ax.set_xlabel("tokens")
            _tokens_axis(ax)
            if j == 0:
                ax.set_ylabel(metric)
    if isinstance(key, list):
        fig.legend(handles=key, title="seed", loc="outside right upper", fontsize=8, title_fontsize=9)
    else:
        fig.colorbar(key, ax=axes, label="seed", shrink=0.8)
    return fig


def tokens_distribution(runs: pa.Table, batch_sizes: list[int]) -> bytes:
    """Tokens-to-target of every converged run, per recipe, at the given batch sizes."""
    recipes = sorted(set(runs["recipe"].to_pylist()))
    fig, axes = plt.subplots(1, len(batch_sizes), figsize=(4.5 * len(batch_sizes), 3.2), squeeze=False,
                             layout="constrained")
    rows = runs.to_pylist()
    for ax, bs in zip(axes[0], batch_sizes):
        data = [[r["tokens_to_target"] for r in rows if r["recipe"] == rec and r["batch_size"] == bs
                 and r["status"] == "converged"] for rec in recipes]
        ax.boxplot([d or [float("nan")] for d in data], widths=0.5)
        for k, values in enumerate(data, start=1):
            ax.scatter([k] * len(values), values, s=14, alpha=0.7, zorder=3)
        ax.set_xticks(range(1, len(recipes) + 1), recipes, rotation=20)
        ax.set_title(f"batch {bs}", fontsize=10)
        ax.set_ylabel("tokens to target")
    return _png(fig)


def rcp_curve(table: pa.Table, kept: dict[str, set[int]] | None = None,
              envelope: dict[str, set[int]] | None = None) -> bytes:
    """Olympic mean of samples to converge against batch size, per recipe. Points that
    the checker's pruning removes are drawn hollow; points that the true lower convex
    envelope removes are crossed."""
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    rows = [r for r in table.to_pylist() if r["olympic_mean"] is not None]
    for recipe in sorted({r["recipe"] for r in rows}):
        pts = sorted((r["batch_size"], r["olympic_mean"]) for r in rows if r["recipe"] == recipe)
        line = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=recipe)[0]
        for bs, mean in pts:
            if kept is not None and bs not in kept.get(recipe, set()):
                ax.scatter([bs], [mean], s=90, facecolors="white", edgecolors=line.get_color(), zorder=4)
            if envelope is not None and bs not in envelope.get(recipe, set()):
                ax.scatter([bs], [mean], s=60, marker="x", color="black", zorder=5)
    _batch_axis(ax, [r["batch_size"] for r in rows])
    ax.set_xlabel("batch size")
    ax.set_ylabel("samples to converge (olympic mean)")
    ax.legend(fontsize=8)
    return _png(fig)


def telemetry(runs: pa.Table, curves: pa.Table, names: list[str]) -> bytes:
    """Mean over seeds of each telemetry metric at the last eval, per recipe."""
    recipe_of = dict(zip(runs["run_id"].to_pylist(), runs["recipe"].to_pylist()))
    last: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for run_id, name, tokens, value in zip(*(curves[c].to_pylist() for c in ("run_id", "metric", "tokens", "value"))):
        if tokens is not None:
            last[(run_id, name)][tokens] = value
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names)), 3.4))
    recipes = sorted(set(recipe_of.values()))
    width = 0.8 / max(1, len(recipes))
    for k, recipe in enumerate(recipes):
        means = []
        for name in names:
            finals = [pts[max(pts)] for (rid, n), pts in last.items() if n == name and recipe_of.get(rid) == recipe]
            means.append(sum(finals) / len(finals) if finals else 0.0)
        ax.bar([i + k * width for i in range(len(names))], means, width=width, label=recipe)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], [n.removeprefix("telemetry.") for n in names],
                  rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("fraction (last eval)")
    ax.legend(fontsize=8)
    return _png(fig)


def factor_curves(found: list) -> bytes:
    """Convergence factor of each candidate against the reference, per batch size, with
    its bootstrap interval (a dotted arrow where a side is unbounded); 1 is parity."""
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    for cand in sorted({f.candidate for f in found}):
        pts = sorted((f.batch_size, f.factor, f.ci_low, f.ci_high) for f in found if f.candidate == cand and f.factor is not None)
        if not pts:
            continue
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        lo = [p[1] - (p[2] if p[2] is not None else p[1]) for p in pts]
        hi = [(p[3] if p[3] is not None else p[1]) - p[1] for p in pts]
        bars = ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=4, label=cand)
        # An unbounded side (censored resamples decide it): a dotted line ending in an arrowhead.
        color = bars[0].get_color()
        for x, y, low, high in pts:
            for bound, end, head in ((low, y * 0.6, "v"), (high, y * 1.4, "^")):
                if bound is None:
                    ax.plot([x, x], [y, end], ls=":", color=color)
                    ax.plot([x], [end], marker=head, color=color)
    ax.axhline(1.0, color="black", ls="--", lw=1)
    _batch_axis(ax, [f.batch_size for f in found])
    ax.set_xlabel("batch size")
    ax.set_ylabel("factor (candidate / reference)")
    ax.legend(fontsize=8)
    return _png(fig)


def look_intervals(record: dict) -> bytes:
    """An adaptive campaign's intervals as they narrowed: per comparison, the factor and
    its repeated confidence interval at every look (an arrow where a side is unbounded),
    the margin dotted, parity dashed."""
    comparisons = sorted({(e["candidate"], e["batch_size"]) for e in record["looks"]})
    fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
    for i, (cand, bs) in enumerate(comparisons):
        looks = [e for e in record["looks"] if (e["candidate"], e["batch_size"]) == (cand, bs)]
        shift = (i - (len(comparisons) - 1) / 2) * 0.08  # side by side at each look
        xs, ys, lo, hi = [], [], [], []
        for e in looks:
            if e["factor"] is None or e["low"] is None or e["high"] is None:
                continue  # no interval at this look yet (too few runs, or unbounded)
            xs.append(e["look"] + shift)
            ys.append(e["factor"])
            lo.append(e["factor"] - e["low"])
            hi.append(e["high"] - e["factor"])
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=f"{cand} bs{bs}")
    margin = record["settings"].get("margin")
    if margin is not None:
        ax.axhline(margin, color="gray", ls=":", lw=1)
    ax.axhline(1.0, color="black", ls="--", lw=1)
    ax.set_xlabel("look")
    ax.set_ylabel("factor (candidate / reference)")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    if comparisons:
        ax.legend(fontsize=8)
    return _png(fig)


def scale_trends(result, points: list | None = None) -> bytes:
    """Factor against parameter count (log-log), one panel per candidate recipe: each
    model's factor with its interval per batch size (a hollow triangle: a model outside the
    fit whose runs did not converge, at the floor on its factor), the fitted line over the measured
    sizes (dashed on to an asked-for extrapolation, with its interval, labelled), and
    public reference points drawn as black stars, never fitted."""
    recipes = sorted({c.recipe for c in result.cells})
    fig, axes = plt.subplots(1, len(recipes), figsize=(4.8 * len(recipes), 3.8), squeeze=False, layout="constrained")
    for ax, recipe in zip(axes[0], recipes):
        for t in (t for t in result.trends if t.recipe == recipe):
            cells = [c for c in result.cells if c.recipe == recipe and c.batch_size == t.batch_size
                     and c.factor is not None and c.params is not None]
            xs, ys = [c.params for c in cells], [c.factor for c in cells]
            lo = [c.factor - (c.ci_low if c.ci_low is not None else c.factor) for c in cells]
            hi = [(c.ci_high if c.ci_high is not None else c.factor) - c.factor for c in cells]
            bars = ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=4, ls="none", label=f"bs {t.batch_size}")
            floors = [e for e in t.excluded if e["factor_above"] is not None and e["params"] is not None]
            if floors:  # models outside the fit: their factor is only known to be above this
                ax.scatter([e["params"] for e in floors], [e["factor_above"] for e in floors], marker="^", s=60,
                           facecolors="none", edgecolors=bars[0].get_color(),
                           label=f"bs {t.batch_size}: not converged, factor above")
            if t.slope is None:
                continue
            colour = bars[0].get_color()
            line = np.geomspace(t.params_min, t.params_max, 20)
            ax.plot(line, np.exp(t.intercept + t.slope * np.log(line)), color=colour, lw=1.2)
            if t.predicted:
                p = t.predicted
                ahead = np.geomspace(t.params_max, p["predicted_at_params"], 20)
                ax.plot(ahead, np.exp(t.intercept + t.slope * np.log(ahead)), color=colour, lw=1, ls="--")
                ax.errorbar([p["predicted_at_params"]], [p["predicted_factor"]],
                            yerr=[[p["predicted_factor"] - p["predicted_low"]], [p["predicted_high"] - p["predicted_factor"]]],
                            marker="D", mfc="white", color=colour, capsize=4,
                            label=f"bs {t.batch_size} extrapolated" if p["extrapolation"] else f"bs {t.batch_size} predicted")
        for point in (p for p in points or [] if p.recipe == recipe):
            err = [[point.factor - (point.low or point.factor)], [(point.high or point.factor) - point.factor]]
            ax.errorbar([point.params], [point.factor], yerr=err, marker="*", ms=11, color="black", capsize=4,
                        ls="none", label=f"{point.name} (not fitted)")
        ax.axhline(1.0, color="gray", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        # Factors span less than a decade: a log axis would label only 1; plain ticks instead.
        low, high = ax.get_ylim()
        ax.set_yticks([v for v in matplotlib.ticker.MaxNLocator(6).tick_values(low, high) if low <= v <= high])
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.2f"))
        ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # sizes within a decade: labels collide
        ax.set_title(recipe, fontsize=10)
        ax.set_xlabel("parameters")
        ax.set_ylabel(f"factor against {result.reference}")
        ax.legend(fontsize=7)
    return _png(fig)
