"""The shared vocabulary of rcpforge: what writers (trainers, the orchestrator) and
readers (the analysis) of runs both speak.

- `run`: the run contract's plain types (RunSpec and its run key, RunResult, EvalPoint,
  the Reporter and Trainer base classes), re-exported here;
- `run_key`: the one rule of what enters a run key (settings added later only off their
  defaults, revisions only above their first) and its hash;
- `revisions`: the numerics revision of each recipe, which enters the run key;
- `schema`: the tag and metric names a run is filed under in MLflow;
- `uri`: tracking URIs as written, their form checked;
- `redact`: the one redaction rule of what rcpforge records or prints (URI passwords,
  credentials in `env` and argv);
- `retry`: the retry policy of every call to a tracking store, writes and reads;
- `mllog`: the one home of MLLOG, the checker-exact reader and the result-file writer.

This package imports nothing else of rcpforge (`tests/test_boundaries.py` holds it to
that), and neither torch nor mlflow: the CLI, the campaign validator and the analysis
import it.
"""

from __future__ import annotations

from rcpforge.trainers.contract.run import (
    OUTCOMES,
    Budget,
    ErrorKind,
    EvalPoint,
    Reporter,
    RunResult,
    RunSpec,
    RunStatus,
    StopRun,
    Target,
    Trainer,
)
from rcpforge.trainers.contract.run_key import RUN_KEY_VERSION

__all__ = [
    "OUTCOMES", "RUN_KEY_VERSION", "Budget", "ErrorKind", "EvalPoint", "Reporter", "RunResult", "RunSpec", "RunStatus",
    "StopRun", "Target", "Trainer",
]
