"""The unit of work a backend executes: one attempt of one RunSpec (a `RunAssignment`),
tracked in its MLflow run.

A run that is a gang calls this once per gang task (`trainers/contract/gang.py`): task 0
is the reporter (MLflow, the MLLOG result file, the run's cost); every other task trains
with a reporter that keeps nothing, in its own `rank<N>/` folder under the run's.

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
from typing import TYPE_CHECKING, Callable

from rcpforge.orchestrator.stall import Stalled, StallGuard
from rcpforge.orchestrator.tracking import DEFAULT_RETRY_S, RunLog, run_params
from rcpforge.trainers.contract import EvalPoint, Reporter, RunResult, RunSpec, RunStatus, StopRun
from rcpforge.trainers.contract.gang import gang_task
from rcpforge.trainers.contract.mllog.read import facts_tags, run_facts, with_warning
from rcpforge.trainers.contract.mllog.write import RESULT_FILE, MllogReporter, MllogWriter, add_missing_disclosure
from rcpforge.trainers.contract.schema import (
    METRIC_CORE_HOURS,
    METRIC_GPU_HOURS,
    METRIC_TIME_TO_TRAIN,
    TAG_ACCELERATOR,
    TAG_WARNING,
)
from rcpforge.trainers.registry import get_trainer

if TYPE_CHECKING:  # the campaign's schema is the launcher's: a worker's job does not import it (yaml, pydantic models)
    from rcpforge.sweeps.spec import Campaign


@dataclass
class RunContext(Reporter):
    """The reporter a trainer gets: the MLflow run log plus where the run belongs (the
    Reporter's `benchmark` and `campaign_dir`). A `watch` sees each eval point once it
    is logged and may raise `StopRun` (a tuning pruner)."""

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
    # The run's gang, for its cost: processes x wall time, in GPU-hours when it has GPUs.
    processes: int = 1
    gpus_per_process: int = 0
    # What the launcher that made the run knows of it at this launch, each sparing the
    # worker a read of the store. None is the store's kind: the worker's RunLog picks its
    # own way to write (`tracking/writes.py`), and these hold on every store.
    # The run was made for this attempt and starts at once (a local first attempt): the
    # worker has nothing to read back or set (RunLog's `fresh`). A per-attempt fact: a
    # retry, a requeued job, a run an earlier orchestrator made get False and read back.
    fresh: bool = False
    # Where the run's artifacts go: the worker need not ask the store. The run's own,
    # but in hand only where this launcher made the run (None: the worker asks).
    artifact_uri: str | None = None
    # The launcher made the run ahead (queued, in bulk) for this first attempt, which only
    # this worker runs (a local one): nothing is logged on it yet (RunLog's `unlogged`).
    # Per-attempt as `fresh` is: no other attempt, nor a rerun of this one, has it.
    unlogged: bool = False
    # MLPerf's `config_filename` of the run's MLLOG: the campaign file's name.
    config_filename: str | None = None


def assignment_for(campaign: Campaign, spec: RunSpec, run_id: str, attempt: int,
                   output_dir: Path | None = None, fresh: bool = False,
                   artifact_uri: str | None = None, unlogged: bool = False) -> RunAssignment:
    """The assignment of a campaign's run (a tune trial's runs give their own folder)."""
    return RunAssignment(
        spec.model_dump_json(), campaign.tracking_uri, run_id, attempt, str(output_dir or campaign.run_dir(spec)),
        campaign.benchmark_of(spec.model), str(campaign.base_dir.resolve()), campaign.backend.stall_timeout_s,
        campaign.tracking.retry_s, campaign.launch.world_size, campaign.launch.gpus_per_process, fresh,
        artifact_uri, unlogged, campaign.config_filename,
    )


def execute_run(job: RunAssignment, watch: Callable[[EvalPoint], None] | None = None) -> dict:
    """Run one attempt; `watch` sees each eval point once logged (a tuning pruner)."""
    task = gang_task()
    if task != 0:
        return _train_unreported(job, task)
    spec = RunSpec.model_validate_json(job.spec_json)
    log = RunLog(job.tracking_uri, job.run_id, spec.target.metric, Path(job.output_dir), retry_s=job.tracking_retry_s,
                 fresh=job.fresh, artifact_uri=job.artifact_uri, unlogged=job.unlogged)
    log.start(job.attempt)
    stall = StallGuard(job.stall_timeout_s)
    context = RunContext(log, Path(job.output_dir), job.benchmark or spec.campaign,
                         Path(job.campaign_dir or Path.cwd()), watch, stall)
    writer = None
    disclosure: dict = {}
    start = time.monotonic()
    try:
        trainer = get_trainer(spec.trainer_kind)
        reporter: Reporter = context
        disclosure = {**trainer.disclosure(spec), "config_filename": job.config_filename or spec.campaign}
        if not trainer.writes_mllog:
            writer = MllogWriter(context.output_dir / RESULT_FILE, context.benchmark, spec, disclosure)
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
    elif disclosure:  # the trainer's own file: the keys its program left out
        try:
            add_missing_disclosure(context.output_dir / RESULT_FILE, disclosure)
        except OSError:
            pass  # the program's file stays as it wrote it: the outcome is its, and the export adds them again
    measured, tags = _result_file_facts(context.output_dir / RESULT_FILE, spec)
    if TAG_WARNING in tags and result.status is not RunStatus.failed:  # shown on the run's console line too
        note = "; ".join(filter(None, [result.error, "warning: " + tags[TAG_WARNING]]))
        result = result.model_copy(update={"error": note})
    if job.gpus_per_process:  # a cell's runs on mixed hardware get flagged
        from rcpforge.cluster.local import visible_gpu_names  # a CPU run's job does without it

        if names := visible_gpu_names():
            tags[TAG_ACCELERATOR] = " + ".join(sorted(set(names)))
    log.log_artifact(context.output_dir / RESULT_FILE)
    log.finish(result, {**cost_of(job, result), **measured}, tags, run_params(spec))
    return result.model_dump(mode="json")


def _result_file_facts(path: Path, spec: RunSpec) -> tuple[dict[str, float], dict[str, str]]:
    """The MLPerf time to train and the disclosure keys of the run's result file, and a
    warning where the disclosed precision contradicts the one its recipe declares
    (a command trainer's label with `precision:`)."""
    facts = run_facts(path)
    measured = {METRIC_TIME_TO_TRAIN: facts.time_to_train_s} if facts.time_to_train_s is not None else {}
    tags = facts_tags(facts)
    declared = spec.recipe_options.get("precision")
    disclosed = facts.disclosed.get("lowest_numerical_precision_in_linear")
    if declared is not None and disclosed is not None and disclosed != declared:
        with_warning(tags, f"the run disclosed lowest_numerical_precision_in_linear {disclosed!r}, but its recipe "
                           f"{spec.recipe} declares precision {declared!r}: check the program's recipe, or the "
                           "label's precision option")
    return measured, tags


def cost_of(job: RunAssignment, result: RunResult) -> dict[str, float]:
    """The attempt's compute: wall time x processes, as GPU-hours when its ranks hold
    GPUs, else CPU core-hours (one core a process)."""
    if job.gpus_per_process:
        return {METRIC_GPU_HOURS: result.wall_s * job.processes * job.gpus_per_process / 3600.0}
    return {METRIC_CORE_HOURS: result.wall_s * job.processes / 3600.0}


class _Unreported(Reporter):
    """The reporter of a gang task other than 0: it trains, and keeps nothing. Its files
    go to its own `output_dir`; `run_dir` is the run's folder, where the gang's shared
    files are (the tiny LM's checkpoint)."""

    def __init__(self, output_dir: Path, run_dir: Path, benchmark: str, campaign_dir: Path):
        self.output_dir, self.run_dir = output_dir, run_dir
        self.benchmark, self.campaign_dir = benchmark, campaign_dir

    def eval_point(self, point: EvalPoint) -> None:
        pass


def task_folder(run_dir: Path, task: int) -> Path:
    """Where gang task `task` of a run trains: the run's folder for the reporter (task 0),
    its own `rank<N>/` below it for every other."""
    return run_dir if task == 0 else run_dir / f"rank{task}"


def _train_unreported(job: RunAssignment, task: int) -> dict:
    """A gang task besides the reporter: the trainer's errors propagate, so the backend
    stops the gang and reports the attempt failed with this task's traceback."""
    spec = RunSpec.model_validate_json(job.spec_json)
    folder = task_folder(Path(job.output_dir), task)
    folder.mkdir(parents=True, exist_ok=True)
    reporter = _Unreported(folder, Path(job.output_dir), job.benchmark or spec.campaign,
                           Path(job.campaign_dir or Path.cwd()))
    # No stall guard here: this task reports no progress; task 0's guard covers the run.
    result = get_trainer(spec.trainer_kind).train(spec, reporter)
    if result.status is RunStatus.failed:  # a rank's program crashed: the gang must stop
        raise RuntimeError(result.error or "the trainer failed without saying why")
    return result.model_dump(mode="json")


def has_outcome(value: dict) -> bool:
    """Whether what `execute_run` returned is the run's outcome (converged, not converged,
    diverged): it stands even when the cluster was ending the job as it came (`Job.final`:
    a Slurm job preempted as its run finished), while a failure then may be the kill's."""
    return RunStatus(value["status"]).is_outcome


def note_requeue(job: RunAssignment) -> None:
    """The job was preempted or hit its time limit and is requeued by the cluster: the
    run reads `preempted` (never an outcome) until the requeued job starts it again.
    A backend that requeues (Slurm) calls it, as the `Job`'s `on_requeue`, with the job's
    arguments; a short retry window, as the job is killed soon after
    (backend.signal_delay_s) and the requeue matters more."""
    from rcpforge.orchestrator.tracking import mark_preempted

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
