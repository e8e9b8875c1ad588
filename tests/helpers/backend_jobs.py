"""Instant job functions for the backend conformance suite: picklable by name, so every
backend's workers (a spawned process, a Ray worker, a Slurm job) import them."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


def echo(value):
    return value


def raise_error(message: str):
    raise RuntimeError(message)


def die() -> None:
    """The worker's process is killed under the job (the OOM killer, a node gone)."""
    os.kill(os.getpid(), signal.SIGKILL)


def note_pid_and_sleep(folder: str, seconds: float) -> None:
    """Leaves its pid in `folder`, then sleeps: a job to cancel while it runs."""
    Path(folder, f"{os.getpid()}.pid").write_text(str(os.getpid()))
    time.sleep(seconds)


def requeue_note(folder: str, *_args) -> None:
    """A job's `on_requeue`: one line in `folder`/requeued per requeue."""
    with open(Path(folder, "requeued"), "a") as note:
        note.write("requeued\n")


# SLURMD_NODENAME: the Slurm node a task ran on (unset elsewhere).
GANG_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
             "RCPFORGE_GANG_TASK", "CUDA_VISIBLE_DEVICES", "SLURMD_NODENAME")


def _leave_task_file(folder: str, facts: dict) -> None:
    """Whole or not there: the test may read it while this task is still writing."""
    import json

    tmp = Path(folder, f".task{_task()}.json.tmp")
    tmp.write_text(json.dumps(facts))
    tmp.rename(Path(folder, f"task{_task()}.json"))


# How long a helper waits for a gang's other ranks to leave their files: generous, since
# a rank may still be starting (another node, a loaded machine) when task 0 returned;
# the wait ends as soon as the files are there.
PEERS_WAIT_S = 120.0


def task_files(folder: str | Path, tasks: int) -> dict[int, dict]:
    """The `task<N>.json` files of a gang's `tasks` ranks, by rank. A job's value is task
    0's, reported once task 0 returned; another rank may still be writing its file then,
    so this waits for every file (within PEERS_WAIT_S) and returns what is there."""
    import json

    paths = [Path(folder, f"task{t}.json") for t in range(tasks)]
    _within(PEERS_WAIT_S, lambda: all(p.exists() for p in paths))
    return {int(p.stem.removeprefix("task")): json.loads(p.read_text()) for p in Path(folder).glob("task*.json")}


def logged_starts(folder: str | Path, task: int | str) -> list[str]:
    """The pids rank `task` logged in `folder`/starts<task>, one per start (see
    count_starts_and_hold_the_first). The file exists from the moment a start opens it,
    before its line is written: only whole lines count."""
    path = Path(folder, f"starts{task}")
    text = path.read_text() if path.exists() else ""
    return text.splitlines()[: text.count("\n")]


def start_pids(folder: str | Path, tasks: int, starts: int) -> dict[int, list[str]]:
    """The pids each of a gang's `tasks` ranks logged, by rank, once each has `starts` of
    them (within PEERS_WAIT_S; then the caller asserts on what is there)."""
    _within(PEERS_WAIT_S, lambda: all(len(logged_starts(folder, t)) >= starts for t in range(tasks)))
    return {t: logged_starts(folder, t) for t in range(tasks)}


def _within(limit_s: float, done: Callable[[], bool]) -> None:
    """Wait until `done()` or `limit_s` is over."""
    deadline = time.monotonic() + limit_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.1)


def _task() -> str:
    return os.environ.get("RCPFORGE_GANG_TASK", "?")


def gang_env(folder: str) -> dict:
    """Each task leaves its rendezvous variables and pid in `folder`; task 0's are the
    job's value."""

    env = {k: os.environ.get(k) for k in GANG_VARS} | {"pid": os.getpid()}
    _leave_task_file(folder, env)
    return env


def gang_with_a_dying_rank(folder: str, victim: int, seconds: float) -> None:
    """Rank 0 listens on MASTER_PORT (as a rendezvous store does); every task leaves its
    pid; task `victim` is SIGKILLed once every rank has left its pid (a rank slow to
    start must not be torn down before the test can see it ran), the others wait to be
    stopped."""
    import socket

    listener = None
    if _task() == "0":
        listener = socket.socket()
        # as torch's TCPStore does: the launcher holds MASTER_PORT for it (cluster/gang.py free_port)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
        listener.listen()
        Path(folder, "port").write_text(os.environ["MASTER_ADDR"] + " " + os.environ["MASTER_PORT"])
    Path(folder, f"{os.getpid()}.pid").write_text(_task())
    if _task() == str(victim):
        ranks = int(os.environ["WORLD_SIZE"])
        deadline = time.monotonic() + 60
        while len(list(Path(folder).glob("*.pid"))) < ranks and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(seconds)
    return None


def gang_node(folder: str) -> dict:
    """Each task leaves the Ray node it runs on and its rendezvous variables in `folder`."""

    import ray

    seen = {k: os.environ.get(k) for k in GANG_VARS} | {"node": ray.get_runtime_context().get_node_id()}
    _leave_task_file(folder, seen)
    return seen


def gang_with_a_raising_rank(folder: str, culprit: int, seconds: float) -> None:
    """Task `culprit` raises; the others leave their pid and wait to be stopped."""
    Path(folder, f"{os.getpid()}.pid").write_text(_task())
    if _task() == str(culprit):
        raise ValueError(f"rank {culprit} broke")
    time.sleep(seconds)


def gang_where_only_task_0_returns(folder: str, seconds: float) -> str:
    """Every task leaves its pid; task 0 returns once all have, the others linger for
    `seconds`."""
    Path(folder, f"{os.getpid()}.pid").write_text(_task())
    if _task() != "0":
        time.sleep(seconds)
    while len(list(Path(folder).glob("*.pid"))) < int(os.environ["RCPFORGE_GANG_TASKS"]):
        time.sleep(0.05)
    return f"task {_task()} returned"


def count_starts_and_hold_the_first(folder: str, seconds: float) -> dict:
    """Each task logs its pid in `folder`/starts<task> at every start; the first start
    sleeps (a job to preempt while it runs). At a later start task 0 returns its count
    once every rank has logged that start too (within PEERS_WAIT_S), the others at once:
    the job's value comes after the whole gang restarted, so a rank slow to restart is
    not stopped by the backend's grace for the ranks left after task 0 returned."""
    task = _task()
    with open(Path(folder, f"starts{task}"), "a") as log:
        log.write(f"{os.getpid()}\n")
    count = len(logged_starts(folder, task))
    if count == 1:
        time.sleep(seconds)
    elif task == "0":
        tasks = int(os.environ.get("RCPFORGE_GANG_TASKS", "1"))
        _within(PEERS_WAIT_S, lambda: all(len(logged_starts(folder, t)) >= count for t in range(tasks)))
    return {"task": task, "start": count}


def imported(names: list[str]) -> dict[str, bool]:
    """Which of `names` the worker had imported before this job ran (this module imports
    none of them)."""
    import sys

    return {name: name in sys.modules for name in names}


def environment_and_folder(name: str) -> tuple[str | None, str]:
    """The worker's value of the variable `name` and its current folder, as the job sees them."""
    return os.environ.get(name), os.getcwd()
