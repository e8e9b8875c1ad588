"""The campaign engine: read the ledger, plan (the desired runs minus the ledger,
`orchestrator/ledger.py`), launch, follow, retry.

A fixed campaign desires every run it expands to; an adaptive one (`adaptive:`) runs
look by look: the runs that its looks ask for (`orchestrator/adaptive.py`, a
pure function of the ledger), then, once all of them have an outcome, the next look's,
until every cell has stopped. One orchestrator at a time per campaign (a lock file); a
failed attempt is launched again while the run has attempts left, and a key whose cluster
job is still live is followed until the store records its outcome.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections import Counter, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from typing import Callable, Collection, Iterator

from rcpforge.cluster.backend import Backend, BackendError, Job
from rcpforge.orchestrator.adaptive import AdaptiveState, campaign_looks, look_specs
from rcpforge.orchestrator.billing import SETTLE_WAIT_S, bill_slurm_runs
from rcpforge.orchestrator.backends import backend_class, check_backend, ledger_and_states, live_of, running_backend
from rcpforge.orchestrator.execute import assignment_for, execute_run, has_outcome, note_requeue
from rcpforge.orchestrator.failfast import FailFast
from rcpforge.orchestrator.ledger import LedgerEntry, Plan, make_plan
from rcpforge.orchestrator.tracking import Tracking, campaign_tags
from rcpforge.orchestrator.store_owner import OtherStore, claim_runs_folder
from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.secrets import launch_secrets
from rcpforge.sweeps.spec import Campaign
from rcpforge.trainers.contract import ErrorKind, RunResult, RunSpec, RunStatus


FOLLOW_POLL_S = 2.0
# Runs made on the ledger at once, ahead of their launch, where slots free up one by one
# on a database store: one transaction for the lot, about 1 ms a run, against a
# create_run's 15-20 ms in the orchestrator's serial path. Each is SCHEDULED until it
# starts (then its start time becomes its own), so a campaign stopped meanwhile finds
# them queued, never started, and launches them as first attempts.
MADE_AHEAD = 64


class CampaignBusy(RuntimeError):
    pass


@dataclass
class CampaignSummary:
    launched: int = 0
    statuses: Counter = field(default_factory=Counter)
    plan: Plan | None = None
    detached: bool = False  # submitted and left to the cluster
    adaptive: AdaptiveState | None = None  # where an adaptive campaign's looks stand
    # Why the campaign stopped launching: a configuration error (orchestrator/failfast.py)
    stopped: str | None = None
    not_launched: int = 0  # runs it then left unlaunched
    cancelled: int = 0  # runs in flight it then stopped


Event = Callable[[str, RunSpec, "RunResult | None"], None]
Look = Callable[[AdaptiveState, Plan], None]


def desired_runs(campaign: Campaign, ledger: dict[str, LedgerEntry],
                 retry_failed: bool = False) -> tuple[list[RunSpec], AdaptiveState | None]:
    """Every run of a fixed campaign; of an adaptive one, the runs its looks ask for so far."""
    if campaign.adaptive is None:
        return expand(campaign), None
    looked = campaign_looks(campaign, ledger, retry_failed)
    return look_specs(campaign, looked), looked


@contextmanager
def campaign_lock(campaign: Campaign, activity: str = "run", busy: type[Exception] = CampaignBusy) -> Iterator[None]:
    """One rcpforge process per campaign and activity ("run", "tune"): it alone may treat
    the campaign's unfinished runs or trials as its own."""
    lock_dir = campaign.base_dir / ".rcpforge"
    lock_dir.mkdir(parents=True, exist_ok=True)
    path = lock_dir / (f"{campaign.name}.lock" if activity == "run" else f"{campaign.name}.{activity}.lock")
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            verb = {"run": "run", "tune": "tuned"}.get(activity, activity)
            raise busy(
                f"campaign {campaign.name} is already being {verb} by another rcpforge process "
                f"(lock {path}); wait for it or stop it first"
            ) from None
        fh.write(str(os.getpid()))
        fh.flush()
        try:  # under the lock: two first runs with two stores cannot both claim the folder
            claim_runs_folder(campaign.runs_folder, campaign.tracking_uri)
        except OtherStore as err:
            raise busy(str(err)) from None
        yield



