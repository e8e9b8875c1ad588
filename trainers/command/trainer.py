"""The `command` trainer: launches a program per run and reads its MLLOG output live.

Outcome, in this order:
- a `run_stop` with status `success`: converged, with the value to converge exactly as
  `mlperf_logging.rcp_checker` reads it (`trainers/contract/mllog/read.py`);
- a `run_stop` with any other status (MLLOG has `aborted`): not_converged;
- the token budget spent before any run_stop: the process is stopped, not_converged. The
  budget applies to the evals it logs: an eval past `max_tokens` (samples x
  `tokens_per_sample`) ends the run; evals up to it count;
- the wall-clock `max_wall_s` spent: the process is stopped and the attempt failed (a
  hung or slow machine is not an outcome of the recipe: it is retried);
- an eval line without the unit the checker reads for the file's benchmark (`epoch_num`
  outside its LLM list): failed at once, with the key to log or `rcp.benchmark` to set,
  never a silent not-converged;
- an exit without run_stop (a crash, a signal): failed with the exit code and the last
  lines of output; failed runs are retried and never counted.

A failure has a kind (`ErrorKind`): the unit rule, a program that cannot be started and
an exit before any MLLOG line where an argument naming an input file names none are
`configuration` (not retried: the campaign stops); any other exit before the first MLLOG
line is `startup` (the orchestrator decides: orchestrator/failfast.py); the rest transient.

The MLLOG stream is the program's stdout and stderr, or the file `mllog_file` as it grows.
Its readable MLLOG lines are the run's `result.txt`; all its output is in `output.log`
beside it. Python programs run with PYTHONUNBUFFERED=1, so a plain `print()` of an MLLOG
line reaches rcpforge when it is printed.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rcpforge.trainers.command.inputs import missing_input_message, missing_inputs
from rcpforge.trainers.command.process import ProcessEnd, StopProcess, run_and_follow
from rcpforge.trainers.command.settings import (
    MODEL_SETTING_PREFIX,
    RECIPE_OPTION_PREFIX,
    CommandSettings,
    FromEnv,
    env_name,
    label_disclosure,
    substitute,
)
from rcpforge.trainers.contract import ErrorKind, EvalPoint, Reporter, RunResult, RunSpec, RunStatus, Trainer
from rcpforge.trainers.contract.gang import gang_task
from rcpforge.trainers.contract.mllog.read import SAMPLES_BENCHMARKS, TOKEN, MllogReader, convergence_unit, is_eval_line
from rcpforge.trainers.contract.mllog.write import RESULT_FILE
from rcpforge.trainers.contract.redact import MASK, is_secret_entry, shown_reference
from rcpforge.trainers.contract.submission import benchmark_origin

OUTPUT_LOG = "output.log"


def run_values(spec: RunSpec, output_dir: Path, campaign_dir: Path, benchmark: str,
               tokens_per_sample: int = 1, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the placeholders stand for in one run (and the RCPFORGE_* variables); the
    gang's come from the rendezvous variables the backend set on this task (`env`,
    default this process's environment)."""
    values: dict[str, Any] = {name: value for name, value in spec.hparams.items()}
    values.update({RECIPE_OPTION_PREFIX + k: _text(v) for k, v in spec.recipe_options.items()})
    size = {"params": spec.model_params, "flops_per_token": spec.model_flops_per_token}
    model = {**spec.model_settings, **{k: v for k, v in size.items() if v is not None}}
    values.update({MODEL_SETTING_PREFIX + k: _text(v) for k, v in model.items()})
    env = os.environ if env is None else env
    world = int(env.get("WORLD_SIZE", spec.world_size) or 1)
    per_node = int(env.get("LOCAL_WORLD_SIZE", "1") or 1)
    values.update(
        world_size=world, processes_per_node=per_node, nodes=max(1, world // per_node),
        master_addr=env.get("MASTER_ADDR", "127.0.0.1"), master_port=env.get("MASTER_PORT", "29500"),
        node_rank=env.get("NODE_RANK", "0"),
    )
    values.update(
        python=sys.executable, recipe=spec.recipe, model=spec.model, batch_size=spec.batch_size, seed=spec.seed,
        output_dir=output_dir, campaign_dir=campaign_dir, benchmark=benchmark,
        max_tokens=spec.budget.max_tokens, eval_every_tokens=spec.budget.eval_every_tokens,
        target_metric=spec.target.metric, target_mode=spec.target.mode, target_value=spec.target.value,
        max_samples=spec.budget.max_tokens // tokens_per_sample,
        eval_every_samples=spec.budget.eval_every_tokens // tokens_per_sample,
    )
    return {k: str(v) for k, v in values.items()}


@dataclass(frozen=True)
class Launch:
    """What the trainer starts for one gang task of a run: the program's argv, the
    variables rcpforge sets over the environment it inherits, its working folder, and the
    MLLOG file it follows (None: the program's stdout and stderr)."""

    argv: list[str]
    env: dict[str, str]
    workdir: Path
    mllog_file: Path | None
    # The secret entries, as shown (***, <from the environment: NAME>): their values are in
    # the task's environment already, where its backend put them (Job.secret_env).
    secrets: dict[str, str] = field(default_factory=dict)


def command_settings(spec: RunSpec) -> CommandSettings:
    return CommandSettings.model_validate({k: v for k, v in spec.trainer.items() if k != "kind"})


def launch_of(spec: RunSpec, cfg: CommandSettings, output_dir: Path, campaign_dir: Path, benchmark: str,
              env: Mapping[str, str] | None = None) -> Launch:
    """The launch of one task, its placeholders filled; `env`: the task's rendezvous
    variables (default this process's). `train` starts exactly this, and
    `rcpforge run --dry-run` shows it."""
    values = run_values(spec, output_dir, campaign_dir, benchmark, cfg.tokens_per_sample, env)
    # Unbuffered, so MLLOG lines a Python program print()s arrive as they are printed
    # (a block-buffered pipe would hold them until the buffer fills: a run that looks stalled).
    sets = {"PYTHONUNBUFFERED": "1", **{env_name(k): v for k, v in values.items()}}
    secrets = {k: shown_reference(v.from_env) if isinstance(v, FromEnv) else MASK
               for k, v in cfg.env.items() if is_secret_entry(k, v) or isinstance(v, FromEnv)}
    sets.update({k: substitute(v, values) for k, v in cfg.env.items() if isinstance(v, str) and k not in secrets})
    return Launch(
        argv=[substitute(a, values) for a in cfg.argv], env=sets,
        workdir=campaign_dir / substitute(cfg.workdir, values) if cfg.workdir else campaign_dir,
        mllog_file=output_dir / substitute(cfg.mllog_file, values) if cfg.mllog_file else None, secrets=secrets,
    )


def _text(value: Any) -> Any:
    # YAML's spelling of booleans, which a program's argument parser expects more than Python's
    return ("true" if value else "false") if isinstance(value, bool) else value


# How a unit-rule failure begins (`_Follower._check_unit`), so a reader of the store can
# tell a run that broke the rule from the others.
UNIT_RULE_FAILURE = "MLLOG eval line "


# MLLOG's marks of an eval's interval (their value is the epoch), not eval metrics.
EVAL_MARKS = frozenset({"eval_start", "eval_stop"})


def metric_key_never_logged(metric_key: str, eval_keys: Iterable[str]) -> str:
    """The configuration error of a program that never logs `trainer.metric_key`."""
    keys = sorted(set(eval_keys))
    logged = (f"its eval lines log {', '.join(repr(k) for k in keys)}" if keys
              else "it logged no eval line (an MLLOG key eval_...)")
    close = difflib.get_close_matches(metric_key, keys, n=1, cutoff=0.5)
    guess = f"; did you mean {close[0]!r}?" if close else ""
    return (f"trainer.metric_key {metric_key!r} is never logged by the program: {logged}{guess} Set "
            "trainer.metric_key to the key the program logs its eval metric under")


def broke_unit_rule(error: str | None) -> bool:
    return bool(error) and error.startswith(UNIT_RULE_FAILURE) and " has no metadata " in error


class _Follower:
    """Turns MLLOG lines into eval points and the checker's reading, as they arrive."""

    def __init__(self, spec: RunSpec, cfg: CommandSettings, reporter: Reporter, result_file: Path,
                 benchmark: str | None = None):
        self.spec, self.cfg, self.reporter = spec, cfg, reporter
        self.benchmark = benchmark  # the campaign's (rcp.benchmark, or its name)
        self.reading = MllogReader(keep_lines=False)
        self.evals = 0
        self.last: EvalPoint | None = None
        self.failure: str | None = None  # why the run failed while it was followed
        self.mllog_lines = 0  # readable MLLOG lines so far: none, and a failure is at startup
        # Eval lines of keys other than metric_key while none of metric_key came (`_check_metric_key`).
        self.other_evals: Counter = Counter()
        self._out = open(result_file, "w", encoding="latin-1")

    def on_line(self, line: str) -> None:
        unreadable = self.reading.unreadable
        event = self.reading.feed(line)
        if event is None:
            return
        self.mllog_lines += 1
        self._out.write(self.reading.last_text + "\n")
        try:
            self._check_unit(event)
        except StopProcess:
            self.reading.unreadable = unreadable  # the line the run stops on: its failure names it, not a skip
            raise
        key = event.get("key")
        if key == self.cfg.metric_key:
            self._eval(event)
        elif self.evals == 0 and isinstance(key, str) and key.startswith("eval_") and key not in EVAL_MARKS:
            self._check_metric_key(key)

    def _check_metric_key(self, key: str) -> None:
        """A second eval of another key with none of metric_key yet: the program logs its
        eval metric under another name, and every run would end with no curve and no
        budget enforced. Fail it now, naming the keys it does log."""
        self.other_evals[key] += 1
        if self.other_evals[key] >= 2:
            self.failure = metric_key_never_logged(self.cfg.metric_key, self.other_evals)
            raise StopProcess(self.failure)

    def _check_unit(self, event: dict[str, Any]) -> None:
        """An eval line the checker reads without the key it reads the value from would
        leave a converged run at 1e9 (the checker's not converged): fail it now instead,
        saying which key is missing and what to set."""
        benchmark = self.reading.benchmark
        if benchmark == "stable_diffusion" or not is_eval_line(self.reading.last_text or ""):
            return
        unit = convergence_unit(benchmark)
        meta = event.get("metadata") if isinstance(event.get("metadata"), dict) else {}
        if unit in meta:
            return
        if self.benchmark is not None and benchmark != self.benchmark:
            # Setting rcp.benchmark is no fix here: it is set, and the program logs another.
            read_as, fix = self._clash(benchmark, unit)
        elif unit == "epoch_num":
            read_as = (f"the checker reads runs of benchmark {benchmark!r} in epoch_num (samples_count only for "
                       f"the {len(SAMPLES_BENCHMARKS)} benchmarks counted in samples, llama31_8b among them)")
            fix = ("log epoch_num in each eval's metadata (the samples so far, with trainer.unit: samples), or set "
                   "rcp.benchmark to the checker's name of a benchmark counted in samples and log it as "
                   "submission_benchmark (the placeholder {benchmark})")
        else:
            read_as = f"the checker reads runs of benchmark {benchmark!r} in samples_count"
            fix = "log samples_count in each eval's metadata"
        self.failure = f"{UNIT_RULE_FAILURE}{event.get('key')!r} has no metadata {unit}: {read_as}; {fix}"
        raise StopProcess(self.failure)

    def _clash(self, logged: Any, unit: str) -> tuple[str, str]:
        """What the checker reads and the fix where the program's submission_benchmark is
        not the campaign's: both values, and where each comes from."""
        ours = self.benchmark
        origin = benchmark_origin(ours, self.spec.campaign)
        said = f"logs submission_benchmark {logged!r}" if logged is not None else "logs no submission_benchmark"
        read_as = (f"the program {said} (its MLLOG), which the checker reads in {unit}, but the campaign's "
                   f"benchmark is {ours!r} ({origin}), read in {convergence_unit(ours)}")
        fix = (f"the two must agree: make the program log submission_benchmark {ours!r} (pass it the placeholder "
               "{benchmark} in trainer.argv)")
        if logged is not None:
            fix += f", or set rcp.benchmark: {logged} and log {unit} in each eval's metadata"
        return read_as, fix

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


class CommandTrainer(Trainer):
    writes_mllog = True  # the program's own MLLOG lines are the result file

    def disclosure(self, spec: RunSpec) -> dict[str, Any]:
        """What the recipe label says (`label_disclosure`): the executor appends the keys
        the program's file leaves out."""
        return label_disclosure(spec.recipe_options)

    def train(self, spec: RunSpec, reporter: Reporter) -> RunResult:
        start = time.monotonic()
        reporter = Reporter.of(reporter)
        cfg = command_settings(spec)
        output_dir = Path(reporter.output_dir).resolve()
        output_dir.mkdir(parents=True, exist_ok=True)
        campaign_dir = Path(reporter.campaign_dir or Path.cwd()).resolve()
        benchmark = reporter.benchmark or spec.campaign
        launch = launch_of(spec, cfg, output_dir, campaign_dir, benchmark)
        argv, workdir, mllog_file = launch.argv, launch.workdir, launch.mllog_file
        lacking = [name for name in launch.secrets if name not in os.environ]
        if lacking:  # a job made without its secret_env: the program would run without its credential
            return RunResult(status=RunStatus.failed, error_kind=ErrorKind.configuration,
                             error=f"trainer.env.{lacking[0]}: its value did not reach this task; launch the "
                                   "campaign with `rcpforge run`, which carries it")
        env = {**os.environ, **launch.env}
        if mllog_file is not None:
            mllog_file.parent.mkdir(parents=True, exist_ok=True)
            mllog_file.unlink(missing_ok=True)  # an earlier attempt's: this attempt starts from scratch
        follower = _Follower(spec, cfg, reporter, output_dir / RESULT_FILE, benchmark)
        end = None
        try:
            end = run_and_follow(
                argv, cwd=workdir, env=env, on_line=follower.on_line, max_wall_s=cfg.max_wall_s,
                grace_s=cfg.stop_grace_s, raw_log=output_dir / OUTPUT_LOG, mllog_file=mllog_file,
                done=lambda: follower.reading.stop_status is not None,
                on_idle=lambda: (follower.flush(), reporter.idle()),
            )
        except OSError as err:  # the program cannot be started: missing, not executable
            return RunResult(status=RunStatus.failed, error_kind=ErrorKind.configuration,
                             error=f"cannot start {argv[0]!r} in {workdir}: {err.strerror or err}; "
                             "check trainer.argv (and trainer.workdir)")
        finally:
            follower.close(end.stopped_because if end else None)
        result = _result(follower, end, cfg, time.monotonic() - start, output_dir)
        return _with_kind(result, follower, end, argv, (workdir, output_dir))


def _with_kind(result: RunResult, follower: _Follower, end: ProcessEnd, argv: list[str],
               folders: tuple[Path, Path]) -> RunResult:
    """A failure before the program's first MLLOG line is `startup` (retried unless another
    run's first attempt ends the same way), or `configuration` where an argument that names
    an input file (trainers/command/inputs.py) names none."""
    if (result.status is not RunStatus.failed or result.error_kind is not None or follower.mllog_lines
            or end.stopped_because is not None):  # stopped by rcpforge (its wall clock): not the program's exit
        return result
    workdir, output_dir = folders
    missing = missing_inputs(argv, workdir, output_dir)
    if missing:
        return result.model_copy(update={"error_kind": ErrorKind.configuration,
                                         "error": f"{result.error}\n{missing_input_message(missing[0], workdir)}"})
    return result.model_copy(update={"error_kind": ErrorKind.startup})


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
        if follower.evals == 0:  # "converged" with no eval of the metric: no curve, no budget held
            return RunResult(status=RunStatus.failed, error=metric_key_never_logged(cfg.metric_key, follower.other_evals),
                             error_kind=ErrorKind.configuration, **common)
        value = reading.value_to_converge
        if cfg.unit == "samples" and not _finite(value):
            return RunResult(status=RunStatus.failed, error=f"run_stop success but the checker's value to converge is {value!r}, not a number", **common)
        assert last is not None  # an eval of the metric came (evals > 0)
        samples = int(round(value)) if cfg.unit == "samples" else last.samples
        tokens = samples * cfg.tokens_per_sample
        return RunResult(status=RunStatus.converged, samples_to_target=samples, tokens_to_target=tokens, error=note, **common)
    if follower.failure:  # the unit rule: every run of the campaign would break it
        return RunResult(status=RunStatus.failed, error="; ".join([follower.failure, *notes]),
                         error_kind=ErrorKind.configuration, **common)
    if end.out_of_time:  # not an outcome of the recipe: the attempt fails and is retried
        return RunResult(status=RunStatus.failed, error="; ".join([f"stopped: {end.stopped_because}", *notes]), **common)
    if end.stopped_because:
        return RunResult(status=RunStatus.not_converged, error="; ".join([f"stopped: {end.stopped_because}", *notes]), **common)
    tail = "\n".join(end.tail)
    # The reason comes last, where a console line (the error's last line) shows it; the
    # program's own last lines sit above it.
    return RunResult(
        status=RunStatus.failed,
        error=f"last lines of output:\n{tail}\n"
        f"process ended without run_stop ({end.describe_exit()}); {'; '.join(notes) + '; ' if notes else ''}"
        f"output in {output_dir / OUTPUT_LOG}",
        **common,
    )
