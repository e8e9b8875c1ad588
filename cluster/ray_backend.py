"""The Ray backend: one Ray task per job, with per-run resources and Ray's own retries.

A task whose worker dies (SIGKILL, OOM, a lost node) is re-run by Ray up to
`max_retries` times; the job is the same call with the same MLflow run, so a retry
reattaches to it and the run is recorded once. `cancel` stops every task still out, so
nothing keeps writing after the orchestrator gave up on it.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from typing import Any

from cluster.backend import BackendError, Done, Job


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


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _connect(address: str, local_num_cpus: int | None) -> bool:
    """Join or start Ray; True when this call started a connection we must shut down."""
    import ray

    if ray.is_initialized():
        return False
    # Workers import the job's module by name: give them the driver's import path.
    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    kwargs: dict[str, Any] = dict(
        include_dashboard=False, log_to_driver=False, configure_logging=False,
        runtime_env={"env_vars": env},
    )
    if address == "local":
        kwargs["num_cpus"] = local_num_cpus
    else:
        if address != "auto":
            check_reachable(address)
        kwargs["address"] = address
    try:
        ray.init(**kwargs)
    except Exception as err:  # noqa: BLE001 - ray raises ConnectionError, RuntimeError, ValueError...
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise BackendError(f"backend.address: cannot reach Ray at {address!r}: {first}") from None
    return True


class RayBackend:
    """`settings` is the campaign's `backend:` section of kind ray (`RayBackendSpec` in
    `sweeps/backends.py` defines every setting and default once)."""

    def __init__(self, settings: Any):
        num_cpus, num_gpus = settings.num_cpus, settings.num_gpus
        self._owned = _connect(settings.address, settings.local_num_cpus)
        self._check_resources(num_cpus, num_gpus)
        import ray

        self._ray = ray
        self._options = dict(num_cpus=num_cpus, num_gpus=num_gpus, max_retries=settings.max_retries,
                             retry_exceptions=False)
        self._remote = ray.remote(_call)
        self._refs: dict[Any, str] = {}  # object ref -> task id

    def _check_resources(self, num_cpus: float, num_gpus: float) -> None:
        import ray

        total = ray.cluster_resources()
        for name, want in (("CPU", num_cpus), ("GPU", num_gpus)):
            have = total.get(name, 0.0)
            if want > have:
                if self._owned:
                    ray.shutdown()
                field = "num_cpus" if name == "CPU" else "num_gpus"
                raise BackendError(
                    f"backend.{field}: a run asks for {want:g} {name}s but the Ray cluster has {have:g}; "
                    f"lower {field} or add nodes"
                )

    def submit(self, job: Job) -> None:
        ref = self._remote.options(**self._options, name=job.task_id).remote(job.fn, *job.args)
        self._refs[ref] = job.task_id

    def job_ids(self) -> dict[str, str]:
        return {}  # Ray tasks end with the driver: no job outlives this process

    def in_flight(self) -> int:
        return len(self._refs)

    def wait(self, timeout: float) -> list[Done]:
        if not self._refs:
            return []
        ready, _ = self._ray.wait(list(self._refs), num_returns=1, timeout=timeout)
        if ready:  # collect everything else that finished meanwhile too
            ready, _ = self._ray.wait(list(self._refs), num_returns=len(self._refs), timeout=0)
        done = []
        for ref in ready:
            task_id = self._refs.pop(ref)
            try:
                done.append(Done(task_id, value=self._ray.get(ref)))
            except Exception as err:  # noqa: BLE001 - a dead worker or a task error: this job's error
                # Ray colours its tracebacks; the error is stored in a tag, plain.
                text = _ANSI.sub("", str(err))
                done.append(Done(task_id, error=f"ray task failed: {type(err).__name__}: {text}"))
        return done

    def cancel(self) -> None:
        if self._owned:
            # Disconnecting the driver ends its Ray job, and Ray kills the workers of an
            # ended job. A force `ray.cancel` of running tasks can instead race Ray's own
            # completion callback and abort the driver with a failed internal check
            # ("Tried to complete task that was not pending", seen in CI on Ray 2.x).
            self._refs.clear()
            self._ray.shutdown()
            self._owned = False
            return
        for ref in list(self._refs):
            try:
                self._ray.cancel(ref, force=True, recursive=True)
            except Exception:  # noqa: BLE001 - already finished or gone
                pass
        self._refs.clear()

    def close(self) -> None:
        if self._refs:
            self.cancel()
        if self._owned:
            self._ray.shutdown()
            self._owned = False

    def __enter__(self) -> RayBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _call(fn, *args):
    return fn(*args)
