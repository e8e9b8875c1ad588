"""From a campaign's `backend:` section to a running backend, and which run keys a
cluster is still working on. The cluster packages are imported only for their kind, so
a local campaign never imports ray or submitit."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Collection, Iterator

from rcpforge.cluster.backend import Backend, BackendError
from rcpforge.orchestrator.ledger import LedgerEntry
from rcpforge.sweeps.spec import Campaign

SLURM_PREFIX = "slurm:"


def check_backend(campaign: Campaign) -> None:
    """The quick checks of what only the cluster can tell (is Slurm there, the partition,
    is the Ray head reachable; on this machine, what the trainer needs of it, such as a
    GPU), before the tracking store or the cluster is touched. A local campaign that
    passes them also starts its workers' fork server here, so that its imports overlap
    the opening of the store that comes next."""
    spec = campaign.backend
    if spec.kind == "local":
        from rcpforge.trainers.registry import TrainerError, check_local_host

        try:
            for trainer, _ in campaign.trainers():  # each model's settings (a model may ask for a GPU)
                check_local_host(trainer)
        except TrainerError as err:
            raise BackendError(str(err)) from None
        _start_local_workers_server(campaign)
    elif spec.kind == "slurm":
        from rcpforge.cluster.slurm_states import preflight

        preflight(spec.partition)
    elif spec.kind == "ray" and spec.address not in ("local", "auto"):
        from rcpforge.cluster.ray_backend import check_reachable

        check_reachable(spec.address)


def _start_local_workers_server(campaign: Campaign) -> None:
    """The local workers' fork server starts importing what runs need (the executor,
    each built-in trainer's framework, MLflow's client where workers write through it)
    while the tracking store opens."""
    from rcpforge.cluster.local import start_worker_server
    from rcpforge.trainers.contract.uri import DATABASE_SCHEMES, scheme_of
    from rcpforge.trainers.registry import builtin_trainer_module

    trainers = {builtin_trainer_module(trainer["kind"]) for trainer, _ in campaign.trainers()}
    # On a database store a worker writes its run without MLflow (tracking/direct.py):
    # importing it would only delay the first run, by some 2 s of CPU.
    client = [] if scheme_of(campaign.tracking_uri) in DATABASE_SCHEMES else ["mlflow"]
    start_worker_server(["rcpforge.orchestrator.execute", *client, *sorted(t for t in trainers if t)])


def backend_class(kind: str) -> type[Backend]:
    """The class of a `backend:` kind, for what it declares before one is started."""
    if kind == "ray":
        from rcpforge.cluster.ray_backend import RayBackend

        return RayBackend
    if kind == "slurm":
        from rcpforge.cluster.slurm_backend import SlurmBackend

        return SlurmBackend
    from rcpforge.cluster.local import LocalBackend

    return LocalBackend


def make_backend(campaign: Campaign, workers: int | None = None) -> Backend:
    """Start the campaign's backend; a bad setting raises BackendError here, before
    anything is submitted."""
    spec = campaign.backend
    if spec.kind == "ray":
        from rcpforge.cluster.ray_backend import RayBackend

        return RayBackend(spec, gang=campaign.gang, gpu_type=campaign.launch.gpu_type)
    if spec.kind == "slurm":
        from rcpforge.cluster.slurm_backend import SlurmBackend

        return SlurmBackend(spec, campaign.base_dir / spec.folder, job_name=f"rcpforge-{campaign.name}",
                            gang=campaign.gang, gpu_type=campaign.launch.gpu_type)
    from rcpforge.cluster.local import LocalBackend

    return LocalBackend(workers or spec.workers, gang=campaign.gang, gpu_type=campaign.launch.gpu_type)


@contextmanager
def running_backend(campaign: Campaign, workers: int | None = None) -> Iterator[Backend]:
    """The campaign's backend for the time of a launch: on any exception (Ctrl-C
    included) every job in flight is cancelled; closed on the way out either way."""
    backend = make_backend(campaign, workers)
    try:
        yield backend
    except BaseException:
        backend.cancel()
        raise
    finally:
        backend.close()


def slurm_jobs(ledger: dict[str, LedgerEntry]) -> dict[str, str]:
    """Run key -> Slurm job id, for keys without an outcome whose attempt went to Slurm."""
    return {
        key: e.backend_job.removeprefix(SLURM_PREFIX)
        for key, e in ledger.items()
        if not e.status.is_outcome and e.backend_job and e.backend_job.startswith(SLURM_PREFIX)
    }


def slurm_states(ledger: dict[str, LedgerEntry]) -> dict[str, str]:
    """Run key -> Slurm state of its job (`UNLISTED` once Slurm forgot it)."""
    jobs = slurm_jobs(ledger)
    if not jobs:
        return {}
    from rcpforge.cluster.slurm_states import job_states

    states = job_states(list(jobs.values()))
    return {key: states.get(job, "UNLISTED").split()[0] for key, job in jobs.items()}


def slurm_limit_lines(campaign: Campaign) -> list[str]:
    """The limits a Slurm campaign runs within, each with where it came from, for `status`
    and `run --dry-run` (none for another backend)."""
    if campaign.backend.kind != "slurm":
        return []
    from rcpforge.cluster.slurm_limits import limits_of

    return limits_of(campaign.backend).lines()


def slurm_pending_reasons(ledger: dict[str, LedgerEntry], states: dict[str, str]) -> dict[str, str]:
    """Run key -> why Slurm keeps its job pending, for the keys `states` says are PENDING."""
    jobs = {key: job for key, job in slurm_jobs(ledger).items() if states.get(key) == "PENDING"}
    if not jobs:
        return {}
    from rcpforge.cluster.slurm_states import pending_reasons

    reasons = pending_reasons(list(jobs.values()))
    return {key: reasons[job] for key, job in jobs.items() if job in reasons}


def live_of(states: dict[str, str]) -> set[str]:
    """The keys of `slurm_states` whose job has neither ended nor been forgotten."""
    from rcpforge.cluster.slurm_states import ENDED

    return {key for key, state in states.items() if state not in ENDED and state != "UNLISTED"}


def ledger_and_states(read: Callable[[], dict[str, LedgerEntry]], among: Collection[str] | None = None,
                      ) -> tuple[dict[str, LedgerEntry], dict[str, str]]:
    """The ledger (`read()`) and the Slurm states of its jobs (of the keys `among`, where
    given), in the order in which the two agree.

    A job records its run's outcome before it ends. A ledger read before Slurm is asked
    can miss the outcome of a job that ends between the two, and the run then looks like
    one whose job ended without an outcome: launched again, or marked failed over the
    outcome it recorded (seen: a detached look submitted a run again that had converged a
    moment before). So where a job has ended the ledger is read again, after Slurm
    answered: it then holds every outcome that job will ever record."""
    from rcpforge.cluster.slurm_states import ENDED

    ledger = read()
    states = slurm_states(ledger if among is None else {k: ledger[k] for k in among if k in ledger})
    if any(state in ENDED or state == "UNLISTED" for state in states.values()):
        ledger = read()
    return ledger, states
