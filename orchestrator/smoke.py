"""`rcpforge run --smoke`: one short run of each distinct configuration (model x recipe x
batch size, at the first seed), on the campaign's backend, before the campaign spends its
hours, and what the MLCommons checkers will say of what each run wrote.

The smoke runs are a campaign of their own, `<name>.smoke-<UTC time>`, in the same store
and beside the campaign's runs folder: never runs of the campaign, so no analysis counts
them, and every smoke starts afresh (a fixed program is smoked again, not resumed). Each
gets a budget of a few evals (`--smoke-evals`: max_tokens = evals x eval_every_tokens)
and, for a program, a wall-time cap (`--smoke-wall-s`), and one attempt.

What is checked (orchestrator/smoke_findings.py), from the run's outcome, its folder and
its result file:
- the outcome: a failed run is named with its reason;
- argv: every input file it names is there (trainers/command/inputs.py's rule);
- output: the result file, the program's output log, where its MLLOG came from;
- the metric: `target.metric` (trainer.metric_key) on eval lines, else the eval keys seen;
- the unit: the field the RCP checker reads the value to converge from, for the
  campaign's benchmark (epoch_num, or samples_count), on every eval line;
- the benchmark: `submission_benchmark` logged, and the campaign's;
- disclosure: every key the compliance checker's rules require for the ruleset
  (default 6.1.0, the first with the precision and parallelism keys): logged by the
  program, added by rcpforge (config_filename, a recipe label's keys), or missing or
  rejected (trainers/contract/mllog/compliance.py runs the checker itself);
- pace: seconds per eval, for sizing the campaign.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rcpforge.sweeps.spec import Campaign
from rcpforge.trainers.contract import RunResult, RunSpec

SMOKE_EVALS = 3
SMOKE_WALL_S = 600.0
_NAME_ROOM = 80  # of the 100 characters a campaign's name may have; the rest is the stamp


@dataclass
class SmokeRun:
    spec: RunSpec
    launch: dict  # the dry run's account of its launch (orchestrator/dryrun.py)
    result: RunResult | None = None  # None: not launched (the smoke stopped first)
    findings: list = field(default_factory=list)  # smoke_findings.Finding

    @property
    def passed(self) -> bool:
        return all(f.ok for f in self.findings)


@dataclass
class Smoke:
    campaign: Campaign  # the smoke's own campaign
    runs: list[SmokeRun]
    ruleset: str
    stopped: str | None = None  # a configuration error that stopped the smoke

    @property
    def passed(self) -> bool:
        return all(run.passed for run in self.runs)


def smoke_campaign(campaign: Campaign, evals: int = SMOKE_EVALS, wall_s: float = SMOKE_WALL_S,
                   stamp: str | None = None) -> Campaign:
    """The campaign's smoke: its configurations once each, at a budget of `evals` evals."""
    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    budget = campaign.budget.model_copy(update={"max_tokens": min(campaign.budget.max_tokens,
                                                                  evals * campaign.budget.eval_every_tokens)})
    trainer = dict(campaign.trainer)
    if "max_wall_s" in trainer:  # a program's cap on one attempt (the command trainer's)
        trainer["max_wall_s"] = min(float(trainer["max_wall_s"]), wall_s)
    return campaign.model_copy(update={
        "name": f"{campaign.name[:_NAME_ROOM]}.smoke-{stamp}", "budget": budget, "trainer": trainer,
        "seeds": {"default": 1}, "adaptive": None, "tune": None,
        # the benchmark stays the campaign's (a name-made one would follow the new name)
        "rcp": campaign.rcp.model_copy(update={"benchmark": campaign.benchmark}),
        "backend": campaign.backend.model_copy(update={"max_attempts": 1}),
    })


def run_smoke(campaign: Campaign, *, evals: int = SMOKE_EVALS, wall_s: float = SMOKE_WALL_S,
              ruleset: str, workers: int | None = None, on_event: Callable | None = None,
              on_plan: Callable | None = None) -> Smoke:
    """Launch the smoke runs, then check each (the outcome of a launch the campaign's
    `run` would make; a configuration error stops the rest as it would the campaign)."""
    from rcpforge.orchestrator.campaign import run_campaign
    from rcpforge.orchestrator.dryrun import describe
    from rcpforge.orchestrator.smoke_findings import findings
    from rcpforge.sweeps.expand import expand

    smoke = smoke_campaign(campaign, evals, wall_s)
    runs = {spec.run_key: SmokeRun(spec, describe(smoke, spec)) for spec in expand(smoke)}

    def on_result(kind: str, spec: RunSpec, result: RunResult | None) -> None:
        if result is not None and kind != "retry" and spec.run_key in runs:
            runs[spec.run_key].result = result
        if on_event is not None:
            on_event(kind, spec, result)

    summary = run_campaign(smoke, workers=workers, on_event=on_result, on_plan=on_plan)
    out = Smoke(smoke, list(runs.values()), ruleset, summary.stopped)
    for run in out.runs:
        run.findings = findings(smoke, run, ruleset)
    return out

