"""What a Slurm cluster allows this user, read from the cluster, not guessed.

- `scontrol show config`: MaxArraySize (an array's task indices must be below it) and
  MaxJobCount (the controller's jobs, everybody's).
- `sacctmgr`, where accounting answers: the QOS the jobs run under (the campaign's
  `backend.qos`, else the association's default, else `normal`) and the user's
  associations (with their accounts' own rows, whose limits the user's inherit):
  submitted jobs (MaxSubmitJobsPerUser / MaxSubmit / GrpSubmit), running jobs
  (MaxJobsPerUser / MaxJobs / GrpJobs) and GPUs (MaxTRESPerUser / GrpTRES gres/gpu).
- The campaign's own ceilings: `backend.max_queued`, `backend.max_gpus_in_use`.

A job-array task counts as one job against every queue limit. The campaign keeps its
jobs (queued and running) within the smallest queue limit less `backend.queue_margin`
of it (room for the user's other work; the campaign's own ceiling is taken as it is),
and the GPUs its jobs ask for within the smallest GPU ceiling."""

from __future__ import annotations

import getpass
import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

_TIMEOUT_S = 30
# sacctmgr's columns for each kind of limit, with the words `status` prints for them.
_QOS_QUEUE = {"MaxSubmitPU": "MaxSubmitJobsPerUser", "GrpSubmit": "GrpSubmitJobs",
              "MaxJobsPU": "MaxJobsPerUser", "GrpJobs": "GrpJobs"}
_QOS_GPUS = {"MaxTRESPU": "MaxTRESPerUser", "GrpTRES": "GrpTRES"}
_ASSOC_QUEUE = {"MaxSubmit": "MaxSubmitJobs", "GrpSubmit": "GrpSubmitJobs", "MaxJobs": "MaxJobs", "GrpJobs": "GrpJobs"}
_ASSOC_GPUS = {"GrpTRES": "GrpTRES"}


@dataclass(frozen=True)
class Limit:
    value: int
    source: str  # where it came from, as `status` prints it: "QOS normal MaxSubmitJobsPerUser"
    own: bool = False  # the campaign's own ceiling: no margin taken off it


@dataclass
class SlurmLimits:
    max_array_size: Limit | None = None
    queue: list[Limit] = field(default_factory=list)
    gpus: list[Limit] = field(default_factory=list)
    margin: float = 0.1
    notes: list[str] = field(default_factory=list)  # what could not be read, and why
    # Whether slurmctld answered (`scontrol show config`): a controller restarting says
    # nothing of its limits, which have not gone away meanwhile.
    controller_answered: bool = True

    @property
    def array_tasks(self) -> int | None:
        """The most tasks one array may have: indices 0..MaxArraySize-1, less one, as
        some sites count MaxArraySize itself."""
        return None if self.max_array_size is None else max(1, self.max_array_size.value - 1)

    def _window(self, limits: list[Limit]) -> tuple[int, Limit] | None:
        best = None
        for limit in limits:
            room = limit.value if limit.own else limit.value - math.ceil(limit.value * self.margin)
            room = max(1, room)
            if best is None or room < best[0]:
                best = (room, limit)
        return best

    @property
    def queue_window(self) -> tuple[int, Limit] | None:
        """(jobs this campaign may have queued and running, the limit that sets it)."""
        return self._window(self.queue)

    @property
    def gpu_window(self) -> tuple[int, Limit] | None:
        """(GPUs this campaign's jobs may ask for at once, the limit that sets it)."""
        return self._window(self.gpus)

    def lines(self) -> list[str]:
        """The limits in force and where each came from, for `status` and `run --dry-run`."""
        out = []
        array = self.max_array_size
        if array is not None:
            out.append(f"arrays of at most {self.array_tasks} tasks ({array.source} = {array.value})")
        for what, window, limits in (("jobs queued and running", self.queue_window, self.queue),
                                     ("GPUs asked for", self.gpu_window, self.gpus)):
            if window is None:
                continue
            room, limit = window
            margin = "" if limit.own else f", less the {self.margin:.0%} queue_margin"
            others = ", ".join(f"{x.source} = {x.value}" for x in limits if x is not limit)
            out.append(f"at most {room} {what} ({limit.source} = {limit.value}{margin}"
                       + (f"; also {others}" if others else "") + ")")
        return out + self.notes


