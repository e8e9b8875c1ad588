"""`rcpforge check` and `rcpforge rcp-stats`: a submission against RCPs, and the RCPs'
own statistics, both exactly as the MLCommons checker computes them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer
from rich.table import Table

from orchestrator.cli_app import app, console, err_console, fail


def _num(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    return f"{float(value):,.{digits}f}" if math.isfinite(float(value)) else str(float(value))


@app.command()
def check(
    results_dir: Path = typer.Argument(..., help="folder with the submission's result_*.txt MLLOG files"),
    rcps: str = typer.Option(..., "--rcps", help="an RCP JSON file, or a ruleset version such as 5.1.0"),
    rcp_pass: str = typer.Option("pruned", "--rcp-pass", help="pruned (the checker's default) or full"),
    ruleset: str = typer.Option("6.0.0", "--ruleset", help="rules version when --rcps is a file"),
    bert_train_samples: bool = typer.Option(False, "--bert-train-samples", help="BERT: read train_samples"),
    prune: str = typer.Option("mlperf", "--prune", help="mlperf (the checker's pruning) or envelope (the true lower convex envelope; a what-if)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Pass or fail a submission against RCPs, as mlperf_logging's RCP checker does."""
    from analysis.check import check_directory
    from analysis.rcp_set import RULESETS, RcpError

    if not results_dir.is_dir():
        fail(f"results_dir {str(results_dir)!r} is not a folder")
    rcp_file = None
    if rcps in RULESETS:
        ruleset = rcps
    elif Path(rcps).is_file():
        rcp_file = Path(rcps)
    else:
        fail(f"--rcps {rcps!r} is neither an RCP file nor a ruleset; rulesets: {', '.join(RULESETS)}")
    try:
        result = check_directory(results_dir, rcp_file, ruleset, rcp_pass, bert_train_samples, prune=prune)
    except RcpError as err:
        fail(str(err))
    if prune != "mlperf":
        result.warnings.append(f"--prune {prune}: the pruned pass differs from the reference checker's")
    for warning in result.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False, markup=True)
    if as_json:
        print(json.dumps(result.to_json()))
    else:
        verdict = "[green]PASSED[/green]" if result.passed else "[red]FAILED[/red]"
        console.print(f"{verdict} {result.message}", highlight=False)
        if result.checker_error:
            console.print(f"the reference checker stops on this input: {result.checker_error}", highlight=False)
        console.print(
            f"benchmark {result.benchmark}, batch size {result.batch_size}; olympic mean {_num(result.olympic_mean)}; "
            f"RCP ({result.rcp_used}{', ' + result.rcp_name if result.rcp_name else ''}) mean {_num(result.rcp_mean)}, "
            f"min acceptable mean {_num(result.min_acceptable_mean)}; normalization factor {_num(result.norm_factor, 6)}",
            highlight=False,
        )
    raise typer.Exit(0 if result.passed else 1)


@app.command("rcp-stats")
def rcp_stats_cmd(
    rcps: str = typer.Argument(..., help="an RCP JSON file, or a ruleset version such as 6.0.0"),
    benchmark: str = typer.Option(None, "--benchmark", help="only this benchmark"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON list of records"),
) -> None:
    """Per RCP record: mean, stdev, min acceptable mean, max speedup, kept by pruning."""
    from analysis.rcp_set import RcpError, load_rcp_sets, stats_rows

    try:
        rows = [row for s in load_rcp_sets(rcps, benchmark) for row in stats_rows(s)]
    except RcpError as err:
        fail(str(err))
    if as_json:
        print(json.dumps(rows))
        return
    view = Table(title=f"RCP statistics: {rcps}")
    for col in ("benchmark", "batch size", "runs", "mean", "stdev", "min acc. mean", "max speedup", "pruned", "envelope"):
        view.add_column(col, justify="left" if col == "benchmark" else "right")
    for r in rows:
        view.add_row(r["benchmark"], str(r["batch_size"]), str(r["runs"]), _num(r["mean"]), _num(r["stdev"]),
                     _num(r["min_acceptable_mean"]), _num(r["max_speedup"], 6),
                     "kept" if r["kept_by_pruning"] else "dropped", "kept" if r["kept_by_envelope"] else "dropped")
    console.print(view)
    differ = [r for r in rows if r["kept_by_pruning"] != r["kept_by_envelope"]]
    for r in differ:
        console.print(f"pruning modes differ at {r['record']}: mlperf {'keeps' if r['kept_by_pruning'] else 'drops'} it, "
                      f"the convex envelope {'keeps' if r['kept_by_envelope'] else 'drops'} it", highlight=False)
