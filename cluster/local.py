"""The local backend: a pool of worker processes on this machine.

Each worker is a process that runs one gang task at a time. A job takes one
worker per task of its gang (`Job.gang`), all at once, with the rendezvous environment
of its task (`MASTER_ADDR` 127.0.0.1, a free `MASTER_PORT` per run) and, when the gang's
ranks hold GPUs, `CUDA_VISIBLE_DEVICES` pinned to GPUs no other run holds. `workers` is
how many runs train at once. A worker that dies (a segfault, the OOM killer, SIGKILL)
fails only its own job: the pool stops the rest of that gang, reports the job's error
naming the task, and starts fresh workers for the next ones.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import subprocess
import time
import traceback
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from rcpforge.cluster.backend import Backend, BackendError, Done, Job
from rcpforge.cluster.gang import GANG_GRACE_S, free_port, gang_error, kill_tree, run_task
from rcpforge.trainers.command.process import describe_exit
from rcpforge.trainers.contract.gang import Gang


def _die_with_the_orchestrator(lifeline: Connection) -> None:
    """A worker must not outlive the orchestrator: an orphan would go on writing to a
    run that the restarted orchestrator launches again. Only the orchestrator holds the
    other end of `lifeline` (a worker's parent is the fork server, which outlives it a
    while), so the end of the orchestrator, SIGKILL included, ends this worker at once."""
    import signal
    import threading

    def watch() -> None:
        try:
            lifeline.recv()  # nothing is ever sent: this returns by EOF alone
        except (EOFError, OSError):
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="rcpforge-lifeline", daemon=True).start()


# Workers are forked from multiprocessing's fork server, a clean process that imports
# once what every run needs (`start_worker_server`'s modules: the run's executor, the
# trainer's framework, MLflow's client off a database store) instead of each spawned worker
# importing it again: 4-5 s of CPU a worker for the tiny LM, paid again for every worker
# that replaces a dead one.
# A forked worker sees the server's environment, not the orchestrator's: each job carries
# the orchestrator's (as a spawned worker would have read it); its folder and sys.path
# come with multiprocessing's own preparation of the child.


def start_worker_server(preload: Iterable[str] = ()) -> None:
    """Start the fork server with `preload` imported in it, if it is not running yet: it
    imports while the orchestrator opens its tracking store. Modules named once the
    server runs are imported by each worker as it needs them (as a spawned one would)."""
    from multiprocessing import forkserver

    if getattr(forkserver._forkserver, "_forkserver_pid", None) is None:  # noqa: SLF001 - no public "is it running"
        mp.get_context("forkserver").set_forkserver_preload(list(dict.fromkeys(["rcpforge.cluster.local", *preload])))
    forkserver.ensure_running()


def _worker_loop(conn: Connection, lifeline: Connection) -> None:
    _die_with_the_orchestrator(lifeline)
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        job, environ, env = message
        os.environ.clear()
        os.environ.update(environ)
        try:
            conn.send(Done(job.task_id, value=run_task(job.fn, job.args, env, job.secret_env)))
        except BaseException:  # noqa: BLE001 - reported to the orchestrator as this job's error
            conn.send(Done(job.task_id, error=traceback.format_exc()))


class _Worker:
    def __init__(self, ctx: mp.context.ForkServerContext):
        self.conn, child = ctx.Pipe()
        lifeline, self._lifeline = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_worker_loop, args=(child, lifeline), daemon=True)
        self.proc.start()
        child.close()
        lifeline.close()
        self.run: _Run | None = None
        self.task = 0


@dataclass
class _Run:
    """One job in flight: its workers by task, and, once task 0 has returned, its value
    and the time by which the other tasks must have ended."""

    job: Job
    workers: dict[int, _Worker] = field(default_factory=dict)
    gpus: list[str] = field(default_factory=list)
    result: Done | None = None
    grace_until: float = 0.0


def visible_gpus() -> list[str]:
    """This machine's GPUs as CUDA_VISIBLE_DEVICES ids: the orchestrator's own
    CUDA_VISIBLE_DEVICES when it is set, else those `nvidia-smi -L` lists."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d for d in (x.strip() for x in listed.split(",")) if d and d != "-1"]
    return [str(i) for i in range(len(_listed_gpus()))]


