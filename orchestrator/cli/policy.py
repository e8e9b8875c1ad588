"""`rcpforge policy`: what each FP4 countermeasure catches and what it costs, simulated
(`analysis/policy/`): honest and cherry-picking submitters under today's RCP rule and the
working group's four proposals, from the RCPs a ruleset ships or a campaign's own runs."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from rcpforge.orchestrator.cli.app import app, console, err_console, fail, output_path_or_fail

ROW_SIMS = 20_000
# The frontier simulates every rule of the family on every RCP of a ruleset at four true
# factors: 5,000 submitters a row keep `--rcps 5.1.0 --frontier` within 10 minutes on 2
# cores; every rule judges the same submissions, so rules differ by their effect, not noise.
FRONTIER_SIMS = 5_000


def _checked_numbers(factors: list[float], picks: list[int], m0: int, group: int, sims: int, bound: str,
                     confidence: float, z: float, p: float) -> None:
    """One line per bad number, before anything is read (the presets' knobs: their ranges
    are the rules' own, `analysis/policy/rules.py`)."""
    for f in factors:
        if not f > 0:
            fail(f"--factor {f:g}: a true factor is the candidate's samples to converge over the reference's; "
                 "give a number above 0 (1.08: 8% slower)")
    for k in picks:
        if k < 1:
            fail(f"--pick {k}: k is how many times the work a cherry-picker does; give 1 or more")
    if m0 < 2:
        fail(f"--m0 {m0}: the factor's interval needs at least 2 runs of each recipe per batch size; give 2 or more")
    if not 1 <= group <= 64:
        fail(f"--group {group}: a group holds the submission and its peers; give 1 to 64")
    if m0 > 50:
        fail(f"--m0 {m0}: give at most 50 runs of each recipe per batch size")
    if not 0 < z <= 10:
        fail(f"--z-threshold {z:g}: the robust z flag; give a number above 0 and at most 10 (default 3.5)")
    if not 0 <= p < 1:
        fail(f"--p-threshold {p:g}: the p-value flag; give a number from 0 to below 1 (default 0.001)")
    if sims < 100:
        fail(f"--sims {sims}: too few simulated submitters for a rate; give 100 or more (default {ROW_SIMS})")
    from rcpforge.analysis.policy.rules import BOUNDS

    if bound not in BOUNDS:
        fail(f"--factor-bound {escape(bound)!r} is not allowed; give one of {', '.join(BOUNDS)}")
    if not 0 < confidence < 1:
        fail(f"--factor-confidence {confidence:g}: give a confidence between 0 and 1 (default 0.95)")


def _pick_modes_or_fail(asked: list[str]) -> tuple[str, ...]:
    from rcpforge.analysis.policy.submitters import PICK_MODES

    for mode in asked:
        if mode not in PICK_MODES:
            fail(f"--pick-mode {escape(mode)!r} is not a cheater rcpforge simulates; "
                 f"give one of {', '.join(PICK_MODES)}")
    return tuple(dict.fromkeys(asked)) or PICK_MODES


def _campaign_cases(campaign_file: Path, reference: str | None, candidate: str | None, batch_sizes, sims):
    from rcpforge.analysis.policy.cases import campaign_cases
    from rcpforge.orchestrator.cli.app import load_runs_or_fail, reference_or_fail, stored_campaign_or_fail

    campaign = stored_campaign_or_fail(campaign_file)
    reference = reference_or_fail(campaign, reference)
    names = [r.name for r in campaign.recipes]
    if candidate is None or candidate not in names:
        fail(f"--candidate {escape(repr(candidate))}: not one of the campaign's recipes; "
             f"give one of {', '.join(names)}")
    runs = load_runs_or_fail(campaign)
    source = f"campaign {campaign.name}: {reference} as the RCPs, {candidate} as the candidate"
    return campaign_cases(runs, campaign.benchmark, campaign.submission_runs, reference, candidate, batch_sizes,
                          sims), source


def _table(rows: list[dict], title: str) -> Table:
    from rcpforge.analysis.policy.output import brief_table

    header, body = brief_table(rows)
    view = Table(title=title)
    for col in header:
        view.add_column(col, justify="left" if col in ("benchmark", "policy") else "right")
    for line in body:
        view.add_row(*line)
    return view


@app.command("policy")
def policy_cmd(
    campaign_file: Path | None = typer.Argument(None, help="a campaign YAML file whose runs stand in for the "
                                                "distributions (with --reference and --candidate)"),
    rcps: list[str] = typer.Option([], "--rcps", help="a ruleset (5.1.0, 6.0.0, ...) whose shipped RCPs give "
                                   "the run distributions (repeatable)"),
    benchmark: str | None = typer.Option(None, "--benchmark", help="the benchmark (with --rcps; default every "
                                         "benchmark the ruleset ships)"),
    batch_size: list[int] = typer.Option([], "--batch-size", help="a batch size to simulate (repeatable; default "
                                         "every batch size with an RCP)"),
    factor: list[float] = typer.Option([], "--factor", help="a true factor f: honest runs converge f times the "
                                       "reference's (repeatable; default 1.0 and 1.08, campaign form 1.0, "
                                       "--frontier 1.0, 1.04, 1.08, 1.12)"),
    pick: list[int] = typer.Option([], "--pick", help="k: a cherry-picker does k times the work (repeatable; "
                                   "default 1, 2, 5; --frontier 1, 2, 5, 10)"),
    pick_mode: list[str] = typer.Option([], "--pick-mode", help="a cheater: sets, runs, window, strategic, poisoned "
                                        "(repeatable; default all five; docs/policy.md says which rule each exploits)"),
    rule: list[str] = typer.Option([], "--rule", help="a rule to weigh: a preset (today, precision_rcp, factor, "
                                   "group, m_of_n) or knobs, e.g. 'm=2,m0=5,norm=point' (repeatable; default the "
                                   "five presets, --frontier the family of docs/policy.md)"),
    frontier: bool = typer.Option(False, "--frontier", help="weigh the rules against each other: per rule honest "
                                  "rejection, catch rate, advantage kept and extra runs; the Pareto front; the "
                                  "recommendation"),
    m0: int = typer.Option(5, "--m0", help="factor policy: runs of each recipe at the smallest and largest batch size"),
    factor_bound: str = typer.Option("lower", "--factor-bound", help="factor policy: the interval's bound that "
                                     "scales the RCP (lower, point, upper)"),
    factor_confidence: float = typer.Option(0.95, "--factor-confidence", help="factor policy: the interval's "
                                            "confidence (two-sided)"),
    group: int = typer.Option(8, "--group", help="group policy: G similar submissions compared"),
    m: int | None = typer.Option(None, "--m", help="M > N policy: runs submitted (default 2N)"),
    p_threshold: float = typer.Option(0.001, "--p-threshold", help="group policy: `round`'s p-value flag"),
    z_threshold: float = typer.Option(3.5, "--z-threshold", help="group policy: `round`'s robust z flag"),
    sims: int | None = typer.Option(None, "--sims", help=f"simulated submitters per row (default {ROW_SIMS}; "
                                    f"--frontier {FRONTIER_SIMS})"),
    seed: int = typer.Option(0, "--seed", help="seed of the simulation (the same seed, the same figures)"),
    bootstrap_rcp: bool = typer.Option(False, "--bootstrap-rcp", help="redraw the reference RCP per simulated "
                                       "submission (two-level bootstrap: rates include the RCP's sampling error)"),
    reference: str | None = typer.Option(None, "--reference", help="campaign form: the recipe whose runs are the RCPs"),
    candidate: str | None = typer.Option(None, "--candidate", help="campaign form: the recipe submitted"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object; its rows: one per batch size, "
                                 "policy, factor, pick and pick mode (--frontier: per rule, the front, the "
                                 "recommendation)"),
    html: Path | None = typer.Option(None, "--html", help="also write a self-contained HTML report"),
    brief: Path | None = typer.Option(None, "--brief", help="also write a one-page Markdown brief (--frontier: the "
                                      "recommendation)"),
) -> None:
    """Simulate honest and cherry-picking submitters under today's RCP rule, the working
    group's proposals and any rule of their knobs; with --frontier, weigh them."""
    _outputs_or_fail(html, brief)
    sims = sims if sims is not None else FRONTIER_SIMS if frontier else ROW_SIMS
    _checked_numbers(factor, pick, m0, group, sims, factor_bound, factor_confidence, z_threshold, p_threshold)
    modes = _pick_modes_or_fail(pick_mode)
    cases, source = _cases_or_fail(campaign_file, rcps, benchmark, batch_size, reference, candidate, sims)
    rules = _rules_or_fail(rule, frontier, cases, dict(m0=m0, bound=factor_bound, confidence=factor_confidence,
                                                       group=group, z=z_threshold, p=p_threshold), m)
    factors, picks = _factors_and_picks(factor, pick, frontier, bool(rcps))
    settings = _settings(factors, picks, modes, rules, sims, seed, bootstrap_rcp, p_threshold, z_threshold)
    _simulate_and_show(cases, source, settings, frontier, as_json, html, brief)


def _outputs_or_fail(html: Path | None, brief: Path | None) -> None:
    for path, flag in ((html, "--html"), (brief, "--brief")):
        if path is not None:
            output_path_or_fail(path, flag, folder=False)


def _settings(factors: tuple, picks: tuple, modes: tuple, rules: tuple, sims: int, seed: int, bootstrap: bool,
              p_threshold: float, z_threshold: float):
    from rcpforge.analysis.policy.simulate import PolicySettings
    from rcpforge.analysis.round.groups import FlagSettings

    return PolicySettings(factors=factors, picks=picks, pick_modes=modes, rules=rules, sims=sims, seed=seed,
                          bootstrap=bootstrap, flags=FlagSettings(p_threshold=p_threshold, z_threshold=z_threshold,
                                                                  seed=seed))


def _simulate_and_show(cases: list, source: str, settings, frontier: bool, as_json: bool, html: Path | None,
                       brief: Path | None) -> None:
    """The rows of every case, then the frontier's view of them, or the rows as JSON or a table."""
    from rcpforge.analysis.policy.simulate import simulate_case

    rows = [row for case in cases for row in simulate_case(case, settings)]
    if frontier:
        _frontier(rows, settings.rules, settings, source, as_json, html, brief)
        return
    _write(rows, source, settings, html, brief)
    if as_json:
        print(json.dumps({"source": source, "sims": settings.sims, "seed": settings.seed,
                          "bootstrap_rcp": settings.bootstrap, "rows": rows}))
        return
    names = ", ".join(dict.fromkeys(c.benchmark for c in cases))
    console.print(_table(rows, f"{names}: {source} (means over batch sizes)"))


def _rules_or_fail(specs: list[str], frontier: bool, cases, knobs: dict, m: int | None) -> tuple:
    """The rules to weigh: those named, else the five presets (their knobs as the flags set
    them) or, with --frontier, the family; with --frontier, today's among them."""
    from rcpforge.analysis.policy.rules import RuleError, family, parse_rule, preset_rules

    ns = {c.n for c in cases}
    if m is not None and (len(ns) > 1 or not min(ns) < m <= 5 * min(ns)):
        n = min(ns)
        fail(f"--m {m}: the M > N policy submits more runs than N, at most 5N; give {n + 1} to {5 * n} "
             f"(default 2N = {2 * n})" if len(ns) == 1 else
             f"--m {m}: the benchmarks simulated have different N; give --rule m=2 (M as a multiple of N) instead")
    try:
        presets = preset_rules(m=2.0 if m is None else m / min(ns), **knobs)
        named = [parse_rule(text, presets) for text in specs]
    except RuleError as err:
        fail(escape(str(err)))
    rules = {r.label: r for r in named or (family() if frontier else presets.values())}
    if frontier and len(rules) < 2:
        fail("--frontier weighs rules against each other: give two or more --rule, or none for the default family")
    if frontier and "today" not in rules:  # the baseline every honest excess is measured from
        rules = {"today": presets["today"], **rules}
    return tuple(rules.values())


def _factors_and_picks(factor: list[float], pick: list[int], frontier: bool, ruleset_form: bool) -> tuple:
    from rcpforge.analysis.policy.frontier import FRONTIER_FACTORS, FRONTIER_PICKS, TERMS_K

    factors = tuple(dict.fromkeys(factor))
    picks = tuple(sorted(set(pick)))
    if frontier:  # the terms need today's rule at f = 1 and a k = 5 cheater
        factors = tuple(sorted({1.0, *(factors or FRONTIER_FACTORS)}))
        return factors, tuple(sorted({1, TERMS_K, *(picks or FRONTIER_PICKS)}))
    return factors or ((1.0, 1.08) if ruleset_form else (1.0,)), picks or (1, 2, 5)


def _frontier(rows: list[dict], rules, settings, source: str, as_json: bool, html: Path | None,
              brief: Path | None) -> None:
    from rcpforge.analysis.policy.frontier_output import (
        frontier_doc,
        frontier_table,
        write_frontier_brief,
        write_frontier_html,
    )

    head = {"source": source, "sims": settings.sims, "seed": settings.seed, "bootstrap_rcp": settings.bootstrap,
            "factors": list(settings.factors), "picks": list(settings.picks), "pick_modes": list(settings.pick_modes)}
    doc = frontier_doc(rows, {r.label: r.spec for r in rules}, head)
    if brief is not None:
        write_frontier_brief(brief, doc)
        err_console.print(f"wrote {escape(str(brief))}", highlight=False)
    if html is not None:
        write_frontier_html(html, doc)
        err_console.print(f"wrote {escape(str(html))}", highlight=False)
    if as_json:
        print(json.dumps(doc))
        return
    header, body = frontier_table(doc)
    view = Table(title=f"The frontier: {source}")
    for col in header:
        view.add_column(col, justify="left" if col == "rule" else "right")
    for line in body:
        view.add_row(*line)
    console.print(view)


def _cases_or_fail(campaign_file: Path | None, rcps: list[str], benchmark: str | None, batch_size: list[int],
                   reference: str | None, candidate: str | None, sims: int):
    """The cases of the ruleset form (each ruleset named, one benchmark or every one) or
    of the campaign form, and a line naming the source."""
    from rcpforge.analysis.policy.cases import PolicyError, ruleset_cases

    if (campaign_file is None) == (not rcps):
        fail("give either --rcps RULESET [--benchmark B], or a campaign file with --reference and --candidate")
    try:
        if rcps:
            rulesets = list(dict.fromkeys(rcps))
            cases = [case for ruleset in rulesets for case in ruleset_cases(ruleset, benchmark, batch_size, sims)]
            return cases, f"the RCPs of ruleset {' and '.join(rulesets)}"
        return _campaign_cases(campaign_file, reference, candidate, batch_size, sims)  # type: ignore[arg-type]
    except PolicyError as err:
        fail(escape(str(err)))


def _write(rows: list[dict], source: str, settings, html: Path | None, brief: Path | None) -> None:
    from rcpforge.analysis.policy.output import write_brief, write_html

    if brief is not None:
        write_brief(brief, rows, source, settings.sims, settings.seed)
        err_console.print(f"wrote {escape(str(brief))}", highlight=False)
    if html is not None:
        write_html(html, rows, source, settings.sims, settings.seed)
        err_console.print(f"wrote {escape(str(html))}", highlight=False)
