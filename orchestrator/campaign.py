"""The campaign engine: plan (desired runs minus the ledger), launch, follow, retry.

The ledger is the tracking store itself: one MLflow run per run key, whose status tag
says whether the key has an outcome. A key with an outcome is never launched again; a
key whose run failed is retried until it has `backend.max_attempts` attempts. One
orchestrator at a time per campaign (a lock file), so a key is never run twice at once.
"""

from __future__ import annotations

import fcntl
import os
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from cluster.backend import Backend, Job
from cluster.local import LocalBackend
from orchestrator.execute import execute_run
from orchestrator.tracking import LedgerEntry, Tracking
from sweeps.expand import expand
from sweeps.spec import Campaign
from trainers.contract import RunResult, RunSpec, RunStatus


class CampaignBusy(RuntimeError):
    pass


@dataclass
class Plan:
    specs: list[RunSpec]
    launch: list[RunSpec]
    done: int  # keys with an outcome
    gave_up: list[RunSpec]  # failed keys with no attempts left


@dataclass
class CampaignSummary:
    launched: int = 0
    statuses: Counter = field(default_factory=Counter)
    plan: Plan | None = None


Event = Callable[[str, RunSpec, "RunResult | None"], None]


def make_plan(specs: list[RunSpec], ledger: dict[str, LedgerEntry], max_attempts: int, retry_failed: bool) -> Plan:
    launch, gave_up, done = [], [], 0
    for spec in specs:
        entry = ledger.get(spec.run_key)
        if entry is None:
            launch.append(spec)
        elif entry.status.is_outcome:
            done += 1
        elif entry.status is RunStatus.failed and entry.attempts >= max_attempts and not retry_failed:
            gave_up.append(spec)
        else:
            launch.append(spec)
    return Plan(specs, launch, done, gave_up)


@contextmanager
def campaign_lock(campaign: Campaign) -> Iterator[None]:
    lock_dir = campaign.base_dir / ".rcpforge"
    lock_dir.mkdir(parents=True, exist_ok=True)
    path = lock_dir / f"{campaign.name}.lock"
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CampaignBusy(
                f"campaign {campaign.name} is already being run by another rcpforge process "
                f"(lock {path}); wait for it or stop it first"
            ) from None
        fh.write(str(os.getpid()))
        fh.flush()
        yield


def make_backend(campaign: Campaign, workers: int | None) -> Backend:
    return LocalBackend(workers or campaign.backend.workers)


def run_campaign(
    campaign: Campaign,
    *,
    workers: int | None = None,
    retry_failed: bool = False,
    on_event: Event | None = None,
    on_plan: Callable[[Plan], None] | None = None,
) -> CampaignSummary:
    notify = on_event or (lambda *_: None)
    with campaign_lock(campaign):
        tracking = Tracking(campaign.tracking_uri)
        experiment_id = tracking.open_experiment(campaign.name, campaign.artifact_dir)
        ledger = tracking.ledger(experiment_id)
        max_attempts = campaign.backend.max_attempts
        plan = make_plan(expand(campaign), ledger, max_attempts, retry_failed)
        if on_plan:
            on_plan(plan)
        summary = CampaignSummary(plan=plan)
        if not plan.launch:
            return summary

        runs: dict[str, tuple[RunSpec, str, int]] = {}  # task id -> (spec, run id, attempt)
        backend = make_backend(campaign, workers)
        try:
            def launch(spec: RunSpec, run_id: str, attempt: int) -> None:
                runs[spec.run_key] = (spec, run_id, attempt)
                args = (spec.model_dump_json(), campaign.tracking_uri, run_id, attempt, str(campaign.run_dir(spec)),
                        campaign.benchmark, str(campaign.base_dir.resolve()))
                backend.submit(Job(spec.run_key, execute_run, args))
                summary.launched += 1
                notify("start", spec, None)

            for spec in plan.launch:
                entry = ledger.get(spec.run_key)
                run_id = entry.run_id if entry else tracking.create_run(experiment_id, spec)
                launch(spec, run_id, (entry.attempts if entry else 0) + 1)

            while backend.in_flight():
                for done in backend.wait(timeout=1.0):
                    spec, run_id, attempt = runs.pop(done.task_id)
                    if done.error is not None:
                        result = RunResult(status=RunStatus.failed, error=done.error)
                        tracking.mark_failed(run_id, done.error)
                    else:
                        result = RunResult.model_validate(done.value)
                    notify("end", spec, result)
                    if result.status is RunStatus.failed and attempt < max_attempts:
                        notify("retry", spec, result)
                        launch(spec, run_id, attempt + 1)
                    else:
                        summary.statuses[result.status.value] += 1
        except BaseException:
            backend.cancel()
            raise
        finally:
            backend.close()
        return summary
