"""`rcpforge round`: a published round (or any folder of results directories) checked
submission by submission as the MLCommons checker checks it, with each one's olympic mean
against the RCP in percent and in eval intervals (`analysis/round.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from orchestrator.cli.app import app, console, err_console, fail


@app.command("round")
def round_cmd(
    root: Path = typer.Argument(..., help="a round's root (<submitter>/results/<system>/<benchmark>/) "
                                "or any folder of results directories"),
    rcps: str = typer.Option(..., "--rcps", help="an RCP JSON file, or a ruleset whose shipped RCPs are used "
                             "(5.0.0 for the v5.0 round)"),
    as_json: bool = typer.Option(False, "--json", help="standard output is one JSON document: a list, one object "
                                 "per submission"),
    tracking_uri: str | None = typer.Option(None, "--tracking-uri", help="also import the round's result files "
                                               "into this store (in bulk; files imported before are skipped)"),
) -> None:
    """Every submission of a round: the checker's verdict, message and normalization factor
    (pruned RCPs, as the checker), its olympic mean against the RCP, and the M > N score."""
    from analysis.rcp_set import RcpError
    from analysis.round import analyze_round

    try:
        rows = analyze_round(root, rcps)
    except RcpError as err:
        fail(str(err))
    if tracking_uri is not None:
        from orchestrator.results_dirs import ResultsError, import_results

        try:
            summary = import_results([root], root.resolve().name or "round", tracking_uri)
        except ResultsError as err:
            fail(str(err))
        err_console.print(f"imported {summary.imported} runs, {summary.already} already there", highlight=False)
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    _table(rows)


def _table(rows: list[dict]) -> None:
    from rich.table import Table

    def num(value, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    table = Table("dir", "bs", "passed", "message", "norm", "olympic", "rcp mean", "vs rcp %", "vs rcp evals")
    for r in rows:
        table.add_row(r["dir"], str(r["batch_size"]), "yes" if r["passed"] else "NO", r["message"],
                      num(r["norm_factor"], ".4f"), num(r["olympic_mean"], ".6g"), num(r["rcp_mean"], ".6g"),
                      num(r["vs_rcp_pct"], "+.1f"), num(r["vs_rcp_evals"], "+.2f"))
    console.print(table)
    passed = sum(r["passed"] for r in rows)
    console.print(f"{len(rows)} submissions: {passed} pass, {len(rows) - passed} fail")
