"""What `rcpforge policy --frontier` writes: the JSON document, the table of rules (the
console's, the brief's and the HTML's), the plot of the front, and the one-page brief
with the recommendation in the working group's terms."""

from __future__ import annotations

from pathlib import Path

from rcpforge.analysis.policy.frontier import (
    ALLOWED_MODES,
    AXES_ALLOWED,
    HONEST_SLACK,
    KEPT_LIMIT,
    TERMS_K,
    pareto_front,
    per_benchmark,
    recommend,
    summarize,
)
from rcpforge.analysis.policy.submitters import PICK_MODES
from rcpforge.analysis.report import Section, write_report

SHOWN_FACTOR = "1.08"  # the table's catch rates: the FP4 case the group discussed


def frontier_doc(rows: list[dict], specs: dict[str, str], head: dict) -> dict:
    """The JSON document: `head` (source, sims, seed, ...), every rule's summary, the
    front, the recommendation with its per-benchmark figures and today's beside them."""
    summaries = summarize(rows, specs)
    front, front_allowed = pareto_front(summaries), pareto_front(summaries, AXES_ALLOWED)
    for s in summaries:
        s["on_front"], s["on_front_allowed"] = s["rule"] in front, s["rule"] in front_allowed
    advice = recommend(summaries)
    allowed = recommend(summaries, [m for m in ALLOWED_MODES if m in head["pick_modes"]])
    named = [a["rule"] if a["met"] else step["rule"] for a in (advice, allowed)
             for step in (a["by_cost"] or [None])]
    per = {label: per_benchmark(rows, label) for label in dict.fromkeys(["today", *named]) if label}
    return {**head, "rules": summaries, "front": front, "front_without_runs": front_allowed, "recommendation": advice,
            "recommendation_without_runs": allowed, "per_benchmark": per}


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:.1f}%"


def _evals(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.2f}"


def _caught(s: dict, mode: str) -> str:
    cell = s["cheaters"].get(mode, {}).get(str(TERMS_K), {}).get(SHOWN_FACTOR)
    return "n/a" if cell is None else _pct(cell["caught"])


def frontier_table(doc: dict) -> tuple[list[str], list[list[str]]]:
    """One row per rule: extra runs, honest rejection at f = 1, the honest excess (worst
    over RCPs and factors), the k = 5 catch rate per cheater at f = 1.08, the worst
    advantage kept at k = 5 (evals), whether it is on the front."""
    header = ["rule", "extra runs", "honest rejected (f=1)", "honest excess (worst)",
              *(f"caught k={TERMS_K} {mode} (f={SHOWN_FACTOR})" for mode in PICK_MODES),
              f"kept k={TERMS_K}, evals (worst)", f"kept k={TERMS_K} but runs, evals (worst)",
              "honest penalty, evals (worst)", "front (all / but runs)"]
    body = [[s["rule"], str(s["extra_runs"]), _pct(s["honest_rejected"].get("1")),
             f"{s['honest_excess'] * 100:+.1f} pts", *(_caught(s, mode) for mode in PICK_MODES),
             _evals(s["worst_kept_evals"]), _evals(s["worst_kept_allowed"]), _evals(s["honest_penalty_evals"]),
             f"{'yes' if s['on_front'] else '-'} / {'yes' if s['on_front_allowed'] else '-'}"]
            for s in doc["rules"]]
    return header, body


def _markdown(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])


def _where(at: dict | None) -> str:
    if not at:
        return "nowhere"
    return (f"the {at['pick_mode']} cheater at f = {at['factor']:g} on {at['benchmark']} "
            f"({at['ruleset']}, batch size {at['batch_size']}; caught {_pct(at['caught'])})")


def _benchmark_table(figures: list[dict]) -> str:
    factors = list(figures[0]["honest_rejected"]) if figures else []
    header = ["ruleset", "benchmark", "batch sizes (coarse)", *(f"honest rejected f={f}" for f in factors),
              f"kept k={TERMS_K}, evals (worst)", *(f"caught k={TERMS_K} {m}" for m in PICK_MODES), "extra runs"]
    body = [[b["ruleset"], b["benchmark"], f"{b['batch_sizes']} ({len(b['coarse'])})",
             *(_pct(b["honest_rejected"].get(f)) for f in factors), _evals(b["worst_kept_evals"]),
             *(_pct(b["caught_k5"].get(m)) for m in PICK_MODES), str(b["extra_runs"])] for b in figures]
    return _markdown(header, body)


