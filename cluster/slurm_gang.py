"""A gang inside a Slurm job: what each task does before it calls the job's function (its
rendezvous environment from Slurm's identity), what it does when Slurm ends the job
under it (`ended_by_slurm`), and, after a job ended without a result, which of its tasks
failed.

The job's `srun` starts every task at once (`--ntasks-per-node`, `--nodes`). Slurm says
who each task is (SLURM_PROCID, SLURM_NODEID, SLURM_LOCALID) and pins its GPUs itself
(CUDA_VISIBLE_DEVICES); the rendezvous (MASTER_ADDR, MASTER_PORT) is chosen by task 0
and handed to the others through a file in the submitit folder.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rcpforge.cluster.gang import free_port
from rcpforge.trainers.contract.gang import Gang

# How long a task waits for task 0 to publish the rendezvous: task 0 may start a little
# later (another node, a slow file system), never minutes later.
RENDEZVOUS_TIMEOUT_S = 120.0
# Echoed into the job's log by the sbatch script before each start (first run and every
# requeue), so a failure is read from the lines of the last start only.
START_MARK = "rcpforge: slurm job starts"
# How long a task that Slurm sent SIGTERM waits for the SIGKILL that follows (GraceTime
# on preemption, KillWait otherwise: seconds to a minute); past it, it reports anyway.
TERMINATED_WAIT_S = 300.0
# srun's line for a task that ended badly: `srun: error: NODE: task 1: Killed`.
_FAILED_TASK = re.compile(r"^srun: error: \S+: tasks? (\d+)(?:[-,]\S*)?: (.+)$")


def rendezvous_env(gang: Gang) -> dict[str, str]:
    """The gang environment of this task of the running Slurm job."""
    import submitit

    job = submitit.JobEnvironment()
    task = job.global_rank
    if job.num_tasks != gang.tasks or job.node != gang.node_of(task):
        # Gang.task_env numbers tasks node by node (Slurm's default block distribution):
        # a cluster that lays them out otherwise would get ranks on the wrong nodes.
        raise RuntimeError(
            f"slurm task {task} of {job.num_tasks} is on node {job.node}; the gang expects "
            f"{gang.tasks} tasks, task {task} on node {gang.node_of(task)} (tasks placed node by node: "
            "remove any --distribution from backend.additional_parameters)"
        )
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    shared = job.paths.folder / f"{job.job_id}_{restart}_rendezvous.txt"
    if task == 0:
        # One node: every task is on this one, which it reaches at the loopback address
        # without asking the controller (two RPCs a job: thousands in a large campaign).
        address, port = ("127.0.0.1" if gang.nodes == 1 else first_node_address()), free_port("")
        if gang.tasks > 1:
            _publish(shared, f"{address} {port}")
    else:
        address, port = _await(shared, task)
    return gang.task_env(task, address, port, None)


@contextmanager
def ended_by_slurm() -> Iterator[threading.Event]:
    """Notes Slurm's SIGTERM, which says the job is being ended under the task: preempted
    (cancelled or requeued), cancelled, at its time limit. What the call raises after it
    (or returns, where the job says the value is no outcome: `Job.final`) may be what the
    signal did to it (a program killed: `killed by SIGTERM`), no outcome of the run: the
    task then waits for Slurm's SIGKILL instead of reporting it (`await_kill`), so the
    job ends without a result and Slurm's state says what became of it (requeued: it runs
    again; PREEMPTED or CANCELLED: the attempt ended, `rcpforge.cluster.slurm_states.ENDED`). The
    handler before this one (submitit's, which lets SIGTERM pass) still gets the signal.
    Yields the event set by the signal."""
    received = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield received  # signal handlers are the main thread's only
        return
    previous = signal.getsignal(signal.SIGTERM)

    def note(signum, frame):
        received.set()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:  # nobody let it pass: it ends the task, as it would have
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, note)
    try:
        yield received
    except BaseException:
        if received.is_set():
            await_kill()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def await_kill() -> None:
    """Wait for the SIGKILL that follows Slurm's SIGTERM; past TERMINATED_WAIT_S (a
    SIGTERM that came from elsewhere), go on."""
    time.sleep(TERMINATED_WAIT_S)


def first_node_address() -> str:
    """The address of the job's first node (task 0's), by which the other nodes reach
    it: its NodeAddr, since a node name need not resolve (it does not on the dev
    cluster)."""
    names = _scontrol("show", "hostnames", os.environ["SLURM_JOB_NODELIST"]).split()
    described = _scontrol("show", "node", names[0])
    found = re.search(r"\bNodeAddr=(\S+)", described)
    return found.group(1) if found else names[0]


def _scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60, check=True).stdout


def _publish(path: Path, text: str) -> None:
    """Written whole or not at all: a task polling for it never reads half a line."""
    partial = path.with_name(path.name + f".{os.getpid()}.tmp")
    partial.write_text(text)
    os.replace(partial, path)


def _await(path: Path, task: int) -> tuple[str, int]:
    deadline = time.monotonic() + RENDEZVOUS_TIMEOUT_S
    while not path.exists():
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"gang task {task}: task 0 did not publish the rendezvous address in {path} within "
                f"{RENDEZVOUS_TIMEOUT_S:.0f} s; see task 0's log beside it"
            )
        time.sleep(0.1)
    address, port = path.read_text().split()
    return address, int(port)


def failed_task(log: Path) -> tuple[int, str] | None:
    """(task, how it ended) for the first task srun reported ending badly since the
    job's last start, from the job's log; None when the log names none (the job was
    cancelled, or lost with its node)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    last_start = text.rsplit(START_MARK, 1)[-1]
    for line in last_start.splitlines():
        found = _FAILED_TASK.match(line.strip())
        if found:
            return int(found.group(1)), found.group(2).strip()
    return None
