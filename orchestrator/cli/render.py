"""The tables the `rcpforge` commands print, and how their cells are written: each
function takes what a command computed and gives rich Tables, which the command prints
on its console. No command draws a table of its own."""

from __future__ import annotations

import json
import math

from rich.markup import escape
from rich.table import Table


def number(value, digits: int = 4) -> str:
    """A statistic with `digits` decimals, "-" for none (`check`, `rcp-stats`)."""
    if value is None:
        return "-"
    return f"{float(value):,.{digits}f}" if math.isfinite(float(value)) else str(float(value))


def duration(seconds: float | None) -> str:
    """An ETA as a person reads it (`status`)."""
    if seconds is None:
        return "unknown (no run finished yet)"
    if seconds < 1:
        return "done" if seconds == 0 else "<1s"
    hours, rest = divmod(int(round(seconds)), 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def rcp_table(table, title: str, submission_runs: int) -> Table:
    """`analyze`: the RCP table with a short mark per row; the notes in full follow on stderr."""
    from rcpforge.analysis.display import cell_text, rcp_row_shown
    from rcpforge.analysis.rcp import not_an_rcp

    view = Table(title=title)
    # a recipe's name is never cut (grid variants differ at their ends: ...-sr_on, ...-sr_off)
    longest = max((len(r) for r in table.column("recipe").to_pylist()), default=6)
    for col in ("recipe", "batch size", "runs", "conv.", "not conv.", "diverged", "olympic mean", "stdev",
                "min acc. mean", "max speedup", "note"):
        view.add_column(col, justify="left" if col in ("recipe", "note") else "right",
                        min_width=longest if col == "recipe" else None, overflow="fold")
    for r in table.to_pylist():
        shown = rcp_row_shown(r)
        numbers = [cell_text(c, shown[c]) for c in ("olympic_mean", "stdev", "min_acceptable_mean", "max_speedup")]
        complete = r["converged"] == r["runs"] and r["runs"] >= 3
        mark = (not_an_rcp(r["runs"], submission_runs) or "") if complete else (r["note"] or "")
        view.add_row(
            r["recipe"], str(r["batch_size"]), str(r["runs"]), str(r["converged"]), str(r["not_converged"]),
            str(r["diverged"]), *numbers, escape(mark),
        )
    return view


def rcp_stats_table(rcps: str, rows: list[dict]) -> Table:
    """`rcp-stats`: per RCP record, its statistics and whether each pruning keeps it."""
    view = Table(title=f"RCP statistics: {rcps}")
    for col in ("benchmark", "batch size", "runs", "mean", "stdev", "min acc. mean", "max speedup", "pruned",
                "envelope", "honest rejected", "eval grid"):
        view.add_column(col, justify="left" if col in ("benchmark", "eval grid") else "right")
    for r in rows:
        rate = r.get("honest_rejected")
        view.add_row(r["benchmark"], str(r["batch_size"]), str(r["runs"]), number(r["mean"]), number(r["stdev"]),
                     number(r["min_acceptable_mean"]), number(r["max_speedup"], 6),
                     "kept" if r["kept_by_pruning"] else "dropped", "kept" if r["kept_by_envelope"] else "dropped",
                     "-" if rate is None else f"{rate:.1%}", r.get("coarse") or "")
    return view


def sizes_table(rows, goals: list[str], unit: str, design: str, reference: str, campaign,
                price: float | None = None) -> Table:
    """`plan`: the runs per recipe and compute each comparison needs for each precision
    (and what that compute costs at `price`, US dollars an hour)."""
    view = Table(title=f"runs per recipe to reach each precision ({design} design, against {reference})")
    for col in ("candidate", "batch size", "runs so far", "factor", "spread (cand, ref)",
                *(f"+-{float(g):.0%}" for g in goals)):
        view.add_column(col)
    for r in rows:
        if r.reason:
            view.add_row(r.candidate, str(r.batch_size), f"{r.runs_candidate}, {r.runs_reference}", "-", "-",
                         *(["-"] * len(goals)))
            continue
        money = {g: "" if price is None or r.hours[g] is None else f", {usd(r.hours[g] * price)}" for g in goals}
        needs = [f"{r.runs[g]} ({r.hours[g]:.3g} {unit.replace('_', '-')}{money[g]})" if r.runs[g] is not None
                 else _beyond(r, g, campaign) for g in goals]
        view.add_row(r.candidate, str(r.batch_size), f"{r.runs_candidate}, {r.runs_reference}",
                     f"{r.factor:.4f}" if r.factor is not None else "n/a",
                     f"{r.cv_candidate:.1%}, {r.cv_reference:.1%}", *needs)
    return view


def slope_sizes_table(rows, goals: list[str], reference: str) -> Table:
    """`plan` with a model axis: the runs per model each trend's slope needs per goal."""
    view = Table(title=f"runs per model and recipe to reach each precision of the slope (against {reference})")
    for col in ("candidate", "batch size", "models", "runs so far (cand, ref)", "slope +- now",
                *(f"+-{float(g):g}" for g in goals)):
        view.add_column(col)
    for r in rows:
        so_far = "; ".join(f"{m} {c}, {f}" for m, (c, f) in r.runs_so_far.items())
        now = "-" if r.half_width_now is None else f"{r.half_width_now:.3g}"
        needs = [("-" if r.reason else "out of reach") if r.runs.get(g) is None
                 else f"{r.runs[g]} ({r.total_runs[g]} runs)" for g in goals]
        view.add_row(r.recipe, str(r.batch_size), str(r.models), so_far, now, *needs)
    return view


def _beyond(row, goal: str, campaign) -> str:
    """What a precision out of reach would take."""
    if campaign.adaptive is None:
        return "out of reach"
    needed = row.max_seeds_needed.get(goal)
    more = f"; with max_seeds {needed}" if needed else ""
    return f"> {campaign.adaptive_max_seeds} (max_seeds{more})"


def recipes_table(rows: list[dict]) -> Table:
    """`recipes`: each named recipe's operand formats and options (with defaults)."""
    view = Table(title="recipes", show_lines=True)
    for col in ("name", "x", "W", "dY", "wgrad", "options (default)", "description"):
        view.add_column(col, overflow="fold")
    for r in rows:
        options = "\n".join(f"{k}={json.dumps(v)}" for k, v in r["options"].items())
        view.add_row(r["name"], r["x"], r["w"], r["dy"], r["wgrad"], options, r["description"])
    return view


def placeholders_table(placeholders: dict[str, str]) -> Table:
    """`recipes`: the placeholders of a command trainer's argv and env."""
    view = Table(title="command trainer placeholders (each also RCPFORGE_<NAME> in the environment)")
    view.add_column("placeholder")
    view.add_column("what it is", overflow="fold")
    for name, meaning in placeholders.items():
        view.add_row("{" + name + "}", meaning)
    view.add_row("{<hyperparameter>}", "any key of hparams.<batch size> ({lr} for lr: 0.01), set for every batch size")
    return view


def usd(amount: float) -> str:
    """US dollars as a person reads them, to the cent (`--json` has them exactly)."""
    return f"${amount:,.2f}" if amount >= 0.01 or amount == 0 else "<$0.01"


def status_table(campaign, found, compute: str, outside: int, live: bool = False) -> Table:
    """`status`: per (recipe, batch size), the runs in each state, Slurm's job states, the
    compute spent (and its price, with a `cost:` section) and an ETA; an adaptive
    campaign's stops; runs not of this file; with `live` (`--watch`), each running run's
    latest eval point."""
    from rcpforge.orchestrator.status import COLUMNS

    view = Table(title=f"campaign {campaign.name}")
    adaptive, priced = campaign.adaptive is not None, "cost_usd" in found.totals
    models = campaign.models is not None
    for col in (*(("model",) if models else ()), "recipe", "batch size", "runs",
                *(c.replace("_", " ") for c in COLUMNS), "slurm jobs",
                compute.replace("_", "-"), *(("cost",) if priced else ()), "ETA",
                *(("stopped",) if adaptive else ()), *(("not in this file",) if outside else ()),
                *(("running: latest eval",) if live else ())):
        # a recipe's name is never cut (grid variants differ at their ends: ...-sr_on, ...-sr_off)
        view.add_column(col, overflow="fold",
                        min_width=max((len(c.recipe) for c in found.cells), default=6) if col == "recipe" else None)
    for c in found.cells:
        slurm = ", ".join(f"{n} {s.lower()}" for s, n in sorted(c.slurm.items())) or "-"
        if c.waiting:  # why the pending ones wait, in Slurm's words
            slurm += " (waiting: " + ", ".join(f"{n} {why}" for why, n in sorted(c.waiting.items())) + ")"
        stopped = (f"{c.adaptive['stop_reason']} at look {c.adaptive['stopped_at_look']}"
                   if c.adaptive.get("stop_reason") else "goes on",) if adaptive else ()
        listed = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(c.outside.items())) or "-"
        others = (listed,) if outside else ()
        cost = (usd(c.estimate["cost_usd"]),) if priced else ()
        latest = ("\n".join(_latest_eval(p, campaign.target.metric) for p in c.latest) or "-",) if live else ()
        view.add_row(*((c.model,) if models else ()), c.recipe, str(c.batch_size), str(c.runs),
                     *(str(c.counts[k]) for k in COLUMNS), slurm,
                     f"{c.estimate[compute]:.3g}", *cost, duration(c.estimate["eta_s"]), *stopped, *others, *latest)
    return view


