"""The frontier: every rule of a family weighed on the same simulated submissions, per
rule its honest rejection, catch rate and advantage kept per cheater, k and true factor,
its extra runs; the Pareto front of (honest rejection above today's, advantage kept,
extra runs); and the recommendation on the working group's terms.

The three axes, each a worst case over the RCPs simulated (ruleset, benchmark and batch
size), because the group's terms are "at every RCP"; over the RCPs that are not coarse
(3 or fewer distinct values or zero spread: their rates move in whole evaluations, and a
multiplied RCP mean rejects every honest run of a zero-spread RCP), with the same figures
over the coarse ones reported beside them:
- `honest_excess`: the largest, over RCPs and true factors, of the rule's honest
  rejection rate minus today's rejection rate of an honest submitter whose recipe is the
  reference's (f = 1.00) at that RCP: the false-reject rate an honest submitter faces
  today. (Today's own honest rejection falls towards 0 as f grows: a slow recipe passes.)
- `worst_kept_evals`: the largest advantage, in eval intervals, that an uncaught k = 5
  cheater of any pick mode keeps at any true factor and RCP (RCPs whose eval grid is
  unknown, the zero-spread ones, have no figure in evals and are left out);
- `extra_runs`: the most runs beyond N the rule costs a submission, over the benchmarks.

Beside them, `honest_penalty_evals`: how much slower than its truth an honest submitter's
score looks at worst (a rule that normalizes results up to more than the truth rejects
no one more, but scores everyone slower: the family keeps the factor's normalization at
its point estimate or below, as today's is at the RCP mean).

The recommendation: the cheapest rule whose honest excess is at most one point and
whose worst advantage kept at k = 5 is at most half an eval interval; where none is, per
cost the rule that keeps the least advantage within the honest bound, and what stops it
(the cheater whose advantage is the largest). The same, without the `runs` cheater (N
fastest of k x N runs: not a legal submission, and one that no rule reading only the
submitted runs sees), says what the rules do against the cheaters the rules allow for."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

HONEST_SLACK = 0.01  # one percentage point above today's
KEPT_LIMIT = 0.5  # half an eval interval
TERMS_K = 5  # the cheater the terms are stated for: five times the work
FRONTIER_FACTORS = (1.0, 1.04, 1.08, 1.12)
FRONTIER_PICKS = (1, 2, 5, 10)
AXES = ("honest_excess", "worst_kept_evals", "extra_runs")
# The same with the advantage kept by the cheaters the rules allow for: every one but `runs`
# (N fastest of k x N runs), whose edge no rule reading the submitted runs takes back and
# which would otherwise set the advantage axis of every rule alike.
AXES_ALLOWED = ("honest_excess", "worst_kept_allowed", "extra_runs")
ALLOWED_MODES = ("sets", "window", "strategic", "poisoned")


def _rcp(row: dict) -> tuple:
    return row["ruleset"], row["benchmark"], row["batch_size"]


def _mean(values) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def _baseline(rows: list[dict]) -> dict[tuple, float]:
    """Per RCP, today's honest rejection at f = 1.00."""
    return {_rcp(r): r["honest_rejected"] for r in rows if r["policy"] == "today" and r["factor"] == 1.0}


def _worst_kept(mine: list[dict], modes=None) -> tuple[float, dict | None]:
    """The largest advantage in evals kept by a k = TERMS_K cheater (of `modes`, default
    every one), and where."""
    shown = [r for r in mine if r["pick"] == TERMS_K and r["advantage_kept_evals"] is not None
             and (modes is None or r["pick_mode"] in modes)]
    if not shown:
        return 0.0, None
    worst = max(shown, key=lambda r: r["advantage_kept_evals"])
    where = {key: worst[key] for key in ("pick_mode", "factor", "ruleset", "benchmark", "batch_size", "caught")}
    return float(worst["advantage_kept_evals"]), where


def _honest_penalty(mine: list[dict]) -> float | None:
    """The largest amount, in eval intervals, by which an honest submitter's score is
    slower than its truth (normalized up to the rule's RCP mean), over RCPs and factors:
    what a rule normalizing above the truth costs an honest submitter without rejecting it."""
    shown = [-r["advantage_kept_evals"] for r in mine if r["pick"] == 1 and r["pick_mode"] == "sets"
             and r["advantage_kept_evals"] is not None]
    return max(shown) if shown else None


def _honest_excess(mine: list[dict], baseline: dict[tuple, float]) -> tuple[float, dict | None]:
    honest = {(_rcp(r), r["factor"]): r["honest_rejected"] for r in mine}
    excess = {key: rate - baseline[key[0]] for key, rate in honest.items() if key[0] in baseline}
    if not excess:
        return 0.0, None
    (rcp, factor), value = max(excess.items(), key=lambda item: item[1])
    return float(value), {"ruleset": rcp[0], "benchmark": rcp[1], "batch_size": rcp[2], "factor": factor,
                          "honest_rejected": honest[(rcp, factor)], "today_at_1": baseline[rcp]}


def _cheaters(mine: list[dict]) -> dict:
    """{mode: {k: {f: caught, kept_pct, kept_evals}}}, means over the RCPs."""
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for r in mine:
        if r["pick"] > 1:
            cells[(r["pick_mode"], r["pick"], r["factor"])].append(r)
    out: dict = {}
    for (mode, k, f), members in sorted(cells.items()):
        out.setdefault(mode, {}).setdefault(str(k), {})[f"{f:g}"] = {
            "caught": _mean(m["caught"] for m in members),
            "kept_pct": _mean(m["advantage_kept_pct"] for m in members),
            "kept_evals": _mean(m["advantage_kept_evals"] for m in members)}
    return out