def _advice_words(advice: dict, by: dict[str, dict], against: str) -> list[str]:
    modes = advice["terms"]["pick_modes"]
    if advice["met"]:
        s = by[advice["rule"]]
        worst = max(modes, key=lambda m: s["worst_kept_by_mode"][m])
        return [f"**Against {against}: `{s['rule']}`**, the cheapest rule on the terms: {s['extra_runs']} extra runs, "
                f"honest excess {s['honest_excess'] * 100:+.1f} points, worst advantage kept "
                f"{s['worst_kept_by_mode'][worst]:+.2f} evals ({_where(s['worst_kept_at_by_mode'][worst])})."]
    words = [f"**Against {against}: no rule of the family meets the terms.** What each cost buys within the "
             "honest bound:"]
    for step in advice["by_cost"]:
        words.append(f"- {step['extra_runs']} extra runs: `{step['rule']}` keeps at worst "
                     f"{step['worst_kept_evals']:+.2f} evals; stopped by {_where(step['stopped_by'])}.")
    return words


def recommendation_words(doc: dict) -> list[str]:
    by = {s["rule"]: s for s in doc["rules"]}
    terms = (f"Terms: honest rejection at most today's plus {HONEST_SLACK * 100:g} point at every RCP that is not "
             f"coarse and every true factor, and an advantage kept by a k = {TERMS_K} cheater of at most "
             f"{KEPT_LIMIT:g} eval interval at every true factor and RCP; the cheapest rule that meets both.")
    return [terms, "", *_advice_words(doc["recommendation"], by, "every cheater"), "",
            *_advice_words(doc["recommendation_without_runs"], by, "the cheaters the rules allow for (every one but "
                           "`runs`, the N fastest of k x N runs, which no rule reading the submitted runs sees)")]


def frontier_brief(doc: dict) -> str:
    """The one page the working group reads in a meeting."""
    parts = [f"# Which RCP rule to adopt: the frontier of {len(doc['rules'])} rules", "",
             f"Source: {doc['source']}; {doc['sims']:,} simulated submitters per row, seed {doc['seed']}; true "
             f"factors {', '.join(f'{f:g}' for f in doc['factors'])}; cheaters ({', '.join(PICK_MODES)}) at k = "
             f"{', '.join(str(k) for k in doc['picks'] if k > 1)}. Honest excess: the rule's honest rejection minus "
             "today's at f = 1.00, worst over RCPs and factors. Kept: how much faster than its truth an uncaught "
             f"k = {TERMS_K} cheater's score looks, in eval intervals, worst over cheaters, factors and RCPs. "
             f"Front: {', '.join(f'`{r}`' for r in doc['front'])}; against every cheater but `runs`: "
             f"{', '.join(f'`{r}`' for r in doc['front_without_runs'])}.", "", *recommendation_words(doc), "",
             _markdown(*frontier_table(doc)), ""]
    for label, figures in doc["per_benchmark"].items():
        parts += [f"## `{label}` per benchmark", "", _benchmark_table(figures), ""]
    return "\n".join(parts)


def _figure_front(doc: dict) -> bytes | None:
    from rcpforge.analysis.plots import _png, plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    costs = sorted({s["extra_runs"] for s in doc["rules"]})
    colours = plt.get_cmap("viridis")
    named = 0
    for s in doc["rules"]:
        colour = colours(costs.index(s["extra_runs"]) / max(len(costs) - 1, 1))
        on = s["on_front_allowed"]
        ax.scatter(s["worst_kept_allowed"], s["honest_excess"] * 100, s=45 if on else 14, color=colour,
                   edgecolors="black" if on else "none", zorder=3)
        if on:  # labels alternate above and below: front rules often sit close together
            named += 1
            ax.annotate(f"{s['rule']} ({s['extra_runs']})", (s["worst_kept_allowed"], s["honest_excess"] * 100),
                        fontsize=6, xytext=(3, 4 if named % 2 else -9), textcoords="offset points")
    ax.axvline(KEPT_LIMIT, color="grey", ls=":", lw=0.8)
    ax.axhline(HONEST_SLACK * 100, color="grey", ls=":", lw=0.8)
    ax.set_xlabel(f"worst advantage kept at k = {TERMS_K}, every cheater but runs (eval intervals)")
    ax.set_yscale("symlog", linthresh=2)  # the front sits within a few points; allowances reach 100
    ax.set_ylabel("honest excess over today (points, log above 2)")
    return _png(fig)


def write_frontier_html(path: Path, doc: dict) -> Path:
    header, body = frontier_table(doc)
    brief = frontier_brief(doc).split("\n\n")
    sections = [Section("summary", "What it weighs", brief[1]),
                Section("advice", "Recommendation", "\n".join(recommendation_words(doc)).replace("**", "")),
                Section("front", "The Pareto front", "", [], [], _figure_front(doc),
                        "Each rule: the worst advantage a k = 5 cheater the rules allow for (every one but runs) "
                        "keeps, against honest excess; colour: extra runs (darker: fewer); outlined and named: on "
                        "that front (no other rule is as good on all three axes and better on one), with its extra "
                        "runs."),
                Section("rules", "Every rule", "", header, [dict(zip(header, b, strict=True)) for b in body])]
    return write_report(path, "Policy frontier", sections, "html")


def write_frontier_brief(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(frontier_brief(doc))