def _latest_eval(point: tuple[str, float, float | None], metric: str) -> str:
    name, tokens, value = point
    return f"{name}: no eval yet" if value is None else f"{name}: {metric} {value:.4g} at {tokens:,.0f} tokens"


def totals_line(found, compute: str) -> str:
    """`status`: the campaign's compute spent (and its price), runs to do and ETA."""
    t = found.totals
    price = f" ({usd(t['cost_usd'])})" if "cost_usd" in t else ""
    return (f"campaign: {t[compute]:.3g} {compute.replace('_', '-')} spent{price}, {t['runs_to_do']} runs to do, "
            f"ETA {duration(t['eta_s'])} at {t['concurrency']} runs at once")


def failure_lines(failures: list[dict], names: int = 3) -> list[str]:
    """`status`: the failed runs, one line per kind and reason (a configuration error is
    the same in every run it stopped), naming a few of the runs."""
    groups: dict[tuple[str, str], list[str]] = {}
    for f in failures:
        groups.setdefault((f["kind"] or "unknown kind", f["reason"]), []).append(f["run"])
    lines = []
    for (kind, reason), runs in groups.items():
        more = f" and {len(runs) - names} more" if len(runs) > names else ""
        count = f"{len(runs)} run{'s' if len(runs) > 1 else ''}"
        lines.append(f"failed ({kind}): {reason} [{count}: {', '.join(runs[:names])}{more}]")
    return lines