def _axes(mine: list[dict], baseline: dict[tuple, float]) -> dict:
    excess, excess_where = _honest_excess(mine, baseline)
    kept, kept_where = _worst_kept(mine)
    modes = dict.fromkeys(r["pick_mode"] for r in mine)
    return {"honest_excess": excess, "honest_excess_at": excess_where, "honest_penalty_evals": _honest_penalty(mine),
            "worst_kept_evals": kept, "worst_kept_at": kept_where,
            "worst_kept_allowed": _worst_kept(mine, ALLOWED_MODES)[0],
            "worst_kept_by_mode": {mode: _worst_kept(mine, (mode,))[0] for mode in modes},
            "worst_kept_at_by_mode": {mode: _worst_kept(mine, (mode,))[1] for mode in modes}}


def summarize(rows: list[dict], specs: dict[str, str]) -> list[dict]:
    """Per rule (in the order of `specs`, label: spec), its figures and the three axes:
    over the RCPs that are not coarse (every RCP where all are), and the same figures over
    the coarse ones beside them (`coarse`)."""
    baseline = _baseline(rows)
    by_rule: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_rule[r["policy"]].append(r)
    out = []
    for label, spec in specs.items():
        mine = by_rule[label]
        fine, coarse = [r for r in mine if not r["coarse"]], [r for r in mine if r["coarse"]]
        extra = {r["benchmark"]: r["extra_runs"] for r in mine}
        factors = sorted({r["factor"] for r in mine})
        out.append({"rule": label, "spec": spec, "extra_runs": max(extra.values()), "extra_runs_by_benchmark": extra,
                    "honest_rejected": {f"{f:g}": _mean(r["honest_rejected"] for r in mine if r["factor"] == f
                                                        and r["pick"] == 1 and r["pick_mode"] == "sets")
                                        for f in factors},
                    "axes_over": "RCPs not coarse" if fine else "every RCP (all are coarse)",
                    **_axes(fine or mine, baseline), "coarse": _axes(coarse, baseline) if fine and coarse else None,
                    "cheaters": _cheaters(mine)})
    return out


def dominates(a: dict, b: dict, axes=AXES) -> bool:
    """a is at least as good as b on every axis and better on one."""
    return all(a[x] <= b[x] for x in axes) and any(a[x] < b[x] for x in axes)


def pareto_front(summaries: list[dict], axes=AXES) -> list[str]:
    """The rules no other evaluated rule dominates, cheapest first."""
    front = [s for s in summaries if not any(dominates(o, s, axes) for o in summaries)]
    return [s["rule"] for s in sorted(front, key=lambda s: tuple(s[x] for x in reversed(axes)))]


def _meets_honest(s: dict) -> bool:
    return s["honest_excess"] <= HONEST_SLACK


def _kept(s: dict, modes) -> float:
    return max(v for m, v in s["worst_kept_by_mode"].items() if m in modes)


def recommend(summaries: list[dict], modes=None) -> dict:
    """The cheapest rule on the group's terms against the cheaters of `modes` (default
    every one), or per cost the rule that keeps the least advantage within the honest
    bound and what stops it."""
    modes = tuple(modes or dict.fromkeys(m for s in summaries for m in s["worst_kept_by_mode"]))
    terms = {"honest_slack": HONEST_SLACK, "kept_limit_evals": KEPT_LIMIT, "k": TERMS_K, "pick_modes": list(modes)}
    meeting = [s for s in summaries if _meets_honest(s) and _kept(s, modes) <= KEPT_LIMIT]
    if meeting:
        best = min(meeting, key=lambda s: (s["extra_runs"], _kept(s, modes), s["honest_excess"]))
        return {"terms": terms, "met": True, "rule": best["rule"], "by_cost": []}
    by_cost: list[dict] = []
    for cost in sorted({s["extra_runs"] for s in summaries}):
        within = [s for s in summaries if _meets_honest(s) and s["extra_runs"] <= cost]
        if within:
            best = min(within, key=lambda s: (_kept(s, modes), s["extra_runs"]))
            if not by_cost or by_cost[-1]["rule"] != best["rule"]:
                worst = max(modes, key=lambda m: best["worst_kept_by_mode"][m])
                by_cost.append({"extra_runs": cost, "rule": best["rule"], "worst_kept_evals": _kept(best, modes),
                                "stopped_by": best["worst_kept_at_by_mode"][worst]})
    return {"terms": terms, "met": False, "rule": None, "by_cost": by_cost}


def per_benchmark(rows: list[dict], label: str) -> list[dict]:
    """One rule's figures per ruleset and benchmark: honest rejection per true factor
    (mean over batch sizes), the worst advantage kept at k = 5 (evals, any cheater and
    factor), the catch rate at k = 5 per cheater (mean over batch sizes and factors)."""
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["policy"] == label:
            cells[(r["ruleset"], r["benchmark"])].append(r)
    out = []
    for (ruleset, benchmark), mine in cells.items():
        kept, where = _worst_kept(mine)
        honest = [r for r in mine if r["pick"] == 1 and r["pick_mode"] == "sets"]
        out.append({"ruleset": ruleset, "benchmark": benchmark, "batch_sizes": len({r["batch_size"] for r in mine}),
                    "coarse": sorted({r["batch_size"] for r in mine if r["coarse"]}),
                    "honest_rejected": {f"{f:g}": _mean(r["honest_rejected"] for r in honest if r["factor"] == f)
                                        for f in sorted({r["factor"] for r in honest})},
                    "worst_kept_evals": kept if where else None,
                    "caught_k5": {mode: _mean(r["caught"] for r in mine if r["pick"] == TERMS_K
                                              and r["pick_mode"] == mode)
                                  for mode in dict.fromkeys(r["pick_mode"] for r in mine)},
                    "extra_runs": mine[0]["extra_runs"]})
    return out
