"""`rcpforge round`: a published round (or any folder of results directories) checked
submission by submission as the MLCommons checker checks it, with each one's olympic mean
against the RCP in percent and in eval intervals, grouped like with like and scored
within its group (`analysis/round/verdicts.py`, `analysis/round/groups.py`), the precision
factors where precision is disclosed or mapped (`analysis/round/precision.py`), and the
round written as JSON, Parquet or a self-contained HTML report."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from rcpforge.orchestrator.cli import render
from rcpforge.orchestrator.cli.app import app, console, err_console, fail, output_path_or_fail


@app.command("round")
def round_cmd(
    root: Path = typer.Argument(..., help="a round's root (<submitter>/results/<system>/<benchmark>/) "
                                "or any folder of results directories"),
    rcps: str = typer.Option(..., "--rcps", help="an RCP JSON file, or a ruleset whose shipped RCPs are used "
                             "(5.0.0 for the v5.0 round)"),
    as_json: bool = typer.Option(False, "--json", help="standard output is one JSON document: a list, one object "
                                 "per submission"),
    group_by: str | None = typer.Option(None, "--group-by", help="KEY,KEY: the settings that make submissions "
                                        "alike (default benchmark,batch_size,framework,accelerator; also "
                                        "submitter, system, division, accelerators_per_node, nodes, precision)"),
    p_threshold: float = typer.Option(0.001, "--p-threshold", help="flag a submission whose probability that "
                                      "honest seeds are this fast is below this"),
    z_threshold: float = typer.Option(3.5, "--z-threshold", help="flag a submission whose robust z within its "
                                      "group is below minus this"),
    precision_map: Path | None = typer.Option(None, "--precision-map", help="a JSON or CSV file mapping result "
                                              "directory to precision label (rounds before 6.1)"),
    parquet: Path | None = typer.Option(None, "--parquet", help="also write the submissions as a Parquet file"),
    html: Path | None = typer.Option(None, "--html", help="also write a self-contained HTML round report"),
    tracking_uri: str | None = typer.Option(None, "--tracking-uri", help="the store the round's result files are "
                                               "imported into, in bulk, files imported before skipped (default: "
                                               "sqlite rcpforge-mlflow.db here)"),
    no_import: bool = typer.Option(False, "--no-import", help="read the files only; import nothing"),
) -> None:
    """Every submission of a round: the checker's verdict, message and normalization factor
    (pruned RCPs, as the checker), its olympic mean against the RCP, the M > N score, its
    group of like submissions, robust z and p-value, and the flags beyond the thresholds.
    The result files not imported yet are imported first (into --tracking-uri, or
    rcpforge-mlflow.db in the current folder), so the round is in a store for queries."""
    if tracking_uri is not None and no_import:
        fail("--tracking-uri and --no-import: give one (--no-import reads the files without a store)")
    for flag, path in (("--parquet", parquet), ("--html", html)):
        if path is not None:  # before the round is read: an output of the wrong kind is bad input
            output_path_or_fail(path, flag, folder=False)
    import rcpforge

    try:
        found = rcpforge.round(root, rcps, group_by=group_by, p_threshold=p_threshold, z_threshold=z_threshold,
                               precision_map=precision_map)
    except rcpforge.RcpforgeError as err:
        fail(escape(str(err)))
    for note in found.notes:
        err_console.print(f"note: {note}", highlight=False)
    if not no_import:
        _import_round(root, tracking_uri)
    rows, factors = found.submissions, found.precision_factors
    _write_files(rows, factors, found.group_by, parquet, html, str(root))
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    _tables(rows, factors)


def _import_round(root: Path, tracking_uri: str | None) -> None:
    """The round's result files not imported yet, into the store (rcpforge-mlflow.db here by default)."""
    from rcpforge.orchestrator.results_dirs import ResultsError, import_results
    from rcpforge.sweeps.tracking_spec import DEFAULT_DB

    tracking_uri = tracking_uri or f"sqlite:///{(Path.cwd() / DEFAULT_DB).resolve()}"
    try:
        summary = import_results([root], root.resolve().name or "round", tracking_uri)
    except ResultsError as err:
        fail(str(err))
    err_console.print(f"imported {summary.imported} runs, {summary.already} already there", highlight=False)


def _write_files(rows: list[dict], factors: list[dict], keys, parquet: Path | None, html: Path | None,
                 title: str) -> None:
    try:
        if parquet is not None:
            from rcpforge.analysis.round.report import write_parquet

            write_parquet(rows, parquet)
            err_console.print(f"wrote {parquet}", highlight=False)
        if html is not None:
            from rcpforge.analysis.round.report import write_round_report

            write_round_report(html, rows, factors, keys, title)
            err_console.print(f"wrote {html}", highlight=False)
    except OSError as err:
        fail(f"--parquet/--html: cannot write {err.filename}: {err.strerror}; give a writable path")


def _tables(rows: list[dict], factors: list[dict]) -> None:
    from rcpforge.analysis.round.groups import group_summaries

    groups = group_summaries(rows)
    for table in render.round_tables(rows, groups, factors):
        console.print(table)
    passed = sum(r["passed"] for r in rows)
    flagged = sum(1 for r in rows if r["flagged"])
    console.print(f"{len(rows)} submissions: {passed} pass, {len(rows) - passed} fail; {len(groups)} groups; "
                  f"{flagged} flagged")
    compared = [r for r in rows if r["summary_file"]]
    if compared:
        disagree = sum(1 for r in compared if r["summary_disagrees"])
        console.print(f"summary.json: {len(compared)} submissions compared with what it says, {disagree} disagree",
                      highlight=False)
