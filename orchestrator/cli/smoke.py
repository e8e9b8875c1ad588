"""`rcpforge run --smoke`'s console: the smoke runs' progress, then a block per
configuration, a line per finding (orchestrator/smoke.py, smoke_findings.py)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from rcpforge.orchestrator.cli.app import EXIT_FAILED_CHECK, console, err_console, fail

MARK = {True: "ok     ", False: "MISSING"}


def smoke_or_fail(campaign, campaign_file: Path, evals: int, wall_s: float, ruleset: str, workers: int | None,
                  detach: bool, retry_failed: bool) -> None:
    from rcpforge.cluster.backend import BackendError
    from rcpforge.orchestrator.campaign import CampaignBusy
    from rcpforge.orchestrator.progress import RunProgress
    from rcpforge.orchestrator.smoke import run_smoke
    from rcpforge.orchestrator.tracking import TrackingUnavailable
    from rcpforge.sweeps.secrets import MissingSecret
    from rcpforge.trainers.contract.mllog.compliance import compliance_rulesets

    if detach or retry_failed:
        fail(f"--smoke: not with {'--detach' if detach else '--retry-failed'} (a smoke waits for its runs and "
             "starts afresh each time); drop one of the two")
    if ruleset not in (known := compliance_rulesets()):
        fail(f"--smoke-ruleset {ruleset!r}: the installed compliance checker has rules for {', '.join(known)}")
    progress = RunProgress(console)
    try:
        smoke = run_smoke(campaign, evals=evals, wall_s=wall_s, ruleset=ruleset, workers=workers,
                          on_event=progress.on_event, on_plan=progress.on_plan)
    except (CampaignBusy, BackendError, TrackingUnavailable, MissingSecret) as err:
        fail(escape(str(err)))
    except KeyboardInterrupt:
        progress.close()
        err_console.print("interrupted: the smoke's runs in flight were stopped; nothing of the campaign changed")
        raise typer.Exit(130) from None
    finally:
        progress.close()
    _print(smoke, campaign, campaign_file)


def _print(smoke, campaign, campaign_file: Path) -> None:
    out = [f"smoke of campaign {campaign.name}: {len(smoke.runs)} configurations, one run each with at most "
           f"{smoke.campaign.budget.max_tokens:,} tokens, recorded as campaign {smoke.campaign.name} (never counted "
           f"as the campaign's runs); checked against the {smoke.ruleset} rules"]
    for run in smoke.runs:
        spec = run.spec
        model = f"model {spec.model}, " if spec.model else ""
        out.append(f"{model}{spec.recipe}, batch size {spec.batch_size} (run {spec.run_name}):")
        for finding in run.findings:
            mark = "note   " if finding.ok and finding.note else MARK[finding.ok]
            out.append(f"  {mark} {finding.what:<10} {finding.text}")
    failing = [run for run in smoke.runs if not run.passed]
    if smoke.stopped:
        out.append(f"the smoke stopped on a configuration error: {smoke.stopped}")
    if failing:
        out.append(f"smoke: {len(failing)} of {len(smoke.runs)} configurations have something the checkers or the "
                   f"campaign will refuse (MISSING above); fix it, then `rcpforge run --smoke {campaign_file}` again")
    else:
        out.append(f"smoke: nothing missing; `rcpforge run {campaign_file}` launches the campaign")
    console.print("\n".join(out), highlight=False, markup=False, soft_wrap=True)
    if failing:
        raise typer.Exit(EXIT_FAILED_CHECK)
