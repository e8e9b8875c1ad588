"""The round report's figures (matplotlib, PNG bytes; `rcpforge.analysis.plots`' rendering)."""

from __future__ import annotations

import numpy as np

from rcpforge.analysis.plots import _png, plt

_FLAG, _OK, _BAND = "#c0392b", "#2c6fbb", "#d9e6f5"


def groups_figure(rows: list[dict], number: dict[str, int]) -> bytes | None:
    """Per group of two or more scored submissions on the RCP scale: each submission's
    olympic mean / RCP mean, over the band RCP mean +- one stdev (relative)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("score") is not None and r["rcp_mean"]:
            groups.setdefault(r["group"], []).append(r)
    shown = sorted((g for g, m in groups.items() if len(m) > 1), key=lambda g: number[g])
    if not shown:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(shown) + 1.2))
    for y, g in enumerate(shown):
        members = groups[g]
        rel = [r["rcp_stdev"] / r["rcp_mean"] for r in members if r.get("rcp_stdev") is not None]
        half = float(np.median(rel)) if rel else 0.0
        ax.barh(y, 2 * half, left=1 - half, height=0.7, color=_BAND, zorder=1)
        for r in members:
            ax.plot(r["score"], y, "o", ms=4, color=_FLAG if r["flagged"] else _OK, alpha=0.8, zorder=2)
    ax.axvline(1.0, color="#555", lw=0.8, zorder=0)
    ax.margins(x=0.04)  # a point on the edge of the data (a zero-width band) stays whole
    ax.set_yticks(range(len(shown)), [f"G{number[g]} {g}"[:60] for g in shown], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("olympic mean / RCP mean (band: RCP mean +- stdev)")
    return _png(fig)


def deviations_figure(rows: list[dict]) -> bytes | None:
    """Every submission's olympic mean against its RCP mean, in percent, by benchmark."""
    having = [r for r in rows if r["vs_rcp_pct"] is not None]
    if not having:
        return None
    benchmarks = sorted({str(r["benchmark"]) for r in having})
    fig, ax = plt.subplots(figsize=(9, 3.6))
    rng = np.random.default_rng(0)  # the jitter only spreads the points; it is fixed so the figure is too
    for x, b in enumerate(benchmarks):
        members = [r for r in having if str(r["benchmark"]) == b]
        xs = x + rng.uniform(-0.25, 0.25, len(members))
        ax.scatter(xs, [r["vs_rcp_pct"] for r in members], s=12,
                   c=[_FLAG if r["flagged"] else _OK for r in members], alpha=0.8)
    ax.axhline(0.0, color="#555", lw=0.8)
    ax.set_xticks(range(len(benchmarks)), benchmarks, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("olympic mean vs RCP mean (%)")
    return _png(fig)


def factors_figure(factors: list[dict]) -> bytes | None:
    if not factors:
        return None
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(factors) + 1.2))
    for y, f in enumerate(factors):
        low = f["factor"] - f["ci_low"] if f["ci_low"] is not None else 0.0
        high = f["ci_high"] - f["factor"] if f["ci_high"] is not None else 0.0
        ax.errorbar(f["factor"], y, xerr=[[low], [high]], fmt="o", color=_OK, capsize=3)
    ax.axvline(1.0, color="#555", lw=0.8)
    ax.set_yticks(range(len(factors)), [f"{f['benchmark']} {f['precision']} (n={f['submissions']})" for f in factors],
                  fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("olympic mean / RCP mean")
    return _png(fig)