def run_campaign(
    campaign: Campaign,
    *,
    workers: int | None = None,
    retry_failed: bool = False,
    on_event: Event | None = None,
    on_plan: Callable[[Plan], None] | None = None,
    detach: bool = False,
    on_look: Look | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> CampaignSummary:
    if detach and not backend_class(campaign.backend.kind).jobs_outlive_process:
        raise BackendError(
            f"--detach needs backend.kind slurm, not {campaign.backend.kind}: local workers and "
            "Ray tasks stop with the orchestrator"
        )
    check_backend(campaign)
    secrets = launch_secrets(campaign, os.environ)  # a variable missing: one line, nothing launched
    with campaign_lock(campaign):
        tracking = Tracking(campaign.tracking_uri, campaign.tracking.retry_s,
                            campaign_tags(campaign.benchmark, campaign.submission_runs, campaign.reference))
        experiment_id = tracking.open_experiment(campaign.name, campaign.artifact_dir)
        bill_slurm_runs(campaign, tracking, experiment_id, 0.0, on_notice)  # runs ended since the last `run`
        ledger, states = ledger_and_states(lambda: tracking.ledger(experiment_id))
        max_attempts = campaign.backend.max_attempts
        specs, looked = desired_runs(campaign, ledger, retry_failed)
        plan = make_plan(specs, ledger, max_attempts, retry_failed, live_of(states))
        if on_plan:
            on_plan(plan)
        summary = CampaignSummary(plan=plan, adaptive=looked)
        if looked is not None and on_look:
            on_look(looked, plan)
        if not plan.launch and not plan.elsewhere:
            return summary
        # bad settings fail as the backend starts, before any submission
        with running_backend(campaign, workers) as backend:
            run = _Launcher(campaign, tracking, experiment_id, ledger, backend, summary, on_event, on_notice)
            run.secrets = secrets
            try:
                run.start(plan.launch)
                if detach:
                    backend.close()  # every array sent, however long the controller makes it wait, then filed
                    run.tell_notices()
                run.record_jobs()
                if detach:
                    summary.detached = True
                    summary.not_launched = len(run.waiting)  # beyond the cluster's limits: the next run sends them
                    return summary
                run.follow(plan.elsewhere)
                run.until_done()
                if campaign.adaptive is not None and summary.stopped is None:
                    _next_looks(run, campaign, max_attempts, summary, on_look)
                bill_slurm_runs(campaign, tracking, experiment_id, SETTLE_WAIT_S, on_notice)
            except (KeyboardInterrupt, BackendError):
                # Ctrl-C, or the cluster refused the jobs for good mid-campaign: what is in
                # flight is stopped and put back pending, nothing counted against it.
                run.interrupted()
                raise
        return summary


def _next_looks(run: _Launcher, campaign: Campaign, max_attempts: int, summary: CampaignSummary,
                on_look: Look | None) -> None:
    """Look after look: once every run asked for has an outcome, the looks say what next.
    Failed runs are retried within their attempts only: --retry-failed served the first."""
    while True:
        ledger, states = ledger_and_states(lambda: run.tracking.ledger(run.experiment_id))
        specs, looked = desired_runs(campaign, ledger)
        plan = make_plan(specs, ledger, max_attempts, False, live_of(states))
        summary.adaptive = looked
        if looked is not None and on_look:
            on_look(looked, plan)
        if (not plan.launch and not plan.elsewhere) or summary.stopped is not None:
            return
        run.ledger = ledger
        run.start(plan.launch)
        run.record_jobs()
        run.follow(plan.elsewhere)
        run.until_done()


class _Launcher:
    """Launches attempts, collects their results, retries failed ones."""

    def __init__(self, campaign: Campaign, tracking: Tracking, experiment_id: str,
                 ledger: dict[str, LedgerEntry], backend: Backend, summary: CampaignSummary,
                 on_event: Event | None, on_notice: Callable[[str], None] | None = None):
        self.campaign, self.tracking, self.experiment_id = campaign, tracking, experiment_id
        self.ledger, self.backend, self.summary = ledger, backend, summary
        self.notify = on_event or (lambda *_: None)
        self.on_notice = on_notice or (lambda _: None)
        self.max_attempts = campaign.backend.max_attempts
        self.runs: dict[str, tuple[RunSpec, str, int]] = {}  # task id -> (spec, run id, attempt)
        self.recorded: set[tuple[str, str]] = set()
        self.followed: dict[str, RunSpec] = {}  # run key -> spec, live elsewhere
        self.next_check = 0.0
        self.waiting: deque[RunSpec] = deque()  # first attempts not launched yet
        self.makes_ahead = tracking.registers_in_bulk  # a database store
        self.made_ahead: set[str] = set()  # run keys this launcher made ahead, unlogged
        self.failfast = FailFast()
        # run key -> the run's free attempts (`LedgerEntry.free_attempts`), read from the
        # ledger as it is launched or followed: its budget is the store's, not this process's
        self.free: dict[str, int] = {}
        self.secrets: dict[str, dict[str, str]] = {}  # model -> its runs' Job.secret_env (sweeps/secrets.py)

    def start(self, specs: list[RunSpec]) -> None:
        """First attempts: all at once on a backend that sets no limit (Slurm: its queue is
        the cluster's, and a submitted job must be on the ledger), as slots free up on a
        backend that says how many runs to submit now (local: runs that would start now, so a run's MLflow start
        is its own start; Ray: the cluster's slots and as many again), so a large campaign
        starts at once and collects results from its first run."""
        self.waiting.extend(specs)
        if self.backend.free_slots(self.campaign.gang) is None:
            self.register([s for s in specs if s.run_key not in self.ledger])
        self.fill()

    def register(self, specs: list[RunSpec]) -> None:
        """Runs all submitted at once (Slurm) are made on the ledger first, in bulk."""
        if not specs:
            return
        made = self.tracking.create_runs(self.experiment_id, specs)
        for spec in specs:
            self.ledger[spec.run_key] = LedgerEntry(made[spec.run_key], spec.run_key, RunStatus.pending, 0,
                                                    recipe=spec.recipe, batch_size=spec.batch_size, model=spec.model)

    def fill(self) -> None:
        while self.waiting and self.has_room():
            if self.makes_ahead and self.waiting[0].run_key not in self.ledger:
                self.make_ahead()
            self.first_attempt(self.waiting.popleft())

    def has_room(self) -> bool:
        """The backend takes another first attempt now: it sets no limit, has free
        slots, or runs nothing (a run bigger than its free slots still gets its turn)."""
        free = self.backend.free_slots(self.campaign.gang)
        return free is None or free > 0 or not self.backend.in_flight()

    def make_ahead(self) -> None:
        """The next runs to launch, made in bulk (`MADE_AHEAD`)."""
        upcoming = [s for s in islice(self.waiting, MADE_AHEAD) if s.run_key not in self.ledger]
        self.register(upcoming)
        self.made_ahead.update(s.run_key for s in upcoming)

    def first_attempt(self, spec: RunSpec) -> None:
        entry = self.ledger.get(spec.run_key)
        # A backend that starts a job as it is submitted has a slot free for it (`fill`):
        # the run starts as it is made.
        starts_now = self.backend.starts_at_submit
        run_id = self.tracking.take_up(self.experiment_id, spec, entry, starts_now=starts_now)
        # A run made ahead by this launcher has nothing logged, unless the backend may run
        # the job again under the same assignment (a Ray retry, a Slurm requeue): then its
        # worker reads back.
        once = not self.backend.reruns_jobs
        unlogged = once and spec.run_key in self.made_ahead
        self.free[spec.run_key] = entry.free_attempts if entry is not None else 0
        self.launch(spec, run_id, (entry.attempts if entry else 0) + 1,
                    fresh=starts_now and once and entry is None, unlogged=unlogged)

    def launch(self, spec: RunSpec, run_id: str, attempt: int, fresh: bool = False, unlogged: bool = False) -> None:
        self.runs[spec.run_key] = (spec, run_id, attempt)
        job = assignment_for(self.campaign, spec, run_id, attempt, fresh=fresh, unlogged=unlogged and attempt == 1,
                             artifact_uri=self.tracking.artifact_uris.get(run_id))
        self.backend.submit(Job(spec.run_key, execute_run, (job,), on_requeue=note_requeue, gang=self.campaign.gang,
                                final=has_outcome, secret_env=self.secrets.get(spec.model, {})))
        self.summary.launched += 1
        self.notify("start", spec, None)

    def record_jobs(self) -> None:
        """File each cluster job id on its run, so that nobody launches the key again
        while the job is live."""
        new = []
        for task_id, job_id in self.backend.job_ids().items():
            spec, run_id, _ = self.runs[task_id]
            if (run_id, job_id) not in self.recorded:
                new.append((run_id, job_id))
        if new:
            self.tracking.set_backend_jobs([(run_id, f"slurm:{job_id}") for run_id, job_id in new])
            self.recorded.update(new)

    def follow(self, specs: list[RunSpec]) -> None:
        self.followed = {s.run_key: s for s in specs}
        self.free.update({s.run_key: self.ledger[s.run_key].free_attempts for s in specs if s.run_key in self.ledger})

    def until_done(self) -> None:
        while self.backend.in_flight() or self.followed or self.waiting:
            self.fill()
            for done in self.backend.wait(timeout=1.0):
                if done.task_id not in self.runs:  # a job of the same wakeup, once `stop` took them all
                    continue
                spec, run_id, attempt = self.runs.pop(done.task_id)
                if done.error is not None:
                    result = RunResult(status=RunStatus.failed, error=done.error)
                    self.tracking.mark_failed(run_id, done.error, spec)
                else:
                    result = RunResult.model_validate(done.value)
                self.settle(spec, run_id, attempt, result)
            self.fill()
            self.record_jobs()
            self.tell_notices()
            if self.followed:
                self.check_followed()

    def tell_notices(self) -> None:
        """The backend's lines for the log (a controller that said "not now")."""
        for line in self.backend.take_notices():
            self.on_notice(line)

    def settle(self, spec: RunSpec, run_id: str, attempt: int, result: RunResult) -> None:
        self.notify("end", spec, result)
        stop = None if self.summary.stopped else self.failfast.configuration(spec, run_id, attempt, result)
        if stop is not None:
            self.summary.statuses[result.status.value] += 1
            self.stop(*stop)
        elif result.status is RunStatus.failed and attempt - self.free.get(spec.run_key, 0) < self.max_attempts:
            self.notify("retry", spec, result)
            self.launch(spec, run_id, attempt + 1)
        else:
            self.summary.statuses[result.status.value] += 1

    def stop(self, reason: str, misconfigured: list[str]) -> None:
        """A configuration error: no retry, no new launch; the runs in flight are stopped
        (they run the same configuration: each would fail alike, or spend its hours only to
        be run again after the fix) and recorded `cancelled`, a failure that is no
        outcome, which the next `rcpforge run` launches again with its attempts: the
        misconfigured runs' attempts and the cancelled ones are recorded free
        (`rcpforge.free_attempts`), so that the budget a later run reads is the same
        whichever orchestrator reads it."""
        self.summary.stopped = reason
        self.summary.not_launched = len(self.waiting)
        self.waiting.clear()
        self.followed.clear()  # live elsewhere (an earlier orchestrator's): its own to finish
        free = self.cancel_in_flight(f"cancelled: the campaign stopped on a configuration error ({reason})",
                                     spare=set(misconfigured))
        # every attempt of a misconfigured run was the configuration's
        free += [(run_id, self.tracking.recorded(run_id)[1]) for run_id in misconfigured]
        self.tracking.set_error_kinds(misconfigured, ErrorKind.configuration)
        self.tracking.set_free_attempts(free)

    def interrupted(self) -> None:
        """Ctrl-C: the runs in flight are stopped and put back `pending`, their attempt
        free, not left `running` with no process behind them; the next `rcpforge run`
        launches them again."""
        self.waiting.clear()
        self.tracking.set_free_attempts(self.cancel_in_flight(None))

    def cancel_in_flight(self, why: str | None, spare: Collection[str] = ()) -> list[tuple[str, int]]:
        """Stop every run in flight and record it `cancelled` with `why` (None: `pending`
        again); the attempts to record free, of each run not in `spare`: every recorded
        attempt but those the run was charged before this one (the cancelled attempt
        counts only where its worker had started it)."""
        in_flight, self.runs = list(self.runs.values()), {}
        self.backend.cancel()
        free = []
        for spec, run_id, attempt in in_flight:
            status, attempts = self.tracking.recorded(run_id)
            if RunStatus(status or "pending").is_outcome:  # it ended meanwhile
                continue
            if why is None:
                self.tracking.mark_pending(run_id, spec)
            else:
                self.tracking.mark_failed(run_id, why, spec, kind=ErrorKind.cancelled)
            self.summary.cancelled += 1
            if run_id not in spare:
                charged_before = attempt - 1 - self.free.get(spec.run_key, 0)
                free.append((run_id, attempts - charged_before))
        return free

    def check_followed(self) -> None:
        # The ledger and the cluster are read every few seconds, not on every wakeup.
        if not self.backend.in_flight():
            time.sleep(max(0.0, self.next_check - time.monotonic()))
        if time.monotonic() < self.next_check:
            return
        self.next_check = time.monotonic() + FOLLOW_POLL_S
        ledger, states = ledger_and_states(lambda: self.tracking.ledger(self.experiment_id), among=self.followed)
        live = live_of(states)
        for key in [k for k in self.followed if k not in live]:
            spec, entry = self.followed.pop(key), ledger[key]
            if entry.status.is_outcome:
                self.settle(spec, entry.run_id, entry.attempts, self.tracking.result_of(entry.run_id))
                continue
            error = f"cluster job {entry.backend_job} ended without recording an outcome"
            self.tracking.mark_failed(entry.run_id, error)
            self.settle(spec, entry.run_id, entry.attempts, RunResult(status=RunStatus.failed, error=error))
        self.record_jobs()
