"""The Ray backend's gangs: a job of more than one task (`Job.gang`), from its
placement to its end.

A gang gets a placement group of one bundle per task (its CPUs, its GPUs, the campaign's
`launch.gpu_type`), which Ray places whole or not at all by `placement_strategy`. Once
it is placed, one actor per bundle runs its task; task 0's actor names the rendezvous
(its node's IP and a free port there). A gang gets no Ray retries: a failed gang is one
failed attempt, which the campaign retries. When a task raises or its actor dies before
task 0 has returned, every actor of the gang is killed and its group removed. `ray.kill`
ends the actor's process only, and the driver cannot reach another node's processes: a
command trainer's program (its own session) is ended by the parent-death signal the
command trainer arms on it.

A gang Ray cannot place within `placement_timeout_s` is that job's error, and the other
jobs go on. The clock runs only while none of the backend's jobs holds resources (the
backend says since when: `free_since`): a gang queued behind the campaign's own runs
waits for them however long they train, and only one that an otherwise idle campaign
still cannot place is given up on.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rcpforge.cluster.backend import Done, Job
from rcpforge.cluster.gang import GANG_GRACE_S, free_port, gang_error, run_task
from rcpforge.trainers.contract.gang import Gang

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def outcome(ray: Any, task_id: str, ref: Any, failed: str) -> Done:
    """A finished task's or actor call's ref as the job's completion."""
    try:
        return Done(task_id, value=ray.get(ref))
    except Exception as err:  # noqa: BLE001 - a dead worker or a task error: this job's error
        # Ray colours its tracebacks; the error is stored in a tag, plain.
        return Done(task_id, error=f"{failed}: {type(err).__name__}: {_ANSI.sub('', str(err))}")


@dataclass
class _GangRun:
    """One gang job in flight: placing (no actors yet), finding its rendezvous (the
    `rendezvous` ref of task 0's actor), then running (one ref per task still out)."""

    job: Job
    group: Any  # ray.util.placement_group.PlacementGroup
    placed: Any  # the group's ready() ref
    queued_at: float
    actors: list[Any] = field(default_factory=list)
    rendezvous: Any = None
    tasks: dict[Any, int] = field(default_factory=dict)  # ref -> gang task
    result: Done | None = None
    grace_until: float = 0.0

    def refs(self) -> list[Any]:
        if self.result is None and not self.actors:
            return [self.placed]
        if self.rendezvous is not None:
            return [self.rendezvous]
        return list(self.tasks)


