"""The unit of work a backend executes: one RunSpec, tracked in its MLflow run.

Runs in a worker (a local process, a Ray task, a Slurm job). A trainer's exception is a
result (`failed`, with the traceback), never an exception out of here."""

from __future__ import annotations

import traceback
from pathlib import Path

from orchestrator.tracking import RunLog
from trainers.contract import RunResult, RunSpec, RunStatus
from trainers.registry import get_trainer


def execute_run(spec_json: str, tracking_uri: str, run_id: str, attempt: int, output_dir: str) -> dict:
    spec = RunSpec.model_validate_json(spec_json)
    log = RunLog(tracking_uri, run_id, spec.target.metric, Path(output_dir))
    log.start(attempt)
    try:
        result = get_trainer(spec.trainer_kind).train(spec, log)
    except Exception:  # noqa: BLE001 - any trainer error is recorded as the run's failure
        result = RunResult(status=RunStatus.failed, error=traceback.format_exc())
    log.finish(result)
    return result.model_dump(mode="json")


def _note_requeue(spec_json: str, tracking_uri: str, run_id: str, attempt: int, output_dir: str) -> None:
    """The job was preempted or hit its time limit and is requeued by the cluster: the
    run reads `preempted` (never an outcome) until the requeued job starts it again."""
    from orchestrator.tracking import mark_preempted

    mark_preempted(tracking_uri, run_id)


# Backends that requeue jobs (Slurm) call this before the requeue.
execute_run.on_requeue = _note_requeue  # type: ignore[attr-defined]
