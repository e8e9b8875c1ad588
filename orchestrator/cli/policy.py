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


def _checked_numbers(factors: list[float], picks: list[int], m0: int, group: int, sims: int, bound: str,
                     confidence: float) -> None:
    """One line per bad number, before anything is read."""
    for f in factors:
        if not f > 0:
            fail(f"--factor {f:g}: a true factor is the candidate's samples to converge over the reference's; "
                 "give a number above 0 (1.08: 8% slower)")
    for k in picks:
        if k < 1:
            fail(f"--pick {k}: k is how many times the work a cherry-picker does; give 1 or more")
    if m0 < 2:
        fail(f"--m0 {m0}: the factor's interval needs at least 2 runs of each recipe per batch size; give 2 or more")
    if group < 1:
        fail(f"--group {group}: a group holds the submission and its peers; give 1 or more")
    if sims < 100:
        fail(f"--sims {sims}: too few simulated submitters for a rate; give 100 or more (default 20000)")
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
        view.add_column(col, justify="left" if col == "policy" else "right")
    for line in body:
        view.add_row(*line)
    return view


@app.command("policy")
def policy_cmd(
    campaign_file: Path | None = typer.Argument(None, help="a campaign YAML file whose runs stand in for the "
                                                "distributions (with --reference and --candidate)"),
    rcps: str | None = typer.Option(None, "--rcps", help="a ruleset (5.1.0, 6.0.0, ...) whose shipped RCPs give "
                                    "the run distributions"),
    benchmark: str | None = typer.Option(None, "--benchmark", help="the benchmark (with --rcps)"),
    batch_size: list[int] = typer.Option([], "--batch-size", help="a batch size to simulate (repeatable; default "
                                         "every batch size with an RCP)"),
    factor: list[float] = typer.Option([], "--factor", help="a true factor f: honest runs converge f times the "
                                       "reference's (repeatable; default 1.0 and 1.08, campaign form 1.0)"),
    pick: list[int] = typer.Option([], "--pick", help="k: a cherry-picker does k times the work (repeatable; "
                                   "default 1, 2, 5)"),
    pick_mode: list[str] = typer.Option([], "--pick-mode", help="a cheater: sets, runs, window, strategic, poisoned "
                                        "(repeatable; default all five; docs/policy.md says which rule each exploits)"),
    m0: int = typer.Option(5, "--m0", help="factor policy: runs of each recipe at the smallest and largest batch size"),
    factor_bound: str = typer.Option("lower", "--factor-bound", help="factor policy: the interval's bound that "
                                     "scales the RCP (lower, point, upper)"),
    factor_confidence: float = typer.Option(0.95, "--factor-confidence", help="factor policy: the interval's "
                                            "confidence (two-sided)"),
    group: int = typer.Option(8, "--group", help="group policy: G similar submissions compared"),
    m: int | None = typer.Option(None, "--m", help="M > N policy: runs submitted (default 2N)"),
    p_threshold: float = typer.Option(0.001, "--p-threshold", help="group policy: `round`'s p-value flag"),
    z_threshold: float = typer.Option(3.5, "--z-threshold", help="group policy: `round`'s robust z flag"),
    sims: int = typer.Option(20_000, "--sims", help="simulated submitters per row"),
    seed: int = typer.Option(0, "--seed", help="seed of the simulation (the same seed, the same figures)"),
    bootstrap_rcp: bool = typer.Option(False, "--bootstrap-rcp", help="redraw the reference RCP per simulated "
                                       "submission (two-level bootstrap: rates include the RCP's sampling error)"),
    reference: str | None = typer.Option(None, "--reference", help="campaign form: the recipe whose runs are the RCPs"),
    candidate: str | None = typer.Option(None, "--candidate", help="campaign form: the recipe submitted"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object; its rows: one per batch size, "
                                 "policy, factor, pick and pick mode"),
    html: Path | None = typer.Option(None, "--html", help="also write a self-contained HTML report"),
    brief: Path | None = typer.Option(None, "--brief", help="also write a one-page Markdown brief per benchmark"),
) -> None:
    """Simulate honest and cherry-picking submitters under today's RCP rule and four proposals."""
    from rcpforge.analysis.policy.rules import preset_rules
    from rcpforge.analysis.policy.simulate import PolicySettings, simulate_case
    from rcpforge.analysis.round.groups import FlagSettings

    for path, flag in ((html, "--html"), (brief, "--brief")):
        if path is not None:
            output_path_or_fail(path, flag, folder=False)
    _checked_numbers(factor, pick, m0, group, sims, factor_bound, factor_confidence)
    modes = _pick_modes_or_fail(pick_mode)
    cases, source = _cases_or_fail(campaign_file, rcps, benchmark, batch_size, reference, candidate, sims)
    n = cases[0].n
    if m is not None and not n < m <= 5 * n:
        fail(f"--m {m}: the M > N policy submits more runs than N = {n}, at most 5N; give {n + 1} to {5 * n} "
             f"(default 2N = {2 * n})")
    presets = preset_rules(m0, factor_bound, factor_confidence, group, z_threshold, p_threshold,
                           2.0 if m is None else m / n)
    settings = PolicySettings(
        factors=tuple(dict.fromkeys(factor)) or ((1.0, 1.08) if rcps else (1.0,)),
        picks=tuple(sorted(set(pick))) or (1, 2, 5), pick_modes=modes, rules=tuple(presets.values()), sims=sims,
        seed=seed, bootstrap=bootstrap_rcp,
        flags=FlagSettings(p_threshold=p_threshold, z_threshold=z_threshold, seed=seed))
    rows = [row for case in cases for row in simulate_case(case, settings)]
    _write(rows, source, settings, html, brief)
    if as_json:
        print(json.dumps({"source": source, "sims": sims, "seed": seed, "bootstrap_rcp": bootstrap_rcp, "rows": rows}))
        return
    title = f"{cases[0].benchmark}: {source} (means over batch sizes {', '.join(str(c.batch_size) for c in cases)})"
    console.print(_table(rows, title))


def _cases_or_fail(campaign_file: Path | None, rcps: str | None, benchmark: str | None, batch_size: list[int],
                   reference: str | None, candidate: str | None, sims: int):
    """The cases of the ruleset form or of the campaign form, and a line naming the source."""
    from rcpforge.analysis.policy.cases import PolicyError, ruleset_cases

    if (campaign_file is None) == (rcps is None):
        fail("give either --rcps RULESET --benchmark B, or a campaign file with --reference and --candidate")
    try:
        if rcps is not None:
            if benchmark is None:
                fail("--benchmark is missing: give the benchmark whose RCPs to simulate, e.g. --benchmark llama31_8b")
            return ruleset_cases(rcps, benchmark, batch_size, sims), f"the RCPs of ruleset {rcps}"
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
