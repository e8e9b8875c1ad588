"""What a policy run writes besides JSON: a summary table per benchmark (the rates as
means over the batch sizes simulated), the one-page brief in plain words (Markdown), and
the self-contained HTML report (`rcpforge.analysis.report`'s sections, figures as base64 PNG)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from rcpforge.analysis.display import Shown
from rcpforge.analysis.report import Section, write_report

LABELS = {"today": "today's rule", "precision_rcp": "precision-specific RCP", "factor": "convergence factor",
          "group": "group comparison", "m_of_n": "M > N runs"}


def _mean(values) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def _mean_se(members: list[dict], key: str) -> float | None:
    """The standard error of `_mean(members[key])`: the batch sizes' draws are independent,
    so sqrt(sum of squares) / count over the rows with a value; None where one of them has
    no standard error (a single uncaught picker)."""
    chosen = [m for m in members if m[key] is not None]
    errors = [m[f"{key}_se"] for m in chosen]
    if not chosen or any(e is None for e in errors):
        return None
    return float(np.sqrt(np.sum(np.square(errors))) / len(chosen))


def summary(rows: list[dict]) -> list[dict]:
    """Per benchmark, policy and factor: the rates as means over the batch sizes (and the
    advantage kept with its standard error)."""
    picks = sorted({r["pick"] for r in rows})
    modes = list(dict.fromkeys(r["pick_mode"] for r in rows))
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        cells[(r["ruleset"], r["benchmark"], r["policy"], r["factor"])].append(r)
    out = []
    for (ruleset, benchmark, policy, factor), members in cells.items():
        row = {"ruleset": ruleset, "benchmark": benchmark, "policy": policy, "factor": factor,
               "batch_sizes": len({m["batch_size"] for m in members}),
               "honest_rejected": _mean(m["honest_rejected"] for m in members),
               "extra_runs": members[0]["extra_runs"]}
        for k in picks:
            for mode in modes:
                chosen = [m for m in members if m["pick"] == k and m["pick_mode"] == mode]
                row[f"caught_k{k}_{mode}"] = _mean(m["caught"] for m in chosen)
                row[f"kept_pct_k{k}_{mode}"] = _mean(m["advantage_kept_pct"] for m in chosen)
                row[f"kept_evals_k{k}_{mode}"] = _mean(m["advantage_kept_evals"] for m in chosen)
                row[f"kept_pct_se_k{k}_{mode}"] = _mean_se(chosen, "advantage_kept_pct")
                row[f"kept_evals_se_k{k}_{mode}"] = _mean_se(chosen, "advantage_kept_evals")
        out.append(row)
    return out


def _pct(v: float | None, digits: int = 1) -> str:
    return "n/a" if v is None else f"{v * 100:.{digits}f}%"


def _signed(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.2f}"


def _kept(v: float | None, se: float | None) -> str:
    """An advantage kept and its Monte Carlo standard error (2 significant digits: it is
    often far below the advantage's last digit): "+1.57 ± 0.0021"; "± n/a" where a single
    picker was not caught."""
    if v is None:
        return _signed(v)
    return f"{v:+.2f} ± {'n/a' if se is None else f'{se:.2g}'}"


def _kept_cell(s: dict, unit: str, k: int, mode: str) -> str:
    return _kept(s.get(f"kept_{unit}_k{k}_{mode}"), s.get(f"kept_{unit}_se_k{k}_{mode}"))


def brief_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The working group's table: per policy and factor, honest rejection, the catch rate
    of each k (best of k submissions / N best of k x N runs), the advantage an uncaught
    picker keeps at the largest k (± its standard error), the extra runs."""
    picks = sorted({r["pick"] for r in rows})
    top = picks[-1]
    others = [m for m in dict.fromkeys(r["pick_mode"] for r in rows) if m not in ("sets", "runs")]
    cases = list(dict.fromkeys((r["ruleset"], r["benchmark"]) for r in rows))
    named = len(cases) > 1  # several benchmarks (or rulesets): a column says which
    rulesets = len({ruleset for ruleset, _ in cases}) > 1
    header = [*(["benchmark"] if named else []), "policy", "f", "honest rejected",
              *(f"caught k={k} (sets / runs)" for k in picks if k > 1),
              *([f"caught k={top} ({' / '.join(others)})"] if others and top > 1 else []),
              f"kept at k={top}, % (sets / runs)", f"kept at k={top}, evals (sets / runs)", "extra runs"]
    body = []
    for s in summary(rows):
        which = f"{s['benchmark']} ({s['ruleset']})" if rulesets else s["benchmark"]
        body.append([*([which] if named else []), LABELS.get(s["policy"], s["policy"]), f"{s['factor']:g}",
                     _pct(s["honest_rejected"]),
                     *(f"{_pct(s.get(f'caught_k{k}_sets'))} / {_pct(s.get(f'caught_k{k}_runs'))}"
                       for k in picks if k > 1),
                     *([" / ".join(_pct(s[f"caught_k{top}_{m}"]) for m in others)] if others and top > 1 else []),
                     f"{_kept_cell(s, 'pct', top, 'sets')} / {_kept_cell(s, 'pct', top, 'runs')}",
                     f"{_kept_cell(s, 'evals', top, 'sets')} / {_kept_cell(s, 'evals', top, 'runs')}",
                     str(s["extra_runs"])])
    return header, body


def _markdown_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])


