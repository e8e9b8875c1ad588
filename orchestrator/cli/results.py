"""The runs out of and into the tracking store: `rcpforge export` (a runs table, MLCommons
results directories, a submitter package) and `rcpforge import` (results directories as runs)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from rcpforge.orchestrator.cli.app import (
    app,
    console,
    err_console,
    fail,
    load_runs_or_fail,
    output_path_or_fail,
    stored_campaign_or_fail,
    tracking_uri_or_fail,
)
from rcpforge.trainers.contract.redact import redact_uri


@app.command("import")
def import_cmd(
    dirs: List[Path] = typer.Argument(..., help="results directories holding result_<i>.txt files, or folders holding "
                                      "them at any depth (a round's root, an `export --results` folder)"),
    campaign: str = typer.Option(..., "--campaign", help="the campaign (MLflow experiment) the runs join"),
    recipe: Optional[str] = typer.Option(None, help="recipe name of the runs (default: each folder's parent's name)"),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", help="default: sqlite rcpforge-mlflow.db here"),
) -> None:
    """Read results directories (a published MLPerf submission or whole round, an export) as
    runs, in bulk; files imported before are skipped."""
    import re

    from rcpforge.orchestrator.results_dirs import ResultsError, import_results
    from rcpforge.sweeps.tracking_spec import DEFAULT_DB

    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", campaign):
        fail(f"--campaign {campaign!r}: use letters, digits, '_', '.', '-' (starting with a letter or digit)")
    uri = tracking_uri or f"sqlite:///{(Path.cwd() / DEFAULT_DB).resolve()}"
    tracking_uri_or_fail(uri, "--tracking-uri")
    try:
        summary = import_results(dirs, campaign, uri, recipe)
    except ResultsError as err:
        fail(str(err))
    for note in summary.truncated:
        err_console.print(f"note: {note}", highlight=False)
    if len(summary.cells) <= 20:  # a whole round's hundreds of cells would bury the summary
        for (name, bs), count in sorted(summary.cells.items()):
            console.print(f"{name} bs {bs}: {count} runs imported")
    console.print(f"campaign {campaign}: {summary.imported} runs imported, {summary.already} already there "
                  f"(from {summary.folders} results directories)")
    console.print(f"tracking store: {redact_uri(uri)}")


@app.command()
def export(
    campaign_file: Path = typer.Argument(..., help="the campaign YAML file"),
    parquet: Path = typer.Option(None, "--parquet", help="write the runs table (one row per run) to this Parquet file"),
    results: Path = typer.Option(None, "--results", help="write MLCommons results directories <recipe>/bs<batch size>/result_<i>.txt under this folder"),
    package: Path = typer.Option(None, "--package", help="make this folder a submitter package for mlperf_logging.package_checker: results/<system>/<benchmark>/result_<i>.txt and systems/<system>.json"),
    submitter: str = typer.Option(None, "--submitter", help="with --package: the submitting organization (the systems' `submitter`)"),
    system: str = typer.Option(None, "--system", help="with --package: the system name; one system per (recipe, batch size), NAME_<recipe>_bs<N>, unless --recipe/--batch-size select one cell"),
    recipe: Optional[str] = typer.Option(None, "--recipe", help="with --package: only this recipe's cells"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="with --package: only this batch size's cells"),
    division: Optional[str] = typer.Option(None, "--division", help="with --package: closed or open, where the result files log no submission_division (they win; a contradicting --division is refused). Default: closed, or what an earlier export's system file says"),
    ruleset: Optional[str] = typer.Option(None, "--ruleset", help="with --package: the training ruleset to check against (default: the newest the installed checker knows)"),
) -> None:
    """Export a campaign's runs as a table (--parquet), as MLCommons results directories
    (--results) and/or as a submitter package (--package)."""
    if parquet is None and results is None and package is None:
        fail("export: give --parquet FILE, --results DIR, --package DIR, or several")
    package_flags = {"--submitter": submitter, "--system": system, "--recipe": recipe, "--batch-size": batch_size,
                     "--division": division, "--ruleset": ruleset}
    if package is None and any(v is not None for v in package_flags.values()):
        given = ", ".join(flag for flag, v in package_flags.items() if v is not None)
        fail(f"{given}: only with --package DIR")
    request = _package_request(submitter, system, recipe, batch_size, division, ruleset) if package else None
    for flag, path, folder in (("--parquet", parquet, False), ("--results", results, True), ("--package", package, True)):
        if path is not None:
            output_path_or_fail(path, flag, folder=folder)
    campaign = stored_campaign_or_fail(campaign_file)
    if parquet is not None:
        from rcpforge.analysis.load import write_parquet

        runs = load_runs_or_fail(campaign)
        write_parquet(runs, parquet)
        console.print(f"wrote {parquet} ({runs.num_rows} runs)")
    if results is not None:
        _export_results(campaign, campaign_file, results)
    if package is not None and request is not None:
        _export_package(campaign, campaign_file, package, request)


def _package_request(submitter, system, recipe, batch_size, division, ruleset):
    from rcpforge.orchestrator.package import PackageError, PackageRequest, training_rulesets

    for flag, value in (("--submitter", submitter), ("--system", system)):
        if value is None:
            fail(f"--package needs {flag} NAME (file-name safe: letters, digits, '_', '.', '+', '-')")
    known = training_rulesets()
    if not known:
        fail("the installed mlperf_logging has no training ruleset its package checker checks; "
             "install a newer one (pip install -U mlperf-logging)")
    try:
        return PackageRequest(submitter=submitter, system=system, ruleset=ruleset or known[-1],
                              division=division, recipe=recipe, batch_size=batch_size)
    except PackageError as err:
        fail(str(err))


def _export_results(campaign, campaign_file: Path, results: Path) -> None:
    from rcpforge.analysis.load import NoSuchCampaign
    from rcpforge.orchestrator.results_dirs import ResultsError, export_results

    try:
        cells = export_results(campaign.tracking_uri, campaign.name, results, campaign.run_dir,
                               campaign.config_filename)
    except (NoSuchCampaign, ResultsError) as err:
        fail(str(err))
    if not cells:
        fail(f"campaign {campaign.name} has no run with an outcome yet; run `rcpforge run {campaign_file}` first")
    for cell in cells:
        model = f"model {cell.model}, " if cell.model else ""
        console.print(f"{cell.folder}: {cell.files} result files ({model}{cell.recipe}, batch size {cell.batch_size})")
        if cell.left_out:
            err_console.print(f"note: {model}{cell.recipe} bs {cell.batch_size}: {cell.left_out} runs without an "
                              "outcome left out")
    console.print(
        f"check one with: rcpforge check DIR --rcps RCP_FILE --submission-runs {campaign.submission_runs}, or "
        f"python -m mlperf_logging.rcp_checker DIR --rcp_usage training --custom_rcps RCP_FILE "
        f"(benchmark {campaign.benchmark} must be known to the checker's submission_runs)",
        highlight=False,
    )


def _export_package(campaign, campaign_file: Path, package: Path, request) -> None:
    import shlex
    from dataclasses import replace

    from rcpforge.analysis.load import NoSuchCampaign
    from rcpforge.orchestrator.package import PackageError, export_package
    from rcpforge.orchestrator.results_dirs import ResultsError

    launch = campaign.launch
    request = replace(request, nodes=launch.nodes, accelerators_per_node=launch.processes_per_node * launch.gpus_per_process,
                      accelerator=launch.gpu_type or "")
    try:
        written = export_package(campaign.tracking_uri, campaign.name, campaign.benchmark, package, request,
                                 campaign.run_dir, campaign.config_filename)
    except NoSuchCampaign as err:
        fail(f"{err}; run `rcpforge run {campaign_file}` first")
    except (PackageError, ResultsError) as err:
        fail(str(err))
    for done in written.systems:
        source = "logged by its result files" if done.logged else "no result file logs submission_division"
        console.print(f"{done.folder}: {done.files} result files ({done.recipe}, batch size {done.batch_size}), "
                      f"system {done.system}, division {done.division} ({source})", highlight=False)
        if done.short:
            err_console.print(f"note: {done.recipe} bs {done.batch_size}: {done.files} result files, fewer than the "
                              f"{done.checker_runs} the MLCommons checker wants for benchmark {campaign.benchmark}; "
                              "run more seeds before submitting", highlight=False)
        if done.left_out:
            err_console.print(f"note: {done.recipe} bs {done.batch_size}: {done.left_out} runs without an outcome left out")
    for cell in written.no_outcome:
        err_console.print(f"note: {cell.recipe} bs {cell.batch_size}: no run has an outcome yet; not in the package")
    for name in written.kept_systems:
        err_console.print(f"note: {package}/systems/{name}.json is from an earlier export or yours and has no results now; "
                          "left in place (the checker checks it too: delete it if it is not wanted)")
    err_console.print(f"note: fill in the hardware and software fields left empty in {package}/systems/*.json; "
                      "a later export keeps them. A submission also carries its training code under "
                      f"{package}/benchmarks/{campaign.benchmark}/ (the checker does not read it)")
    if not written.benchmark_checked:
        err_console.print(f"note: benchmark {campaign.benchmark} is not one of training ruleset {request.ruleset}'s, so the "
                          "package checker skips its result files and checks the layout and system files only")
    else:
        _compliance(written, request.ruleset, package)
    console.print(f"check it with: python -m mlperf_logging.package_checker {shlex.quote(str(package))} training "
                  f"{request.ruleset}", highlight=False)


def _compliance(written, ruleset: str, package: Path) -> None:
    """What the package checker's compliance step will refuse, per result file, before it runs."""
    from rcpforge.orchestrator.package import compliance_refusals

    for files, refusals in compliance_refusals(written, ruleset):
        names = ", ".join(str(f.relative_to(package)) for f in files[:3]) + (f" and {len(files) - 3} more"
                                                                          if len(files) > 3 else "")
        err_console.print(f"compliance ({ruleset}): the checker will refuse {names}: {'; '.join(refusals)}",
                          highlight=False, markup=False, soft_wrap=True)
