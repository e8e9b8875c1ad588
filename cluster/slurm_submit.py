"""Sending runs to Slurm as job arrays, as a production controller takes them.

An array goes out with `sbatch` (submitit writes its script; this module runs it, so
that each answer can be read for its kind):
- accepted: the array's tasks become submitit jobs, each with its pickled call;
- transient (a busy or restarting controller, a submit limit that the user's other jobs
  reached): tried again later, the delay doubling from 2 s to 60 s with jitter, for as
  long as it takes; the campaign polls its other jobs meanwhile;
- permanent (an account, QOS, partition, constraint, GRES or time limit the cluster
  does not have): `BackendError`, one line naming the campaign field and its value;
- an array refused as invalid though within the MaxArraySize the controller reports
  (`ArrayRefused`): its tasks go again in arrays of half the size.

An answer can be lost after the controller took the array (sbatch's time-out came after
slurmctld queued it). Every array carries a token in its comment; before an array is
sent again, squeue is asked for the token, and a job found is the array's: it is taken
up, not submitted twice. Its tasks wait up to a minute for their pickles (submitit's
wait), which are put in place as it is taken up."""

from __future__ import annotations

import getpass
import os
import random
import re
import shlex
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit
from submitit.core import utils as submitit_utils
from submitit.slurm.slurm import SlurmExecutor, SlurmJob

from rcpforge.cluster.backend import BackendError
from rcpforge.cluster.slurm_gang import START_MARK
from rcpforge.trainers.contract.gang import Gang

_ROOT = Path(__file__).resolve().parents[1]

SBATCH_TIMEOUT_S = 60
# A policy refusal while the user's queue seemed to have room is tried this many times
# (about a minute of backoff: jobs that just ended may still count for a moment) before it
# is taken for the job's own size or time over a limit.
POLICY_TRIES = 5
FIRST_DELAY_S, LAST_DELAY_S = 2.0, 60.0
TOKEN_PREFIX = "rcpforge-array="
INVALID_ARRAY = "Invalid job array specification"

# What slurmctld (or sbatch, on its way) says when it cannot take a job now but may later.
TRANSIENT = re.compile(
    r"Socket timed out|Unable to contact slurm controller|Resource temporarily unavailable|temporarily unable"
    r"|Zero Bytes were transmitted|Connection refused|Transport endpoint|slurm_persist_conn|Slurm backup controller"
    r"|MaxSubmitJob|sbatch timed out|QOSMaxSubmitJob|AssocMaxSubmitJob|MaxJobCount",
    re.IGNORECASE,
)
# What it says of a setting it will never take: the campaign field to fix.
PERMANENT = (
    (re.compile(r"Invalid account", re.I), "account"),
    (re.compile(r"Invalid qos", re.I), "qos"),
    (re.compile(r"invalid partition", re.I), "partition"),
    (re.compile(r"time limit", re.I), "time_min"),
    (re.compile(r"Invalid generic resource|gres", re.I), "gpus_per_node"),
    (re.compile(r"Invalid feature specification|constraint", re.I), "additional_parameters.constraint"),
    (re.compile(r"node configuration is not available|More processors requested", re.I),
     "nodes, gpus_per_node, cpus_per_task or mem_gb"),
)


class Transient(Exception):
    """The controller may take the array later."""


class ArrayRefused(Exception):
    """The controller refused an array of more than one task as an invalid array: its
    MaxArraySize is lower than the one it reports (`scontrol reconfigure` shows a new value
    that slurmctld enforces only once restarted). Its tasks go again in smaller arrays."""


@dataclass
class Pending:
    """An array on its way: its calls pickled once (their temporary files), the
    executor of its shape, its token, and when to try again."""

    executor: SlurmExecutor
    pickles: list[Path]
    token: str
    tries: int = 0
    next_try: float = 0.0
    said: str = ""  # the last transient answer, said once
    policy_refusals: int = 0  # policy refusals while the user's queue had room (`POLICY_TRIES`)


