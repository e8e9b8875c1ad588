"""The analysis commands: `analyze` (what a campaign's runs mean), `check` (a submission
against RCPs) and `rcp-stats` (the RCPs' statistics), the last two exactly as the
MLCommons checker computes them."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from rcpforge.orchestrator.cli import render
from rcpforge.orchestrator.cli.app import (
    EXIT_FAILED_CHECK,
    app,
    campaign_handle,
    console,
    err_console,
    fail,
    load_runs_or_fail,
    output_path_or_fail,
    reference_or_fail,
    stored_campaign_or_fail,
)


@app.command()
def analyze(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    out: Path = typer.Option(Path("rcpforge-analysis"), "--out", help="folder for the RCP files, tables and reports"),
    reference: str = typer.Option(None, "--reference", show_default="bf16, or adaptive.reference",
                                  help="the reference recipe of the convergence factors"),
    seed: int = typer.Option(0, "--seed", help="seed of the bootstrap and Monte Carlo"),
    resamples: int = typer.Option(10_000, "--resamples", min=100, help="bootstrap resamples"),
    reference_rcps: str = typer.Option(
        None, "--reference-rcps",
        help="derive the candidates' RCPs from this RCP file (or ruleset, for the campaign's benchmark) instead of the campaign's reference RCPs",
    ),
    extrapolate_to: float = typer.Option(
        None, "--extrapolate-to", metavar="PARAMS",
        help="with runs of several models: predict each recipe's factor at this parameter count (e.g. 8e9) from "
             "the trend across sizes, labelled an extrapolation beyond the measured sizes",
    ),
    pool_mixed: bool = typer.Option(
        False, "--pool-mixed",
        help="write an RCP record also for a cell whose runs were made with different settings (a file edited "
             "between runs); by default such a cell gets none, and a note names the setting",
    ),
) -> None:
    """Write the RCP table, RCP files per recipe, factors, selection statistics and a summary (and, with runs of
    several models, the factor against model size: scale.json)."""
    output_path_or_fail(out, "--out", folder=True)
    extrapolate_or_fail(extrapolate_to)
    campaign = stored_campaign_or_fail(campaign_file)
    reference = reference_or_fail(campaign, reference)  # before the runs are read
    raw_reference = _reference_rcps_or_fail(reference_rcps, campaign.benchmark) if reference_rcps else None
    runs = load_runs_or_fail(campaign)
    if campaign.models is None:
        result = campaign_handle(campaign, adaptive=True).analyze(out, reference, seed=seed, resamples=resamples,
                                                                  reference_rcps=raw_reference, runs=runs,
                                                                  pool_mixed=pool_mixed)
        _report(campaign, result, campaign.benchmark)
        if extrapolate_to is not None:
            err_console.print("note: --extrapolate-to: the campaign has one model; a trend across sizes needs a "
                              "`models:` axis of two or more", highlight=False, markup=False)
    else:
        from rcpforge.analysis.analyze import analyze_across_models
        from rcpforge.orchestrator.models_analysis import analyze_models

        request = analysis_request(campaign, reference, seed, resamples=resamples, reference_rcps=raw_reference,
                                   extrapolate_to=extrapolate_to, pool_mixed=pool_mixed)
        for model, result in analyze_models(campaign, runs, request, out):  # one analysis per model, in out/<model>/
            _report(campaign, result, campaign.benchmark_of(model))
        across = analyze_across_models(runs, request, out)  # the trend across models, beside their folders
        for path in across.written:
            console.print(f"wrote {path}")
        for note in across.notes:
            err_console.print(f"note: {note}", highlight=False, markup=False)
    from rcpforge.orchestrator.status import outside_plan

    if outside := outside_plan(campaign, runs["run_key"].to_pylist()):
        err_console.print(f"note: {len(outside)} runs in the store are not runs of this campaign file (imported, or "
                          "made by an earlier version of it with other settings) and are counted in their cells; "
                          "`rcpforge status` lists them", highlight=False, markup=False)


def _report(campaign, result, benchmark: str) -> None:
    """What `analyze` prints of one analysis: the RCP table, the files written, the notes."""
    table = result.table
    _print_table(table, f"RCP table: {campaign.name} (benchmark {benchmark}, N = {campaign.submission_runs}, "
                        "samples to converge)", campaign.submission_runs)
    for path in result.written:
        console.print(f"wrote {path}")
    for note in result.notes:
        err_console.print(f"note: {note}", highlight=False, markup=False)
    for r in table.to_pylist():
        if r["converged"] < r["runs"]:
            err_console.print(
                f"note: {r['recipe']} bs {r['batch_size']}: {r['converged']} of {r['runs']} runs converged; "
                "no RCP is written for an incomplete cell", highlight=False, markup=False,
            )
        elif r["note"]:
            written = "" if r["is_rcp"] else "; its RCP record is written, marked with rcpforge_note"
            err_console.print(f"note: {r['recipe']} bs {r['batch_size']}: {r['note']}{written}",
                              highlight=False, markup=False)


def analysis_request(campaign, reference: str | None, seed: int, **more):
    """The analysis of a campaign, in the plain terms the analysis package takes
    (`rcpforge.Campaign.request`); an adaptive campaign's looks and stops come along, read
    from its tracking store."""
    from rcpforge import RcpforgeError

    try:
        return campaign_handle(campaign, adaptive=True).request(reference, seed=seed, **more)
    except RcpforgeError as err:
        fail(escape(str(err)))


def extrapolate_or_fail(params: float | None) -> None:
    """--extrapolate-to is a parameter count: a positive, finite number."""
    import math

    if params is not None and not (math.isfinite(params) and params > 0):
        fail(f"--extrapolate-to: a parameter count must be a positive number such as 8e9, got {params!r}")


def _reference_rcps_or_fail(source: str, benchmark: str) -> dict:
    from rcpforge.analysis.rcp_set import RULESETS, RcpError, ruleset_file

    try:
        path = ruleset_file(source, benchmark) if source in RULESETS else Path(source)
        raw = json.loads(path.read_text())
    except (OSError, ValueError, RcpError) as err:
        fail(f"--reference-rcps {source!r}: cannot read RCPs ({err})")
    if not isinstance(raw, dict) or not all(isinstance(r, dict) and "BS" in r and "Benchmark" in r for r in raw.values()):
        fail(f"--reference-rcps {source!r}: not an MLCommons RCP file (records need Benchmark and BS)")
    return raw


def _print_table(table, title: str, submission_runs: int) -> None:
    """The table with a short mark per row; the notes in full follow on stderr."""
    from rcpforge.analysis.display import NOT_MEANINGFUL

    console.print(render.rcp_table(table, title, submission_runs))
    if any(r["degenerate"] for r in table.to_pylist()):
        console.print(f"{NOT_MEANINGFUL}: the checker computes this number, but for these runs it says nothing (see the notes)",
                      highlight=False, markup=False)


@app.command()
def check(
    results_dir: Path = typer.Argument(..., help="folder with the submission's result_*.txt MLLOG files"),
    rcps: str = typer.Option(..., "--rcps", help="an RCP JSON file, or a ruleset version such as 5.1.0"),
    rcp_pass: str = typer.Option("pruned", "--rcp-pass", help="pruned (the checker's default) or full"),
    ruleset: str = typer.Option("6.0.0", "--ruleset", help="rules version when --rcps is a file"),
    bert_train_samples: bool = typer.Option(False, "--bert-train-samples", help="BERT: read train_samples"),
    prune: str = typer.Option("mlperf", "--prune", help="mlperf (the checker's pruning) or envelope (the true lower convex envelope; a what-if)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    submission_runs: int = typer.Option(
        None, "--submission-runs", min=1,
        help="runs per submission of a benchmark the checker does not know (a campaign's own, e.g. rcp.submission_runs)",
    ),
) -> None:
    """Pass or fail a submission against RCPs, as mlperf_logging's RCP checker does."""
    import rcpforge

    try:
        result = rcpforge.check(results_dir, rcps, rcp_pass=rcp_pass, ruleset=ruleset,
                                bert_train_samples=bert_train_samples, prune=prune, submission_runs=submission_runs)
    except rcpforge.RcpforgeError as err:
        fail(escape(str(err)))
    for warning in result.warnings:
        # Warnings quote the files' text: escaped, so "[/x]" in a file is not rich markup.
        err_console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False, markup=True)
    if as_json:
        print(json.dumps(result.to_json()))
    else:
        verdict = "[green]PASSED[/green]" if result.passed else "[red]FAILED[/red]"
        console.print(f"{verdict} {escape(result.message)}", highlight=False)
        if result.checker_error and result.checker_error not in result.message:
            console.print(f"the reference checker stops on this input: {result.checker_error}", highlight=False, markup=False)
        if result.checker_error is None or result.benchmark is not None:
            console.print(
                f"benchmark {result.benchmark}, batch size {result.batch_size}; olympic mean {render.number(result.olympic_mean)}; "
                f"RCP ({result.rcp_used}{', ' + result.rcp_name if result.rcp_name else ''}) mean {render.number(result.rcp_mean)}, "
                f"min acceptable mean {render.number(result.min_acceptable_mean)}"
                f"{' (not meaningful, see the note)' if result.rcp_note else ''}; normalization factor {render.number(result.norm_factor, 6)}",
                highlight=False, markup=False,  # the benchmark and RCP names come from the files
            )
        if result.rcp_note:
            console.print(f"note: RCP {result.rcp_name}: {result.rcp_note}", highlight=False, markup=False)
    raise typer.Exit(0 if result.passed else EXIT_FAILED_CHECK)