def _plain_words(rows: list[dict]) -> list[str]:
    by = {(s["policy"], s["factor"]): s for s in summary(rows)}
    picks = sorted({r["pick"] for r in rows})
    top = picks[-1]
    words = []
    for f in sorted({r["factor"] for r in rows}):
        t = by.get(("today", f))
        if t is None:
            continue
        words.append(f"- True factor {f:g}: today's rule rejects an honest submission {_pct(t['honest_rejected'])} "
                     f"of the time; it catches a submitter who keeps the best of {top} submissions "
                     f"{_pct(t[f'caught_k{top}_sets'])} of the time and one who keeps the "
                     f"N best of {top} x N runs {_pct(t[f'caught_k{top}_runs'])}; an uncaught best-of-{top} "
                     f"submitter keeps {_kept_cell(t, 'pct', top, 'sets')}% of its true mean.")
        for policy in ("precision_rcp", "factor", "group", "m_of_n"):
            if (p := by.get((policy, f))) is not None:
                words.append(f"  - {LABELS[policy]}: honest rejected {_pct(p['honest_rejected'])}, best of {top} "
                             f"caught {_pct(p[f'caught_k{top}_sets'])} (N best of {top} x N: "
                             f"{_pct(p[f'caught_k{top}_runs'])}), kept {_kept_cell(p, 'pct', top, 'sets')}%, "
                             f"{p['extra_runs']} extra runs per submission.")
    return words


def brief(rows: list[dict], source: str, sims: int, seed: int) -> str:
    """One page per benchmark, plain words and the table the working group would quote."""
    parts = []
    for benchmark in dict.fromkeys(r["benchmark"] for r in rows):
        mine = [r for r in rows if r["benchmark"] == benchmark]
        sizes = sorted({r["batch_size"] for r in mine})
        parts += [f"# {benchmark}: what each countermeasure catches and costs", "",
                  f"Source: {source}; batch sizes {', '.join(map(str, sizes))} (rates are means over them); "
                  f"{sims:,} simulated submitters per row, seed {seed}. Honest: N runs of a recipe whose true "
                  "convergence is f times the reference's. A cherry-picker does k times the work: it keeps the best "
                  "of k complete submissions (sets), or the N fastest of k x N runs (runs, the worst case). "
                  "Kept: how much faster than its true mean an uncaught cherry-picker's score looks "
                  "(± its Monte Carlo standard error). "
                  f"A rate's Monte Carlo standard error is at most {50 / sims ** 0.5:.2f} percentage points.", "",
                  *_plain_words(mine), "", _markdown_table(*brief_table(mine)), ""]
    return "\n".join(parts)


def write_brief(path: Path, rows: list[dict], source: str, sims: int, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(brief(rows, source, sims, seed))


def _figure_catch(rows: list[dict]) -> bytes | None:
    from rcpforge.analysis.plots import _png, plt

    factors = sorted({r["factor"] for r in rows})
    fig, axes = plt.subplots(1, len(factors), figsize=(4.2 * len(factors), 3.4), squeeze=False)
    for ax, f in zip(axes[0], factors, strict=True):
        for policy in dict.fromkeys(r["policy"] for r in rows):
            for mode, style in (("sets", "-o"), ("runs", ":x")):
                chosen = [r for r in rows if r["factor"] == f and r["policy"] == policy and r["pick_mode"] == mode]
                ks = sorted({r["pick"] for r in chosen})
                if ks:
                    ys = [_mean(r["caught"] for r in chosen if r["pick"] == k) for k in ks]
                    ax.plot(ks, ys, style, ms=3, label=f"{policy} ({mode})")
        ax.set_title(f"f = {f:g}", fontsize=9)
        ax.set_xlabel("k (times the work)")
        ax.set_ylabel("caught")
        ax.set_ylim(-0.02, 1.02)
    axes[0][-1].legend(fontsize=6, loc="best")
    return _png(fig)


def _figure_honest(rows: list[dict]) -> bytes | None:
    from rcpforge.analysis.plots import _png, plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    factors = sorted({r["factor"] for r in rows})
    for policy in dict.fromkeys(r["policy"] for r in rows):
        ys = [_mean(r["honest_rejected"] for r in rows if r["policy"] == policy and r["factor"] == f) for f in factors]
        if any(y is not None for y in ys):
            ax.plot(factors, [np.nan if y is None else y for y in ys], "-o", ms=3, label=policy)
    ax.set_xlabel("true factor f")
    ax.set_ylabel("honest rejected or flagged")
    ax.legend(fontsize=7)
    return _png(fig)


_ROW_COLUMNS = ["benchmark", "batch_size", "policy", "factor", "pick", "pick_mode", "honest_rejected", "caught",
                "advantage_kept_pct", "advantage_kept_evals", "extra_runs"]


def _shown_row(row: dict) -> dict:
    """A row as the HTML shows it: each advantage with its standard error (the exact value
    still carried in the cell)."""
    return {**row, **{key: Shown(row[key], _kept(row[key], row[f"{key}_se"]))
                      for key in ("advantage_kept_pct", "advantage_kept_evals")}}


def write_html(path: Path, rows: list[dict], source: str, sims: int, seed: int) -> Path:
    header, body = brief_table(rows)
    sections = [Section("summary", "What it simulates", brief(rows, source, sims, seed).split("\n\n")[1]),
                Section("table", "Policies (means over batch sizes)", "", header,
                        [dict(zip(header, b, strict=True)) for b in body]),
                Section("catch", "Catch rate against k", "", [], [], _figure_catch(rows),
                        "Share of cherry-pickers caught, per policy: solid the best of k submissions, dotted the N "
                        "best of k x N runs (means over batch sizes)."),
                Section("honest", "Honest rejection against f", "", [], [], _figure_honest(rows),
                        "Share of honest submitters rejected or flagged, per policy and true factor."),
                Section("rows", "Every row", "", _ROW_COLUMNS, [_shown_row(r) for r in rows], collapsed=True)]
    return write_report(path, "Policy simulation", sections, "html")