def submitit_parameters(settings: Any, job_name: str, gang: Gang, gpu_type: str | None = None) -> dict[str, Any]:
    """The campaign's Slurm settings and the run's gang (`launch:`) under submitit's
    parameter names."""
    extra = dict(settings.additional_parameters)
    if gpu_type is not None:
        if "constraint" in extra:
            raise BackendError(
                f"backend.additional_parameters.constraint: launch.gpu_type ({gpu_type}) is the job's constraint "
                "already; remove one of them"
            )
        extra["constraint"] = gpu_type
    params: dict[str, Any] = dict(
        timeout_min=settings.time_min, nodes=gang.nodes, tasks_per_node=gang.tasks_per_node,
        cpus_per_task=settings.cpus_per_task, slurm_job_name=job_name,
        slurm_array_parallelism=settings.array_parallelism, slurm_signal_delay_s=settings.signal_delay_s,
        slurm_setup=[*_environment(), *settings.setup], slurm_additional_parameters=extra,
        # A task that dies or raises ends the step: no rank waits forever for a lost peer.
        slurm_srun_args=["--kill-on-bad-exit=1"], stderr_to_stdout=True,
    )
    if gang.gpus_per_process:
        params["slurm_gpus_per_task"] = gang.gpus_per_task
    elif settings.gpus_per_node:
        params["gpus_per_node"] = settings.gpus_per_node
    if settings.mem_gb is not None:
        params["mem_gb"] = settings.mem_gb
    for key, value in (("slurm_partition", settings.partition), ("slurm_account", settings.account),
                       ("slurm_qos", settings.qos)):
        if value is not None:
            params[key] = value
    return params


