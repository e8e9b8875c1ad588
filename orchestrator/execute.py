"""The unit of work a backend executes: one attempt of one RunSpec (a `RunAssignment`),
tracked in its MLflow run.

Runs in a worker (a local process, a Ray task, a Slurm job). A trainer's exception is a
result (`failed`, with the traceback), never an exception out of here.

Every run leaves an MLLOG `result.txt` in its own folder, logged as an MLflow artifact:
written here around trainers that do not log MLLOG themselves, or by the trainer (the
`command` kind keeps its process's MLLOG lines)."""

from __future__ import annotations

import signal
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from orchestrator.stall import Stalled, StallGuard
from orchestrator.tracking import DEFAULT_RETRY_S, RunLog
from sweeps.spec import Campaign
from trainers.contract import EvalPoint, RunResult, RunSpec, RunStatus, StopRun
from trainers.contract.mllog.write import RESULT_FILE, MllogReporter, MllogWriter
from trainers.registry import get_trainer, writes_mllog


@dataclass
class RunContext:
    """The reporter a trainer gets: the MLflow run log plus where the run belongs.
    `benchmark` and `campaign_dir` are extras beyond the Reporter protocol, read by
    trainers that need them (`getattr(reporter, "campaign_dir", None)`). A `watch`
    sees each eval point once it is logged and may raise `StopRun` (a tuning pruner)."""

    log: RunLog
    output_dir: Path
    benchmark: str
    campaign_dir: Path
    watch: Callable[[EvalPoint], None] | None = None
    stall: StallGuard | None = None

    def eval_point(self, point: EvalPoint) -> None:
        if self.stall is None:
            self.log.eval_point(point)
        else:
            with self.stall.paused():  # re-armed on the way out: this point is progress
                self.log.eval_point(point)
        if self.watch is not None:
            self.watch(point)

    def idle(self) -> None:
        """The trainer has nothing to do for now: a chance to write pending points."""
        if self.stall is None or not self.log.flush_due():
            self.log.flush_if_due()
            return
        remaining = signal.getitimer(signal.ITIMER_REAL)[0] if self.stall.active else 0.0
        with self.stall.paused():
            self.log.flush()
        if remaining:  # a flush is not the trainer's progress: give back only what it had
            signal.setitimer(signal.ITIMER_REAL, remaining)


@dataclass(frozen=True)
class RunAssignment:
    """One attempt of one run, as the launcher hands it to a backend: picklable, the
    job's one argument. `benchmark` names the MLLOG file's benchmark (default: the
    campaign's name); `campaign_dir` is where a trainer resolves relative paths."""

    spec_json: str
    tracking_uri: str
    run_id: str
    attempt: int
    output_dir: str
    benchmark: str | None = None
    campaign_dir: str | None = None
    stall_timeout_s: float | None = None
    tracking_retry_s: float = DEFAULT_RETRY_S


def assignment_for(campaign: Campaign, spec: RunSpec, run_id: str, attempt: int,
                   output_dir: Path | None = None) -> RunAssignment:
    """The assignment of a campaign's run (a tune trial's runs give their own folder)."""
    return RunAssignment(
        spec.model_dump_json(), campaign.tracking_uri, run_id, attempt, str(output_dir or campaign.run_dir(spec)),
        campaign.benchmark, str(campaign.base_dir.resolve()), campaign.backend.stall_timeout_s,
        campaign.tracking.retry_s,
    )


def execute_run(job: RunAssignment, watch: Callable[[EvalPoint], None] | None = None) -> dict:
    """Run one attempt; `watch` sees each eval point once logged (a tuning pruner)."""
    spec = RunSpec.model_validate_json(job.spec_json)
    log = RunLog(job.tracking_uri, job.run_id, spec.target.metric, Path(job.output_dir), retry_s=job.tracking_retry_s)
    log.start(job.attempt)
    stall = StallGuard(job.stall_timeout_s)
    context = RunContext(log, Path(job.output_dir), job.benchmark or spec.campaign,
                         Path(job.campaign_dir or Path.cwd()), watch, stall)
    writer = None
    start = time.monotonic()
    try:
        trainer = get_trainer(spec.trainer_kind)
        reporter = context
        if not writes_mllog(trainer):
            writer = MllogWriter(context.output_dir / RESULT_FILE, context.benchmark, spec)
            reporter = MllogReporter(context, writer, spec.target.metric)
        with stall:
            result = trainer.train(spec, reporter)
    except Stalled as stalled:
        result = RunResult(status=RunStatus.failed, wall_s=time.monotonic() - start, error=str(stalled))
    except StopRun as stop:
        result = RunResult(
            status=RunStatus.pruned,
            tokens_trained=stop.point.tokens,
            final_metric=stop.point.metrics.get(spec.target.metric),
            wall_s=time.monotonic() - start,
            error=f"pruned: {stop.reason}",
        )
    except Exception:  # noqa: BLE001 - any trainer error is recorded as the run's failure
        result = RunResult(status=RunStatus.failed, error=traceback.format_exc())
    if writer is not None:
        result = _stop_writer(writer, result)
    log.log_artifact(context.output_dir / RESULT_FILE)
    log.finish(result)
    return result.model_dump(mode="json")


def note_requeue(job: RunAssignment) -> None:
    """The job was preempted or hit its time limit and is requeued by the cluster: the
    run reads `preempted` (never an outcome) until the requeued job starts it again.
    A backend that requeues (Slurm) calls it, as the `Job`'s `on_requeue`, with the job's
    arguments; a short retry window, as the job is killed soon after
    (backend.signal_delay_s) and the requeue matters more."""
    from orchestrator.tracking import mark_preempted

    mark_preempted(job.tracking_uri, job.run_id, retry_s=_REQUEUE_NOTE_RETRY_S)


_REQUEUE_NOTE_RETRY_S = 20.0


def _stop_writer(writer: MllogWriter, result: RunResult) -> RunResult:
    """A run whose result.txt cannot be written whole (a full disk) is failed, whatever
    its training gave: a converged run without its MLLOG file is not a result."""
    try:
        writer.stop(result)
    except OSError as err:
        return RunResult(status=RunStatus.failed, wall_s=result.wall_s, tokens_trained=result.tokens_trained,
                         error=f"cannot write the run's files in {writer.path.parent}: {err}")
    return result