@app.command("rcp-stats")
def rcp_stats_cmd(
    rcps: str = typer.Argument(..., help="an RCP JSON file, or a ruleset version such as 6.0.0"),
    benchmark: str = typer.Option(None, "--benchmark", help="only this benchmark"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON list of records"),
    submission_runs: int = typer.Option(
        None, "--submission-runs", min=1,
        help="runs per submission (N) of a benchmark the checker does not know; rcpforge's own RCP files carry it",
    ),
) -> None:
    """Per RCP record: mean, stdev, min acceptable mean, max speedup, kept by pruning, today's honest
    rejection rate (seeded Monte Carlo, 10,000 submissions) and a mark for coarse RCPs."""
    from rcpforge.analysis.rcp_set import RcpError, load_rcp_sets, stats_rows
    from rcpforge.trainers.contract.submission import SUBMISSION_RUNS

    try:
        sets = load_rcp_sets(rcps, benchmark, unknown_runs=submission_runs)
        for known in [s for s in sets if s.benchmark in SUBMISSION_RUNS and s.submission_runs != submission_runs]:
            if submission_runs is not None:
                err_console.print(f"warning: --submission-runs {submission_runs} ignored for {known.benchmark}: "
                                  f"the checker counts {known.submission_runs} runs per submission of it")
        rows = [row for s in sets for row in stats_rows(s)]
    except RcpError as err:
        fail(str(err))
    from rcpforge.analysis.policy.health import rcp_health
    from rcpforge.analysis.rcp_set import RULESETS

    health = {(s.benchmark, name): entry for s in sets
              for name, entry in rcp_health(s, rcps if rcps in RULESETS else "6.0.0").items()}
    for row in rows:
        row.update(health[(row["benchmark"], row["record"])])
    if as_json:
        print(json.dumps(rows))
        return
    console.print(render.rcp_stats_table(rcps, rows))
    differ = [r for r in rows if r["kept_by_pruning"] != r["kept_by_envelope"]]
    for r in differ:
        console.print(f"pruning modes differ at {r['record']}: mlperf {'keeps' if r['kept_by_pruning'] else 'drops'} it, "
                      f"the convex envelope {'keeps' if r['kept_by_envelope'] else 'drops'} it", highlight=False)
    coarse = [r for r in rows if r["coarse"]]
    if coarse:
        console.print(f"eval grid: {len(coarse)} RCP(s) whose runs take 3 or fewer distinct values or have zero "
                      f"spread ({', '.join(escape(str(r['record'])) + ': ' + r['coarse'] for r in coarse)}); their "
                      "statistics rest on a few evals", highlight=False)
