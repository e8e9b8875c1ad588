"""What Slurm's accounting database says a job was allocated, and for how long: the
compute the cluster bills, which is not what the job asked for. A job gets more than it
asked where a site rounds up (whole nodes, whole sockets, GPUs bound to their CPUs), and
it holds its allocation from its start to its end, imports and teardown included, not only
while the run trains.

`sacct -X` gives one line a job (the allocation, not its steps): its `AllocTRES`
(`billing=2,cpu=2,gres/gpu=4,gres/gpu:h100=4,mem=64G,node=1`; `gres/gpu` appears where the
site lists it in `AccountingStorageTRES`) and its `ElapsedRaw` in seconds."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

# sacct's states of a job that still holds (or waits for) its allocation: not billed yet.
_NOT_ENDED = {"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED"}


@dataclass(frozen=True)
class Allocation:
    """One ended job's allocation as accounting recorded it."""

    job_id: str
    cpus: int
    gpus: int  # 0 where the job held none, or the site does not account gres/gpu
    gpu_types: tuple[str, ...]  # the typed GPU TRES (`gres/gpu:h100`), sorted: ("h100",)
    elapsed_s: float

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.elapsed_s / 3600.0

    @property
    def core_hours(self) -> float:
        return self.cpus * self.elapsed_s / 3600.0

    def describe(self) -> str:
        """What the run's `rcpforge.billed` tag says: where the figure came from."""
        held = f"gres/gpu={self.gpus}" + (f" ({', '.join(self.gpu_types)})" if self.gpu_types else "") \
            if self.gpus else f"cpu={self.cpus}"
        return f"sacct {self.job_id}: AllocTRES {held} x ElapsedRaw {self.elapsed_s:g} s"


def parse_alloc_tres(text: str) -> tuple[int, int, tuple[str, ...]]:
    """(cpus, gpus, GPU types) of an AllocTRES value; the untyped `gres/gpu` count where
    there is one, else the sum of the typed ones."""
    cpus, untyped, typed = 0, None, {}
    for item in text.split(","):
        name, _, value = item.strip().partition("=")
        if not value.isdigit():
            continue
        if name == "cpu":
            cpus = int(value)
        elif name == "gres/gpu":
            untyped = int(value)
        elif name.startswith("gres/gpu:"):
            typed[name.removeprefix("gres/gpu:")] = int(value)
    gpus = untyped if untyped is not None else sum(typed.values())
    return cpus, gpus, tuple(sorted(typed))


def parse_allocations(text: str) -> dict[str, Allocation]:
    """`JobID|AllocTRES|ElapsedRaw|State` lines -> the ended jobs' allocations."""
    found = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 4 or not parts[2].strip().isdigit():
            continue
        job_id, tres, elapsed, state = (p.strip() for p in parts)
        if not state or state.split()[0] in _NOT_ENDED:
            continue
        cpus, gpus, types = parse_alloc_tres(tres)
        found[job_id] = Allocation(job_id, cpus, gpus, types, float(elapsed))
    return found


def ended_allocations(job_ids: list[str]) -> dict[str, Allocation] | None:
    """Job id (`123` or `123_4`) -> its allocation, for the jobs of `job_ids` that have
    ended and that accounting has heard of; None where accounting does not answer (no
    `sacct`, or it exits non-zero: accounting storage disabled, slurmdbd down)."""
    if shutil.which("sacct") is None:
        return None
    bases = sorted({j.split("_")[0] for j in job_ids})
    try:
        proc = subprocess.run(["sacct", "-n", "-P", "-X", "-j", ",".join(bases),
                               "-o", "JobID,AllocTRES,ElapsedRaw,State"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    wanted = set(job_ids)
    return {job: a for job, a in parse_allocations(proc.stdout).items() if job in wanted}
