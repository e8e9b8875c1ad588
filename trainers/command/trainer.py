"""The `command` trainer: launches a program per run and reads its MLLOG output live.

Outcome, in this order:
- a `run_stop` with status `success`: converged, with the value to converge exactly as
  `mlperf_logging.rcp_checker` reads it (`trainers/contract/mllog/read.py`);
- a `run_stop` with any other status (MLLOG has `aborted`): not_converged;
- a budget spent before any run_stop: the process is stopped, not_converged. The budgets
  of an external program are the wall-clock `max_wall_s` of the trainer settings and the
  campaign's token budget, applied to the evals it logs: an eval past `max_tokens`
  (samples x `tokens_per_sample`) ends the run; evals up to it count;
- an exit without run_stop (a crash, a signal): failed with the exit code and the last
  lines of output; failed runs are retried and never counted.

The process's readable MLLOG lines are the run's `result.txt`; all its output is in
`output.log` beside it.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from trainers.command.process import ProcessEnd, StopProcess, run_and_follow
from trainers.command.settings import CommandSettings, env_name, substitute
from trainers.contract import EvalPoint, Reporter, RunResult, RunSpec, RunStatus
from trainers.contract.gang import gang_task
from trainers.contract.mllog.read import TOKEN, MllogReader
from trainers.contract.mllog.write import RESULT_FILE

OUTPUT_LOG = "output.log"


def run_values(spec: RunSpec, output_dir: Path, campaign_dir: Path, benchmark: str) -> dict[str, str]:
    """What the placeholders stand for in one run (and the RCPFORGE_* variables); the
    gang's come from the rendezvous variables the backend set on this task."""
    values: dict[str, Any] = {name: value for name, value in spec.hparams.items()}
    env = os.environ
    world = int(env.get("WORLD_SIZE", spec.world_size) or 1)
    per_node = int(env.get("LOCAL_WORLD_SIZE", "1") or 1)
    values.update(
        world_size=world, processes_per_node=per_node, nodes=max(1, world // per_node),
        master_addr=env.get("MASTER_ADDR", "127.0.0.1"), master_port=env.get("MASTER_PORT", "29500"),
        node_rank=env.get("NODE_RANK", "0"),
    )
    values.update(
        python=sys.executable, recipe=spec.recipe, batch_size=spec.batch_size, seed=spec.seed,
        output_dir=output_dir, campaign_dir=campaign_dir, benchmark=benchmark,
        max_tokens=spec.budget.max_tokens, eval_every_tokens=spec.budget.eval_every_tokens,
        target_metric=spec.target.metric, target_mode=spec.target.mode, target_value=spec.target.value,
    )
    return {k: str(v) for k, v in values.items()}


class _Follower:
    """Turns MLLOG lines into eval points and the checker's reading, as they arrive."""

    def __init__(self, spec: RunSpec, cfg: CommandSettings, reporter: Reporter, result_file: Path):
        self.spec, self.cfg, self.reporter = spec, cfg, reporter
        self.reading = MllogReader(keep_lines=False)
        self.evals = 0
        self.last: EvalPoint | None = None
        self._out = open(result_file, "w", encoding="latin-1")

    def on_line(self, line: str) -> None:
        event = self.reading.feed(line)
        if event is None:
            return
        self._out.write(self.reading.last_text + "\n")
        if event.get("key") == self.cfg.metric_key:
            self._eval(event)

    def _eval(self, event: dict[str, Any]) -> None:
        meta = event.get("metadata") if isinstance(event.get("metadata"), dict) else {}
        value = event.get("value")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return
        self.evals += 1
        samples = meta.get("samples_count")
        if samples is None and self.cfg.unit == "samples":
            samples = meta.get("epoch_num")  # the checker's unit for most benchmarks
        if not isinstance(samples, (int, float)):
            samples = self.evals  # no sample count at all: number the evals
        samples = int(round(samples))
        metrics = {self.spec.target.metric: float(value)}
        if self.cfg.metric_key != self.spec.target.metric:
            metrics[self.cfg.metric_key] = float(value)
        if isinstance(meta.get("epoch_num"), (int, float)):
            metrics["epoch_num"] = float(meta["epoch_num"])
        tokens = samples * self.cfg.tokens_per_sample
        if self.last is None or tokens > self.last.tokens:  # the curve's step must grow
            self.last = EvalPoint(tokens=tokens, samples=samples, metrics=metrics)
            self.reporter.eval_point(self.last)
        if tokens > self.spec.budget.max_tokens and self.reading.stop_status is None:
            raise StopProcess(f"token budget: an eval at {tokens} tokens is past max_tokens {self.spec.budget.max_tokens}")

    def flush(self) -> None:
        self._out.flush()

    def close(self, stopped_because: str | None) -> None:
        if stopped_because and self.reading.stop_status is None:
            # Make the file say what happened: the checker reads it as not converged.
            stop = {"namespace": "", "time_ms": int(time.time() * 1000), "event_type": "INTERVAL_END",
                    "key": "run_stop", "value": None,
                    "metadata": {"status": "aborted", "rcpforge_reason": stopped_because}}
            self._out.write(TOKEN + json.dumps(stop) + "\n")
        self._out.close()


class CommandTrainer:
    writes_mllog = True  # the program's own MLLOG lines are the result file

    def train(self, spec: RunSpec, reporter: Reporter) -> RunResult:
        start = time.monotonic()
        cfg = CommandSettings.model_validate({k: v for k, v in spec.trainer.items() if k != "kind"})
        output_dir = Path(reporter.output_dir).resolve()
        output_dir.mkdir(parents=True, exist_ok=True)
        campaign_dir = Path(getattr(reporter, "campaign_dir", None) or Path.cwd()).resolve()
        benchmark = getattr(reporter, "benchmark", None) or spec.campaign
        values = run_values(spec, output_dir, campaign_dir, benchmark)
        argv = [substitute(a, values) for a in cfg.argv]
        env = {**os.environ, **{env_name(k): v for k, v in values.items()}}
        env.update({k: substitute(v, values) for k, v in cfg.env.items()})
        workdir = campaign_dir / substitute(cfg.workdir, values) if cfg.workdir else campaign_dir
        follower = _Follower(spec, cfg, reporter, output_dir / RESULT_FILE)
        end = None
        try:
            end = run_and_follow(
                argv, cwd=workdir, env=env, on_line=follower.on_line, max_wall_s=cfg.max_wall_s,
                grace_s=cfg.stop_grace_s, raw_log=output_dir / OUTPUT_LOG,
                done=lambda: follower.reading.stop_status is not None,
                on_idle=lambda: (follower.flush(), getattr(reporter, "idle", lambda: None)()),
            )
        except OSError as err:  # the program cannot be started: missing, not executable
            return RunResult(status=RunStatus.failed, error=f"cannot start {argv[0]!r} in {workdir}: {err.strerror or err}")
        finally:
            follower.close(end.stopped_because if end else None)
        return _result(follower, end, cfg, time.monotonic() - start, output_dir)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _result(follower: _Follower, end: ProcessEnd, cfg: CommandSettings, wall_s: float, output_dir: Path) -> RunResult:
    reading, last = follower.reading, follower.last
    if gang_task() != 0 and reading.stop_status is None and end.exit_code == 0:
        # A rank that is not the reporter need not log MLLOG: its clean exit is its end
        # (the run's outcome is the reporter's); a crash still fails the gang.
        return RunResult(status=RunStatus.not_converged, wall_s=wall_s)
    notes = []
    if reading.unreadable:
        notes.append(f"{reading.unreadable} unreadable MLLOG lines skipped")
    trained = last.tokens if last else 0
    metric = next(iter(last.metrics.values())) if last else None
    common = dict(tokens_trained=trained, final_metric=metric, wall_s=wall_s)
    if reading.stop_status is not None:
        if end.exit_code not in (0, None) and end.stopped_because is None:
            notes.append(f"process {end.describe_exit()} after run_stop")
        note = "; ".join(notes) or None
        if not reading.converged:
            return RunResult(status=RunStatus.not_converged, error=note or f"run_stop status {reading.stop_status!r}", **common)
        value = reading.value_to_converge
        if cfg.unit == "epochs" and last is None:
            return RunResult(status=RunStatus.failed, error=f"run_stop success but no {cfg.metric_key} eval to count samples from", **common)
        if cfg.unit == "samples" and not _finite(value):
            return RunResult(status=RunStatus.failed, error=f"run_stop success but the checker's value to converge is {value!r}, not a number", **common)
        samples = int(round(value)) if cfg.unit == "samples" else last.samples
        tokens = samples * cfg.tokens_per_sample
        return RunResult(status=RunStatus.converged, samples_to_target=samples, tokens_to_target=tokens, error=note, **common)
    if end.stopped_because:
        return RunResult(status=RunStatus.not_converged, error="; ".join([f"stopped: {end.stopped_because}", *notes]), **common)
    tail = "\n".join(end.tail)
    return RunResult(
        status=RunStatus.failed,
        error=f"process ended without run_stop ({end.describe_exit()}); {'; '.join(notes) + '; ' if notes else ''}"
        f"output in {output_dir / OUTPUT_LOG}; last lines:\n{tail}",
        **common,
    )