class RayGangs:
    """The gangs of one RayBackend in flight, by task id. `per_task` gives the CPUs and
    GPUs of one task of a gang; `task_options` go on every actor."""

    def __init__(self, ray: Any, settings: Any, task_options: dict[str, Any],
                 per_task: Callable[[Gang], tuple[float, float]], gpu_type: str | None):
        self._ray, self._settings, self._task_options = ray, settings, task_options
        self._per_task, self._gpu_type = per_task, gpu_type
        self._actor = ray.remote(_GangTask)
        self.runs: dict[str, _GangRun] = {}

    def place(self, job: Job, bundle: dict[str, float]) -> None:
        from ray.util.placement_group import placement_group

        group = placement_group([dict(bundle) for _ in range(job.gang.tasks)],
                                strategy=self._settings.placement_strategy, name=job.task_id)
        self.runs[job.task_id] = _GangRun(job, group, group.ready(), time.monotonic())

    def refs(self) -> dict[Any, _GangRun]:
        """Every ref the gangs wait on, with its gang."""
        return {ref: run for run in self.runs.values() for ref in run.refs()}

    def holding(self) -> bool:
        """Whether some gang holds resources (its actors)."""
        return any(run.actors for run in self.runs.values())

    def advance(self, run: _GangRun, ref: Any) -> None:
        """One of the gang's refs is ready: its group is placed, its rendezvous is known,
        or one of its tasks has ended."""
        job, gang = run.job, run.job.gang
        if ref == run.placed:
            cpus, gpus = self._per_task(gang)
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            for index in range(gang.tasks):
                where = PlacementGroupSchedulingStrategy(run.group, placement_group_bundle_index=index)
                run.actors.append(self._actor.options(num_cpus=cpus, num_gpus=gpus, scheduling_strategy=where,
                                                      max_restarts=0, max_task_retries=0,
                                                      **self._task_options).remote())
            run.rendezvous = run.actors[0].rendezvous.remote()
        elif ref == run.rendezvous:
            run.rendezvous = None
            try:
                host, port = self._ray.get(ref)
            except Exception as err:  # noqa: BLE001 - task 0's actor could not start
                self._fail(run, 0, f"ray actor failed: {type(err).__name__}: {_ANSI.sub('', str(err))}")
                return
            # Ray sets CUDA_VISIBLE_DEVICES itself for an actor that holds GPUs.
            run.tasks = {actor.run.remote(job.fn, job.args, gang.task_env(task, host, port, None), job.secret_env): task
                         for task, actor in enumerate(run.actors)}
        else:
            task = run.tasks.pop(ref, None)
            if task is None:
                return  # ended as the gang was stopped: the gang's error is already set
            done = outcome(self._ray, job.task_id, ref, "ray actor failed")
            if run.result is not None:
                return  # task 0 has returned: the others only had to end
            if done.error is not None:
                self._fail(run, task, done.error)
            elif task == 0:
                run.result = done
                run.grace_until = time.monotonic() + GANG_GRACE_S

    def _fail(self, run: _GangRun, task: int, error: str) -> None:
        run.result = Done(run.job.task_id, error=gang_error(run.job.gang, task, error))
        self._stop(run)

    def _stop(self, run: _GangRun) -> None:
        """Kill every actor of the gang (idle or not) and give its bundles back."""
        for actor in run.actors:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        from ray.util.placement_group import remove_placement_group

        try:
            remove_placement_group(run.group)
        except Exception:  # noqa: BLE001 - already removed
            pass
        run.actors, run.tasks, run.rendezvous = [], {}, None

    def settle(self, free_since: float | None) -> list[Done]:
        """Gangs that are over: placement given up, a task failed, or task 0 returned
        and the others ended or ran out of grace."""
        done, now = [], time.monotonic()
        for task_id, run in list(self.runs.items()):
            if run.result is None and not run.actors and now >= self._placement_deadline(run, free_since):
                run.result = Done(task_id, error=self._unplaceable(run.job.gang))
                self._stop(run)
            if run.result is None:
                continue
            if run.tasks and now < run.grace_until:
                continue
            self._stop(run)
            del self.runs[task_id]
            done.append(run.result)
        return done

    def stop_all(self) -> None:
        for run in self.runs.values():
            self._stop(run)
        self.runs.clear()

    def _placement_deadline(self, run: _GangRun, free_since: float | None) -> float:
        if free_since is None:
            return float("inf")  # our own runs may be what it waits for
        return max(run.queued_at, free_since) + self._settings.placement_timeout_s

    def next_deadline(self, free_since: float | None) -> float:
        """When a gang's placement is given up on or its grace ends, whichever is first."""
        deadlines = [self._placement_deadline(run, free_since) for run in self.runs.values() if not run.actors]
        deadlines += [run.grace_until for run in self.runs.values() if run.result is not None]
        return min(deadlines, default=float("inf"))

    def _unplaceable(self, gang: Gang) -> str:
        """What the gang asked and what the cluster has, for the job's error."""
        total, free = self._ray.cluster_resources(), self._ray.available_resources()
        nodes = [n.get("Resources", {}) for n in self._ray.nodes() if n.get("Alive")]
        cpus, gpus = self._per_task(gang)
        each = f"{cpus:g} CPUs" + (f" + {gpus:g} GPUs" if gpus else "") + (
            f" on {self._gpu_type}" if self._gpu_type else "")
        has = "; ".join(
            f"{total.get(name, 0.0):g} {name}s over {len(nodes)} nodes, at most "
            f"{max((n.get(name, 0.0) for n in nodes), default=0.0):g} on one, {free.get(name, 0.0):g} free now"
            for name in ("CPU", "GPU") if name == "CPU" or gpus or total.get(name))
        what = "node programs" if gang.per_node else "ranks"
        return (
            f"the gang of {gang.tasks} {what} x {each} cannot be placed on the Ray cluster with "
            f"placement_strategy {self._settings.placement_strategy} (it has {has} over {len(nodes)} nodes) within "
            f"backend.placement_timeout_s={self._settings.placement_timeout_s:g}: lower launch.nodes / "
            "launch.processes_per_node or each rank's backend.num_cpus / launch.gpus_per_process, choose another "
            "backend.placement_strategy, or add nodes"
        )


class _GangTask:
    """The process of one gang task: a Ray actor in its bundle of the gang's group."""

    def rendezvous(self) -> tuple[str, int]:
        """This node's address and a port free on it, for task 0's MASTER_ADDR/PORT."""
        import ray

        host = ray.util.get_node_ip_address()
        return host, free_port(host)

    def run(self, fn: Callable[..., Any], args: tuple, env: dict[str, str], secret_env: Mapping[str, str]) -> Any:
        return run_task(fn, args, env, secret_env)
