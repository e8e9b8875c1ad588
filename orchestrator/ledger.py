"""The ledger and the plan of a campaign.

The ledger is the tracking store itself: one MLflow run per run key, whose status tag
says whether the key has an outcome (`LedgerEntry`: what the store records of one key;
`Tracking.ledger` reads them). The plan of a campaign is its desired runs minus the
ledger (`make_plan`): a key with an outcome is never launched again; a key whose run
failed is launched again until it has `backend.max_attempts` attempts of its own (a
preempted Slurm job that Slurm requeues stays within its attempt, never counted; one
preempted for good, under PreemptMode=CANCEL, ends its attempt; attempts that a
configuration error of the campaign failed or cancelled are free, `LedgerEntry.charged`);
a key whose cluster job is still live (submitted by a detached or killed orchestrator)
is followed, not launched again, so a key is never run twice at once.

The desired runs are the campaign engine's to say (`orchestrator/campaign.py`: every run
of a fixed campaign, the looks' runs of an adaptive one); how many runs a campaign needs
for a precision is `orchestrator/sizing.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rcpforge.trainers.contract import RunSpec, RunStatus


@dataclass(frozen=True)
class LedgerEntry:
    """What the ledger records of one run key: its MLflow run, status and attempts, the
    cluster job of its latest attempt, its cell."""

    run_id: str
    run_key: str
    status: RunStatus
    attempts: int
    backend_job: str | None = None
    recipe: str = ""
    batch_size: int = 0
    model: str = ""  # the run's model ("" without a model axis): its cell is (model, recipe, batch size)
    # False for a run made just before the store went away: its hyperparameters were
    # never logged, and the launcher logs them when it takes the run up again
    has_params: bool = True
    # The run's final metrics (tokens_trained, run_wall_s, core_hours or gpu_hours,
    # samples_to_target), written with its outcome: what `rcpforge status` counts its
    # cost and ETA from, and what an adaptive campaign's looks decide on.
    metrics: dict[str, float] = field(default_factory=dict)
    # A failed run's kind of error (`rcpforge.error_kind`).
    error_kind: str | None = None
    # Attempts that were the campaign's failures, not the run's (`rcpforge.free_attempts`):
    # those a configuration error failed or its stop cancelled. They do not count.
    free_attempts: int = 0
    error: str | None = None  # a failed run's error (`rcpforge.error`): what `rcpforge status` shows of it
    billed: str | None = None  # where its cost came from, once Slurm's accounting billed it (`rcpforge.billed`)
    accelerator: str | None = None  # the GPUs it ran on, by name (`rcpforge.accelerator`)

    @property
    def charged(self) -> int:
        """The attempts that count against backend.max_attempts: the run's own failures."""
        return max(0, self.attempts - self.free_attempts)


@dataclass
class Plan:
    """The desired runs sorted by what the ledger says of each."""

    specs: list[RunSpec]
    launch: list[RunSpec]
    done: int  # keys with an outcome
    gave_up: list[RunSpec]  # failed keys with no attempts left
    # keys whose job is still live on the cluster (an earlier, detached or killed
    # orchestrator submitted it): followed, never launched twice
    elsewhere: list[RunSpec] = field(default_factory=list)


def make_plan(
    specs: list[RunSpec], ledger: dict[str, LedgerEntry], max_attempts: int, retry_failed: bool,
    live: frozenset[str] | set[str] = frozenset(),
) -> Plan:
    """The desired runs `specs` minus the `ledger`; `live`: the keys whose cluster job is
    still live."""
    launch, gave_up, done, elsewhere = [], [], 0, []
    for spec in specs:
        entry = ledger.get(spec.run_key)
        if entry is None:
            launch.append(spec)
        elif entry.status.is_outcome:
            done += 1
        elif spec.run_key in live:
            elsewhere.append(spec)
        elif entry.status is RunStatus.failed and entry.charged >= max_attempts and not retry_failed:
            gave_up.append(spec)
        else:
            launch.append(spec)
    return Plan(specs, launch, done, gave_up, elsewhere)