def _environment() -> list[str]:
    """The worker runs this interpreter (submitit's command is sys.executable) with this
    import path, whatever the job's login environment says."""
    paths = [str(_ROOT), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    pythonpath = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    # The mark opens each start's lines in the log (see `failed_task`).
    return [f"export PYTHONPATH={shlex.quote(pythonpath)}", f'echo "{START_MARK} ${{SLURM_RESTART_COUNT:-0}}"']


def prepare(executor: submitit.AutoExecutor, calls: list[tuple[Any, ...]]) -> Pending:
    """Pickle the calls (function and arguments) of one array of `executor`'s shape."""
    slurm = executor._executor  # noqa: SLF001 - the Slurm executor under the auto one
    assert isinstance(slurm, SlurmExecutor)
    folder = submitit_utils.JobPaths.get_first_id_independent_folder(slurm.folder)
    folder.mkdir(parents=True, exist_ok=True)
    timeout_min = slurm.parameters.get("time", 5)
    pickles = []
    for fn, *args in calls:
        delayed = submitit_utils.DelayedSubmission(fn, *args)
        delayed.set_timeout(timeout_min, slurm.max_num_timeout)
        path = folder / f"{uuid.uuid4().hex}.pkl"
        delayed.dump(path)
        pickles.append(path)
    array = SlurmExecutor(slurm.folder, slurm.max_num_timeout)
    array.update_parameters(**slurm.parameters)
    array.parameters["map_count"] = len(calls)
    token = uuid.uuid4().hex
    extra = dict(array.parameters.get("additional_parameters") or {})
    if "comment" in extra:  # the user's comment keeps its place; the token joins it
        extra["comment"] = f"{extra['comment']} {TOKEN_PREFIX}{token}"
        array.parameters["additional_parameters"] = extra
    else:
        array.parameters["comment"] = TOKEN_PREFIX + token
    return Pending(array, pickles, token)


def send(pending: Pending, settings: Any) -> list[SlurmJob]:
    """Submit the array (or take up the one an earlier try left); raises Transient or
    BackendError."""
    pending.tries += 1
    base = find_by_token(pending.token) if pending.tries > 1 else None
    if base is None:
        base = _sbatch(pending, settings)
    slurm = pending.executor
    tasks = list(range(slurm._num_tasks()))  # noqa: SLF001
    jobs: list[SlurmJob] = [SlurmJob(folder=slurm.folder, job_id=f"{base}_{i}", tasks=tasks)
                            for i in range(len(pending.pickles))]
    for job, pickle in zip(jobs, pending.pickles, strict=True):
        job.paths.move_temporary_file(pickle, "submitted_pickle")
    return jobs


def backoff(pending: Pending) -> float:
    """When to try a transiently refused array again: 2 s doubling to 60 s, +-25% jitter
    (many orchestrators refused at once do not come back at once)."""
    delay = min(LAST_DELAY_S, FIRST_DELAY_S * 2 ** (pending.tries - 1))
    pending.next_try = time.monotonic() + delay * random.uniform(0.75, 1.25)
    return pending.next_try


def _sbatch(pending: Pending, settings: Any) -> str:
    slurm = pending.executor
    script = submitit_utils.JobPaths.get_first_id_independent_folder(slurm.folder) / f".submission_{pending.token}.sh"
    script.write_text(slurm._make_submission_file_text(slurm._submitit_command_str, pending.token))  # noqa: SLF001
    try:
        proc = subprocess.run(slurm._make_submission_command(script), capture_output=True, text=True,  # noqa: SLF001
                              timeout=SBATCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise Transient(f"sbatch timed out after {SBATCH_TIMEOUT_S} s") from None
    except OSError as err:
        raise BackendError(f"sbatch could not run: {err}") from None
    answer = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    if proc.returncode == 0:
        match = re.search(r"job (\d+)", proc.stdout)
        if match:
            return match.group(1)
        raise BackendError(f"sbatch said it submitted the array but gave no job id: {proc.stdout.strip()!r}")
    line = answer[-1] if answer else f"sbatch exited {proc.returncode}"
    if INVALID_ARRAY in line and len(pending.pickles) > 1:
        raise ArrayRefused(line)
    kind = kind_of(line)
    if kind == "policy":
        # The submit limit reached, or the job's own size or time over a limit: Slurm says
        # the same. A full queue waits for room; with room, a refusal that repeats is the job's.
        if _user_queue_full(settings, len(pending.pickles)):
            raise Transient(line)
        pending.policy_refusals += 1
        if pending.policy_refusals < POLICY_TRIES:
            raise Transient(line)
    if kind is None:
        raise Transient(line)
    raise BackendError(refusal(line, kind, settings))


def kind_of(line: str) -> str | None:
    """None: transient; "policy": an accounting/QOS policy refusal (a full submit queue,
    or a job's size or time over its limits); else the campaign field the refusal names."""
    if TRANSIENT.search(line):
        return None
    if "violates accounting/QOS policy" in line:
        return "policy"
    for pattern, field in PERMANENT:
        if pattern.search(line):
            return field
    return "settings"


def refusal(line: str, field: str, settings: Any) -> str:
    """One line: which campaign field, its value, what Slurm said, what to do."""
    if field == "policy":
        return (f"Slurm refused the jobs by the account's or QOS's limits on a job's size or time, {POLICY_TRIES} "
                f"times with room in your queue ({line}): "
                f"check backend.time_min ({settings.time_min}), nodes, gpus_per_node against `sacctmgr show qos` "
                "and your association, or ask for another backend.qos")
    if field == "settings":
        return f"Slurm refused the jobs: {line}; check the campaign's backend: settings"
    value = _value_of(settings, field)
    shown = f" ({value!r})" if value is not None else ""
    return f"backend.{field}{shown}: Slurm refused the jobs: {line}; fix the campaign file, then run it again"


def _value_of(settings: Any, field: str) -> Any:
    if field.startswith("additional_parameters."):
        return settings.additional_parameters.get(field.split(".", 1)[1])
    return getattr(settings, field, None)


def _user_queue_full(settings: Any, asked: int) -> bool:
    """Whether a policy refusal is the submit limit (the user's jobs with this array
    would pass it: wait for room) rather than the job's own size or time (permanent)."""
    from rcpforge.cluster.slurm_limits import read_limits

    window = read_limits(settings.qos, settings.account, margin=0.0).queue_window
    if window is None:
        return True  # no limit readable: take it for the queue, the common case
    return user_jobs() + asked > window[0]


def user_jobs() -> int:
    """The user's jobs in the queue, each array task counted (as the limits count them)."""
    user = os.environ.get("USER") or getpass.getuser()
    try:
        proc = subprocess.run(["squeue", "-h", "-r", "-u", user, "-t", "PENDING,RUNNING,SUSPENDED,COMPLETING",
                               "-o", "%i"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return len(proc.stdout.split()) if proc.returncode == 0 else 0


def find_by_token(token: str) -> str | None:
    """The array job id of the array this token was sent with, if the controller has it."""
    user = os.environ.get("USER") or getpass.getuser()
    try:
        proc = subprocess.run(["squeue", "-h", "-u", user, "-t", "all", "-o", "%F|%k"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        raise Transient("squeue did not answer whether the last try reached the controller") from None
    if proc.returncode != 0:
        raise Transient(f"squeue: {proc.stderr.strip()}")
    for line in proc.stdout.splitlines():
        job, _, comment = line.partition("|")
        if TOKEN_PREFIX + token in comment:
            return job.strip()
    return None
