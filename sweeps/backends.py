"""The `backend:` section of a campaign: where runs execute, one model per kind.

    backend: {kind: local, workers: 2}
    backend: {kind: ray, address: auto, num_cpus: 1, num_gpus: 0, max_retries: 3,
              placement_strategy: SPREAD, placement_timeout_s: 300}
    backend: {kind: slurm, partition: gpu, time_min: 120, gpus_per_node: 1, ...}

These are checked when the file is read (types, ranges); what only the cluster can say
(is the partition there, is the Ray address reachable) is checked by the backend when it
starts, still before anything is submitted. Torch-, ray- and submitit-free.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Common(_Strict):
    # A run that fails (crash, worker killed) is retried until it has this many attempts.
    max_attempts: int = Field(2, ge=1, le=100)
    # A run that reports no eval point for this long is stopped and recorded failed.
    stall_timeout_s: float | None = Field(None, gt=0)


class LocalBackendSpec(_Common):
    kind: Literal["local"] = "local"
    workers: int = Field(2, ge=1, le=512)


_RAY_ADDRESS = re.compile(r"^(local|auto|ray://[^\s:/]+:\d+|[^\s:/]+:\d+)$")


class RayBackendSpec(_Common):
    kind: Literal["ray"]
    # `local` starts a Ray instance for this campaign; `auto` joins the cluster this
    # machine belongs to; `ray://host:port` or `host:port` joins that head.
    address: str = "local"
    # Resources one run holds while it trains.
    num_cpus: float = Field(1.0, ge=0.0)
    num_gpus: float = Field(0.0, ge=0.0)
    # Ray re-runs a task whose worker died this many times before reporting it failed;
    # the re-run reattaches to the same MLflow run.
    max_retries: int = Field(3, ge=0, le=100)
    # CPUs of the instance that `address: local` starts (default: all of this machine).
    local_num_cpus: int | None = Field(None, ge=1)
    # A run of several processes (launch:) is a Ray placement group, one bundle per
    # process, placed all at once by this Ray strategy: PACK (as few nodes as possible),
    # SPREAD (as many as possible), STRICT_PACK (one node), STRICT_SPREAD (one per node).
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    # Seconds such a run may wait to be placed, counted while none of the campaign's own
    # runs holds resources, before it is recorded failed as too big for the cluster.
    placement_timeout_s: float = Field(300.0, gt=0)

    @field_validator("address")
    @classmethod
    def _address_form(cls, value: str) -> str:
        if not _RAY_ADDRESS.match(value):
            raise ValueError(f"{value!r} is not a Ray address; use local, auto, ray://host:port or host:port")
        return value


class SlurmBackendSpec(_Common):
    kind: Literal["slurm"]
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_min: int = Field(60, ge=1)
    nodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(0, ge=0)
    cpus_per_task: int = Field(1, ge=1)
    mem_gb: float | None = Field(None, gt=0)
    # Runs go out as job arrays per launch wave, at most this many running at once.
    array_parallelism: int = Field(64, ge=1)
    # Ceilings of the campaign's own, below the cluster's limits (which are read from it):
    # its jobs queued and running, and the GPUs they ask for, at most this many at once.
    max_queued: int | None = Field(None, ge=1)
    max_gpus_in_use: int | None = Field(None, ge=1)
    # The share of each limit read from the cluster left to the user's other work.
    queue_margin: float = Field(0.1, ge=0.0, lt=1.0)
    # Extra `#SBATCH --key=value` lines, e.g. {constraint: a100, exclusive: true}.
    additional_parameters: dict[str, str | int | float | bool] = Field(default_factory=dict)
    # Shell lines run before the worker starts: module loads, environment.
    setup: list[str] = Field(default_factory=list)
    # Requeues at a time limit (a preemption's requeue is not counted, unless submitit takes
    # its USR2 for the time limit: see docs/clusters.md); the run resumes from its checkpoint.
    max_requeues: int = Field(3, ge=0, le=100)
    # Seconds before the time limit at which Slurm signals the job to checkpoint.
    signal_delay_s: int = Field(60, ge=0)
    # submitit's job folder (pickles, logs); relative to the campaign file.
    folder: str = ".rcpforge/slurm"

    @field_validator("partition", "account", "qos")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[A-Za-z0-9_.,-]+$", value):
            raise ValueError(f"{value!r} is not a Slurm name (letters, digits, _ . , -)")
        return value


BackendSpec = Annotated[Union[LocalBackendSpec, RayBackendSpec, SlurmBackendSpec], Field(discriminator="kind")]
BACKEND_KINDS = ("local", "ray", "slurm")
_MODELS: dict[str, type[_Common]] = {"local": LocalBackendSpec, "ray": RayBackendSpec, "slurm": SlurmBackendSpec}


def default_kind(value: Any) -> Any:
    """`backend: {workers: 4}` (no kind) means the local backend, as it always did."""
    if isinstance(value, dict) and "kind" not in value:
        return {"kind": "local", **value}
    return value


def with_kind(current: LocalBackendSpec | RayBackendSpec | SlurmBackendSpec, kind: str):
    """The backend for `--backend KIND`: the campaign's own section when it is of that
    kind, else that kind's defaults (keeping `max_attempts`)."""
    if kind not in _MODELS:
        raise ValueError(f"--backend: unknown kind {kind!r}; use one of {', '.join(BACKEND_KINDS)}")
    if current.kind == kind:
        return current
    return _MODELS[kind](kind=kind, max_attempts=current.max_attempts)