def _listed_gpus() -> list[str]:
    """`nvidia-smi -L`'s line per GPU ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: ...)")."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in out.splitlines() if line.startswith("GPU ")]


def gpu_names() -> list[str]:
    """The names `nvidia-smi -L` gives this machine's GPUs ("NVIDIA H100 80GB HBM3")."""
    return [_gpu_name(line) for line in _listed_gpus()]


def visible_gpu_names() -> list[str]:
    """The names of the GPUs this process may use: those of `nvidia-smi -L`'s list that
    CUDA_VISIBLE_DEVICES picks (by index or UUID), all of them where it is not set."""
    lines = _listed_gpus()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [_gpu_name(line) for line in lines]
    chosen = []
    for device in (d.strip() for d in listed.split(",")):
        if device.isdigit():
            chosen += lines[int(device):int(device) + 1]
        elif device:
            chosen += [line for line in lines if device in line]
    return [_gpu_name(line) for line in chosen]


def _gpu_name(line: str) -> str:
    return line.split(":", 1)[1].split("(")[0].strip()


def check_gpu_type(gpu_type: str, names: list[str]) -> None:
    """A campaign that pins a GPU type runs locally only where every GPU is of it: a
    cell's runs never mix hardware."""
    other = [n for n in names if gpu_type.lower() not in n.lower()]
    if not names or other:
        shown = ", ".join(sorted(set(names))) or "no GPU"
        raise BackendError(
            f"launch.gpu_type: the campaign pins {gpu_type!r} but this machine has {shown}; "
            "run it where the GPUs are of that type (--backend ray / slurm pick such nodes), or remove gpu_type"
        )


