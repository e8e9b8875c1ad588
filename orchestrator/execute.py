"""The unit of work a backend executes: one RunSpec, tracked in its MLflow run.

Runs in a worker (a local process, a Ray task, a Slurm job). A trainer's exception is a
result (`failed`, with the traceback), never an exception out of here."""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Callable

from orchestrator.tracking import RunLog
from trainers.contract import EvalPoint, RunResult, RunSpec, RunStatus, StopRun
from trainers.registry import get_trainer


class _Watched:
    """The run's RunLog, followed by a watcher that sees each eval point once it is
    logged and may raise `StopRun` (a tuning pruner)."""

    def __init__(self, log: RunLog, watch: Callable[[EvalPoint], None]):
        self._log, self._watch = log, watch
        self.output_dir = log.output_dir

    def eval_point(self, point: EvalPoint) -> None:
        self._log.eval_point(point)
        self._watch(point)


def execute_run(
    spec_json: str,
    tracking_uri: str,
    run_id: str,
    attempt: int,
    output_dir: str,
    watch: Callable[[EvalPoint], None] | None = None,
) -> dict:
    spec = RunSpec.model_validate_json(spec_json)
    log = RunLog(tracking_uri, run_id, spec.target.metric, Path(output_dir))
    log.start(attempt)
    start = time.monotonic()
    try:
        result = get_trainer(spec.trainer_kind).train(spec, log if watch is None else _Watched(log, watch))
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
    log.finish(result)
    return result.model_dump(mode="json")