def read_limits(qos: str | None = None, account: str | None = None, max_queued: int | None = None,
                max_gpus: int | None = None, margin: float = 0.1) -> SlurmLimits:
    limits = SlurmLimits(margin=margin)
    config = _run(["scontrol", "show", "config"])
    cluster = re.search(r"^\s*ClusterName\s*=\s*(\S+)", config or "", re.M)
    if config is None:
        limits.controller_answered = False
        limits.notes.append("scontrol show config did not answer: MaxArraySize and MaxJobCount unknown")
    else:
        values = parse_config(config)
        if values.get("MaxArraySize", 0) > 0:
            limits.max_array_size = Limit(values["MaxArraySize"], "slurm.conf MaxArraySize")
        if values.get("MaxJobCount", 0) > 0:
            limits.queue.append(Limit(values["MaxJobCount"], "slurm.conf MaxJobCount"))
    if max_queued is not None:
        limits.queue.append(Limit(max_queued, "backend.max_queued", own=True))
    if max_gpus is not None:
        limits.gpus.append(Limit(max_gpus, "backend.max_gpus_in_use", own=True))
    _read_accounting(limits, qos, account, cluster.group(1) if cluster else None)
    return limits


def limits_of(settings) -> SlurmLimits:
    """The limits in force for a campaign's `backend:` section of kind slurm."""
    return read_limits(settings.qos, settings.account, settings.max_queued, settings.max_gpus_in_use,
                       settings.queue_margin)


def parse_config(text: str) -> dict[str, int]:
    """`scontrol show config`'s integer settings, by name."""
    values = {}
    for line in text.splitlines():
        match = re.match(r"^\s*(\w+)\s*=\s*(\d+)\s*$", line)
        if match:
            values[match.group(1)] = int(match.group(2))
    return values


def gpus_of(tres: str) -> int | None:
    """The GPU count of a TRES string (`cpu=8,gres/gpu=4` or `gres/gpu:a100=4`), None without one."""
    counts = [int(m.group(1)) for m in re.finditer(r"gres/gpu(?::[\w.-]+)?=(\d+)", tres)]
    return sum(counts) if counts else None


def _read_accounting(limits: SlurmLimits, qos: str | None, account: str | None, cluster: str | None) -> None:
    """The limits of the user's associations on `cluster` (one database may serve several
    clusters) and of the QOS the jobs run under."""
    if shutil.which("sacctmgr") is None:
        return
    user = os.environ.get("USER") or getpass.getuser()
    header = ["Account", "User", "DefaultQOS", *dict.fromkeys([*_ASSOC_QUEUE, *_ASSOC_GPUS])]

    on = [f"cluster={cluster}"] if cluster else []

    def associations(where: str) -> list[dict[str, str]] | None:
        text = _run(["sacctmgr", "-n", "-P", "show", "assoc", "where", where, *on, "format=" + ",".join(header)])
        if text is None:
            return None
        return [dict(zip(header, line.split("|"), strict=False)) for line in text.splitlines() if line]

    found = associations(f"user={user}")
    if found is None:
        limits.notes.append("sacctmgr did not answer: the user's and QOS's limits unknown")
        return
    mine = [r for r in found if r.get("User") == user and (account is None or r.get("Account") == account)]
    accounts = sorted({r["Account"] for r in mine})
    default_qos = next((r["DefaultQOS"] for r in mine if r.get("DefaultQOS")), "")
    above = associations("account=" + ",".join(accounts)) if accounts else []
    for row in mine + [r for r in above or [] if not r.get("User")]:
        who = f"association {row['Account']}" + (f"/{row['User']}" if row.get("User") else "")
        _add(limits, row, _ASSOC_QUEUE, _ASSOC_GPUS, who)
    name = qos or default_qos or "normal"
    header = ["Name", *dict.fromkeys([*_QOS_QUEUE, *_QOS_GPUS])]
    text = _run(["sacctmgr", "-n", "-P", "show", "qos", name, "format=" + ",".join(header)])
    for line in (text or "").splitlines():
        row = dict(zip(header, line.split("|"), strict=False))
        if row.get("Name") == name:
            _add(limits, row, _QOS_QUEUE, _QOS_GPUS, f"QOS {name}")


def _add(limits: SlurmLimits, row: dict[str, str], queue: dict[str, str], gpus: dict[str, str], who: str) -> None:
    for column, word in queue.items():
        if row.get(column, "").isdigit():
            limits.queue.append(Limit(int(row[column]), f"{who} {word}"))
    for column, word in gpus.items():
        count = gpus_of(row.get(column, ""))
        if count is not None:
            limits.gpus.append(Limit(count, f"{who} {word} gres/gpu"))


def _run(command: list[str]) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None
