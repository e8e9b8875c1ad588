"""The Ray backend: a run of one process is one Ray task; a gang is a placement group
with one actor per task.

A one-task job whose worker dies (SIGKILL, OOM, a lost node) is re-run by Ray up to
`max_retries` times; the job is the same call with the same MLflow run, so a retry
reattaches to it and the run is recorded once.

A gang (`Job.gang`, more than one task) is a placement group with one actor per task,
placed whole, stopped whole, and given up on when Ray cannot place it in time:
`cluster/ray_gang.py`. This backend says since when none of its jobs holds resources,
the gangs' placement clock.

`cancel` stops every job still out, so nothing keeps writing after the orchestrator
gave up on it.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from rcpforge.cluster.backend import Backend, BackendError, Done, Job
from rcpforge.cluster.gang import free_port, run_task
from rcpforge.cluster.ray_gang import RayGangs, outcome
from rcpforge.trainers.contract.gang import Gang


def check_reachable(address: str) -> None:
    """Ray retries an unreachable head for minutes; a plain TCP connect answers in
    seconds, before anything is submitted."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err) or type(err).__name__
        raise BackendError(
            f"backend.address: cannot reach Ray at {address!r} ({reason}); start a head there "
            "(`ray start --head`), fix the address, or use address: local"
        ) from None


_CAPACITY_TTL_S = 30.0


def _connect(address: str, local_num_cpus: int | None) -> tuple[bool, dict[str, Any]]:
    """Join or start Ray: whether this call started a connection we must shut down, and
    the runtime environment each task and actor is given (empty: the job's own holds it).

    Through Ray Client (`ray://`) a job-level runtime environment is applied to the
    client's own server process on the head (seen failing to start once with one), so
    there it goes on each task and actor instead, where it means the same.

    The head starts a server process per client, and Ray 2.60 sometimes loses it at once
    (its log: "SpecificServer startup failed", the process gone within milliseconds, its
    own log empty; seen on a loaded 2-core machine in about one connection in five):
    the client is refused with "Initialization failure from server". A new connection
    gets a new server process, so that refusal is tried again, `_CLIENT_TRIES` times."""
    import ray

    if ray.is_initialized():
        return False, {}
    # Workers import the job's module by name: give them the driver's import path.
    runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}}
    client = address.startswith("ray://")
    if client and importlib.util.find_spec("grpc") is None:
        raise BackendError(f"backend.address: {address!r} is a Ray Client address, which needs Ray's client extra; "
                           "install it (`pip install 'ray[client]'`) or give the head's GCS address host:port")
    kwargs: dict[str, Any] = dict(log_to_driver=False)
    if not client:
        kwargs.update(include_dashboard=False, configure_logging=False, runtime_env=runtime_env)
    if address == "local":
        kwargs["num_cpus"] = local_num_cpus
    else:
        if address != "auto":
            check_reachable(address)
        kwargs["address"] = address
    for tries_left in range(_CLIENT_TRIES - 1 if client else 0, -1, -1):
        try:
            ray.init(**kwargs)
            break
        except Exception as err:  # noqa: BLE001 - ray raises ConnectionError, RuntimeError, ValueError...
            if tries_left and _CLIENT_REFUSED in str(err):
                ray.shutdown()
                time.sleep(_CLIENT_RETRY_S)
                continue
            _unreachable(address, err)
    return True, ({"runtime_env": runtime_env} if client else {})


_CLIENT_TRIES, _CLIENT_RETRY_S = 4, 2.0
_CLIENT_REFUSED = "Initialization failure from server"


def _unreachable(address: str, err: Exception) -> NoReturn:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [type(err).__name__]
    # Ray Client's "Initialization failure from server:" says why on its last line
    why = f"{lines[0]} {lines[-1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    raise BackendError(f"backend.address: cannot reach Ray at {address!r}: {why}") from None


# Ray's resource for a node's GPU type (`accelerator_type:H100`); a bundle asks for a
# sliver of it, as Ray's own `accelerator_type=` option does, so it only picks the node.
_ACCELERATOR_PREFIX = "accelerator_type:"
_ACCELERATOR_SHARE = 0.001