class LocalBackend(Backend):
    starts_at_submit = True  # `free_slots` counts idle workers
    reruns_jobs = False  # a job whose worker dies is reported failed, not run again

    def __init__(self, workers: int, gang: Gang | None = None, gpus: list[str] | None = None,
                 gpu_type: str | None = None):
        if workers < 1:
            raise ValueError(f"backend.workers must be at least 1, got {workers}")
        if gpu_type is not None:
            check_gpu_type(gpu_type, gpu_names())
        start_worker_server()
        self._ctx = mp.get_context("forkserver")
        self._size = workers
        self._gpus = visible_gpus() if gpus is None else list(gpus)
        if gang is not None:
            self._check_fits(gang)
        self._free_gpus = list(self._gpus)
        self._idle: list[_Worker] = []
        self._runs: dict[str, _Run] = {}
        self._queue: deque[Job] = deque()

    def _check_fits(self, gang: Gang) -> None:
        if gang.nodes > 1:
            raise BackendError(
                f"launch.nodes: the local backend runs on this one machine, not {gang.nodes} nodes; "
                "use launch.nodes: 1, or --backend ray / slurm"
            )
        need = gang.gpus_per_task * gang.tasks
        if need > len(self._gpus):
            raise BackendError(
                f"launch.gpus_per_process: a run needs {need} GPUs ({gang.tasks} processes x "
                f"{gang.gpus_per_task}) but this machine shows {len(self._gpus)}; lower it, or set it to 0 for CPU runs"
            )

    def submit(self, job: Job) -> None:
        self._check_fits(job.gang)
        self._queue.append(job)
        self._dispatch()

    def job_ids(self) -> dict[str, str]:
        return {}  # worker processes die with the orchestrator: no job outlives this process

    def in_flight(self) -> int:
        return len(self._queue) + len(self._runs)

    def free_slots(self, gang: Gang) -> int:
        """How many more runs of `gang` would start now rather than wait in the queue: a
        launcher that makes a run's MLflow run only when it can start keeps the run's
        recorded start and duration its own, not its time in the queue."""
        slots = self._size - len(self._runs) - len(self._queue)
        need = gang.gpus_per_task * gang.tasks
        if need:
            slots = min(slots, len(self._free_gpus) // need - len(self._queue))
        return max(0, slots)

    def _dispatch(self) -> None:
        while self._queue and len(self._runs) < self._size:
            gang = self._queue[0].gang
            if gang.gpus_per_task * gang.tasks > len(self._free_gpus):
                return  # waits for a running gang to give its GPUs back
            job = self._queue.popleft()
            run = self._runs[job.task_id] = _Run(job)
            port = free_port()
            for task in range(gang.tasks):
                devices = None
                if gang.gpus_per_task:
                    devices = self._free_gpus[: gang.gpus_per_task]
                    del self._free_gpus[: gang.gpus_per_task]
                    run.gpus += devices
                worker = self._idle.pop() if self._idle else _Worker(self._ctx)
                worker.run, worker.task = run, task
                run.workers[task] = worker
                worker.conn.send((job, dict(os.environ), gang.task_env(task, "127.0.0.1", port, devices)))

    def wait(self, timeout: float) -> list[Done]:
        busy = [w for run in self._runs.values() for w in run.workers.values()]
        if not busy:
            return []
        graced = [r.grace_until for r in self._runs.values() if r.result is not None]
        if graced:
            timeout = max(0.0, min(timeout, min(graced) - time.monotonic()))
        handles = {w.conn: w for w in busy} | {w.proc.sentinel: w for w in busy}
        for ready in wait(list(handles), timeout):
            w = handles[ready]
            if w.run is None:
                continue  # both its pipe and its sentinel were ready
            try:
                if ready is w.conn or w.conn.poll():
                    self._task_ended(w, w.conn.recv())
                    continue
            except (EOFError, OSError):
                pass
            w.proc.join(timeout=1)
            died = f"worker process died ({describe_exit(w.proc.exitcode)})"
            self._task_ended(w, Done(w.run.job.task_id, error=died), dead=True)
        done = self._settle()
        self._dispatch()
        return done

    def _task_ended(self, w: _Worker, done: Done, dead: bool = False) -> None:
        run, task = w.run, w.task
        assert run is not None
        del run.workers[task]
        w.run = None
        if not dead:
            self._idle.append(w)
        if run.result is not None:
            return  # task 0 has returned: the rest only had to end
        if task == 0:
            run.result = done
            run.grace_until = time.monotonic() + GANG_GRACE_S
        elif done.error is not None:
            run.result = Done(done.task_id, error=gang_error(run.job.gang, task, done.error))
            self._stop(run)

    def _settle(self) -> list[Done]:
        """Runs whose task 0 has returned are reported once every task has ended, or
        once their grace is over and the stragglers are stopped."""
        done = []
        for key, run in list(self._runs.items()):
            if run.result is None:
                continue
            if run.workers and time.monotonic() >= run.grace_until:
                self._stop(run)
            if not run.workers:
                del self._runs[key]
                self._free_gpus += run.gpus
                done.append(run.result)
        return done

    def _stop(self, run: _Run) -> None:
        """Kill every task still running in the gang, and what each started."""
        for w in run.workers.values():
            kill_tree(w.proc.pid)
        for w in run.workers.values():
            w.proc.join(timeout=5)
            w.run = None
        run.workers.clear()

    def cancel(self) -> None:
        self._queue.clear()
        for run in self._runs.values():
            self._stop(run)
        self._runs.clear()
        for w in self._idle:
            kill_tree(w.proc.pid)
            w.proc.join(timeout=5)
        self._idle = []
        self._free_gpus = list(self._gpus)

    def close(self) -> None:
        workers = self._idle + [w for run in self._runs.values() for w in run.workers.values()]
        for w in workers:
            try:
                w.conn.send(None)
            except OSError:
                pass
        for w in workers:
            w.proc.join(timeout=10)
            if w.proc.is_alive():
                kill_tree(w.proc.pid)
        self._idle, self._runs = [], {}

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