def round_tables(rows: list[dict], groups: list[dict], factors: list[dict]) -> list[Table]:
    """`round`: the submissions, the groups of like submissions, those flagged for the
    chair (if any), where the round's summary.json disagrees (if anywhere) and the
    precision factors (if any), in that order."""
    from rcpforge.analysis.display import cell_text, header

    group_no = {g["group"]: i for i, g in enumerate(groups, 1)}
    columns = ["dir", "batch_size", "passed", "message", "norm_factor", "olympic_mean", "rcp_mean", "vs_rcp_pct",
               "vs_rcp_evals", "group", "robust_z", "p_value", "flagged"]
    table = Table(*(header(c) for c in columns))
    for r in rows:
        table.add_row(*(f"G{group_no[r['group']]}" if c == "group" else cell_text(c, r[c]) for c in columns))
    tables = [table]
    shown = ["group", "submissions", "scored", "scale", "median", "mad", "spread_pct", "flagged"]
    table = Table("#", *(header(c) for c in shown), title="groups of like submissions (2 or more)")
    for g in groups:
        if g["submissions"] > 1:
            table.add_row(f"G{group_no[g['group']]}", *(cell_text(c, g[c]) for c in shown))
    tables.append(table)
    flagged = [r for r in rows if r["flagged"]]
    if flagged:
        table = Table("dir", "group", "why", title="flagged for the chair")
        for r in flagged:
            table.add_row(r["dir"], f"G{group_no[r['group']]}", r["flag_reason"])
        tables.append(table)
    disagree = [r for r in rows if r.get("summary_disagrees")]
    if disagree:
        table = Table("dir", "summary.json", "disagrees with what rcpforge computed", title="the round's summary.json")
        for r in disagree:
            table.add_row(r["dir"], r["summary_file"], r["summary_disagrees"])
        tables.append(table)
    if factors:
        shown = ["benchmark", "precision", "submissions", "factor", "ci_low", "ci_high"]
        table = Table(*(header(c) for c in shown), title="olympic mean / RCP mean by precision")
        for f in factors:
            table.add_row(*(cell_text(c, f[c]) for c in shown))
        tables.append(table)
    return tables


def tuning_table(campaign_name: str, summaries) -> Table:
    """`tune`: per (recipe, batch size), the trials by outcome and the best objective and
    hyperparameters."""
    view = Table(title=f"tuning: {campaign_name} (objective: tokens-to-target, censored at the budget)")
    for col in ("recipe", "batch size", "trials", "converged", "censored", "pruned", "failed", "best objective",
                "best hyperparameters"):
        view.add_column(col, justify="left" if col in ("recipe", "best hyperparameters") else "right")
    for s in summaries:
        best = "-" if s.best_value is None else f"{s.best_value:,.0f}" + ("" if s.best_converged else " (censored)")
        params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in sorted(s.best_params.items()))
        view.add_row(s.cell.recipe, str(s.cell.batch_size), str(s.trials), str(s.converged), str(s.censored),
                     str(s.pruned), str(s.failed), best, params or "-")
    return view