class RayBackend(Backend):
    """`settings` is the campaign's `backend:` section of kind ray (`RayBackendSpec` in
    `sweeps/backends.py` defines every setting and default once); `gang` the campaign's
    run shape, checked against the cluster before anything is submitted; `gpu_type` its
    `launch.gpu_type`."""

    def __init__(self, settings: Any, gang: Gang | None = None, gpu_type: str | None = None):
        self._settings, self._gpu_type = settings, gpu_type
        self._owned, self._task_options = _connect(settings.address, settings.local_num_cpus)
        import ray

        self._ray = ray
        try:
            self._check_resources(gang or Gang())
        except BackendError:
            if self._owned:
                ray.shutdown()
            raise
        self._remote = ray.remote(_run_alone)
        self._capacity, self._capacity_until = 1, 0.0  # runs the cluster holds at once (`free_slots`)
        self._refs: dict[Any, str] = {}  # object ref -> task id, for one-task jobs
        self._gangs = RayGangs(ray, settings, self._task_options, self._per_task, gpu_type)
        # Since when none of this backend's jobs holds resources (None: some do); the
        # placement clock of a waiting gang runs from here.
        self._free_since: float | None = time.monotonic()

    def _per_task(self, gang: Gang) -> tuple[float, float]:
        """CPUs and GPUs of one task: launch.gpus_per_process when set, else num_gpus."""
        return self._settings.num_cpus, float(gang.gpus_per_task or self._settings.num_gpus)

    def _check_resources(self, gang: Gang) -> None:
        """A run that the whole cluster could not hold even empty is refused now. Whether
        its ranks fit the nodes by the placement strategy only Ray can tell, by placing
        it: that is the placement timeout's case."""
        cpus, gpus = self._per_task(gang)
        total = self._ray.cluster_resources()
        for name, each in (("CPU", cpus), ("GPU", gpus)):
            want, have = each * gang.tasks, total.get(name, 0.0)
            if want <= have:
                continue
            field_name = "launch.gpus_per_process" if name == "GPU" and gang.gpus_per_task else (
                "backend.num_cpus" if name == "CPU" else "backend.num_gpus")
            if gang.tasks == 1:
                raise BackendError(f"{field_name}: a run asks for {want:g} {name}s but the Ray cluster has "
                                   f"{have:g}; lower {field_name.split('.')[1]} or add nodes")
            raise BackendError(
                f"{field_name}: a run asks for {want:g} {name}s ({gang.tasks} processes x {each:g}) but the Ray "
                f"cluster has {have:g}; lower {field_name}, launch.nodes or launch.processes_per_node, or add nodes"
            )
        if self._gpu_type and _ACCELERATOR_PREFIX + self._gpu_type not in total:
            types = sorted(k.removeprefix(_ACCELERATOR_PREFIX) for k in total if k.startswith(_ACCELERATOR_PREFIX))
            raise BackendError(
                f"launch.gpu_type: no node of the Ray cluster has accelerator type {self._gpu_type!r} (it has "
                f"{', '.join(types) or 'none'}); write the type as Ray names it, or remove gpu_type"
            )
        self._check_bundle(gang)

    def _check_bundle(self, gang: Gang) -> None:
        if gang.tasks > 1 and not self._bundle(gang):
            raise BackendError(
                "backend.num_cpus: the processes of a gang are placed by the CPUs or GPUs they hold, and these hold "
                "none; set backend.num_cpus above 0"
            )

    def _bundle(self, gang: Gang) -> dict[str, float]:
        cpus, gpus = self._per_task(gang)
        bundle = {name: amount for name, amount in (("CPU", cpus), ("GPU", gpus)) if amount}
        if self._gpu_type:
            bundle[_ACCELERATOR_PREFIX + self._gpu_type] = _ACCELERATOR_SHARE
        return bundle

    def submit(self, job: Job) -> None:
        if job.gang.tasks > 1:
            self._check_bundle(job.gang)
            self._gangs.place(job, self._bundle(job.gang))
            return
        cpus, gpus = self._per_task(job.gang)
        options: dict[str, Any] = dict(num_cpus=cpus, num_gpus=gpus, max_retries=self._settings.max_retries,
                                       retry_exceptions=False, name=job.task_id, **self._task_options)
        if self._gpu_type:
            options["accelerator_type"] = self._gpu_type
        ref = self._remote.options(**options).remote(job.fn, job.args, job.gang, job.secret_env)
        self._refs[ref] = job.task_id
        self._note_holders()

    def job_ids(self) -> dict[str, str]:
        return {}  # Ray tasks and actors end with the driver: no job outlives this process

    def in_flight(self) -> int:
        return len(self._refs) + len(self._gangs.runs)

    def free_slots(self, gang: Gang) -> int:
        """How many more runs to submit now: enough for every slot of the cluster and as
        many again waiting in Ray's queue, so a slot that frees starts the next run at once.
        The launcher makes a run's MLflow run only when it submits it, so a campaign of
        10,000 runs starts at once and collects results from the first, rather than
        registering every run before it reads any (Ray's tasks end with the driver, so
        nothing needs to be submitted ahead of it). The cluster's size is read again every
        `_CAPACITY_TTL_S`: an autoscaled cluster's new nodes are used."""
        now = time.monotonic()
        if now >= self._capacity_until:
            cpus, gpus = self._per_task(gang)
            total = self._ray.cluster_resources()
            fits = [int(total.get(name, 0.0) // (each * gang.tasks)) for name, each in (("CPU", cpus), ("GPU", gpus))
                    if each]
            self._capacity, self._capacity_until = max(1, min(fits, default=1)), now + _CAPACITY_TTL_S
        return max(0, 2 * self._capacity - self.in_flight())

    def wait(self, timeout: float) -> list[Done]:
        done = self._settle()
        owners = self._gangs.refs()
        refs = list(self._refs) + list(owners)
        if not refs:
            return done
        limit = 0.0 if done else max(0.0, min(timeout, self._gangs.next_deadline(self._free_since) - time.monotonic()))
        ready, _ = self._ray.wait(refs, num_returns=1, timeout=limit)
        if ready:  # collect everything else that finished meanwhile too
            ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            if ref in self._refs:
                task_id = self._refs.pop(ref)
                done.append(outcome(self._ray, task_id, ref, "ray task failed"))
            else:
                self._gangs.advance(owners[ref], ref)
        self._note_holders()
        return done + self._settle()

    def _settle(self) -> list[Done]:
        done = self._gangs.settle(self._free_since)
        self._note_holders()
        return done

    def _note_holders(self) -> None:
        holding = bool(self._refs) or self._gangs.holding()
        if holding:
            self._free_since = None
        elif self._free_since is None:
            self._free_since = time.monotonic()

    def cancel(self) -> None:
        if self._owned:
            # Disconnecting the driver ends its Ray job, and Ray kills the workers (the
            # gangs' actors and groups included) of an ended job. A force `ray.cancel` of
            # running tasks can instead race Ray's own completion callback and abort the
            # driver with a failed internal check ("Tried to complete task that was not
            # pending", seen in CI on Ray 2.x).
            self._refs.clear()
            self._gangs.runs.clear()
            self._ray.shutdown()
            self._owned = False
            return
        for ref in list(self._refs):
            try:
                self._ray.cancel(ref, force=True, recursive=True)
            except Exception:  # noqa: BLE001 - already finished or gone
                pass
        self._refs.clear()
        self._gangs.stop_all()

    def close(self) -> None:
        if self._refs or self._gangs.runs:
            self.cancel()
        if self._owned:
            self._ray.shutdown()
            self._owned = False

    def __enter__(self) -> RayBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _run_alone(fn: Callable[..., Any], args: tuple, gang: Gang, secret_env: Mapping[str, str]) -> Any:
    """A one-task job in its Ray worker, with the world-1 rendezvous every run sees. The
    port is found here, on the node the task landed on, not on the driver's."""
    return run_task(fn, args, gang.task_env(0, "127.0.0.1", free_port(), None), secret_env)
