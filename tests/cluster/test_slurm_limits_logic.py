"""How rcpforge reads a Slurm cluster's limits and the controller's answers (logic only;
tests/cluster/test_slurm_limits.py runs campaigns against the real limits cluster)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rcpforge.cluster.slurm_limits import Limit, SlurmLimits, gpus_of, parse_config
from rcpforge.cluster.slurm_submit import kind_of, refusal
from rcpforge.trainers.contract.gang import Gang

CONFIG = """Configuration data as of 2026-12-07T01:00:00
AccountingStorageEnforce = associations,limits,qos
MaxArraySize            = 11
MaxJobCount             = 10000
SlurmctldHost[0]        = localhost(127.0.0.1)
"""


def test_the_controllers_integer_settings_are_read_by_name():
    values = parse_config(CONFIG)
    assert values["MaxArraySize"] == 11 and values["MaxJobCount"] == 10000
    assert "SlurmctldHost[0]" not in values


@pytest.mark.parametrize(("tres", "gpus"), [("cpu=8,gres/gpu=4", 4), ("gres/gpu:a100=2,gres/gpu:h100=6", 8),
                                            ("cpu=8,mem=100G", None), ("", None)])
def test_gpu_counts_come_from_tres_strings(tres, gpus):
    assert gpus_of(tres) == gpus


def test_arrays_stay_below_max_array_size_and_the_window_keeps_a_margin_off_the_clusters_limits():
    limits = SlurmLimits(max_array_size=Limit(11, "slurm.conf MaxArraySize"),
                         queue=[Limit(10000, "slurm.conf MaxJobCount"),
                                Limit(15, "QOS rcpf-limited MaxSubmitJobsPerUser")], margin=0.1)
    assert limits.array_tasks == 10
    room, limit = limits.queue_window
    assert (room, limit.source) == (13, "QOS rcpf-limited MaxSubmitJobsPerUser")  # 15 less ceil(10%)
    # the campaign's own ceiling is taken as it is, and wins where it is lower
    limits.queue.append(Limit(12, "backend.max_queued", own=True))
    assert limits.queue_window[0] == 12
    assert any("at most 12 jobs queued and running (backend.max_queued = 12" in line for line in limits.lines())
    assert SlurmLimits(queue=[Limit(1, "QOS q MaxSubmitJobsPerUser")]).queue_window[0] == 1  # never none


@pytest.mark.parametrize("line", [
    "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
    "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
    "sbatch: error: Batch job submission failed: Resource temporarily unavailable",
    "sbatch: error: QOSMaxSubmitJobPerUserLimit",
    "sbatch: error: AssocMaxSubmitJobLimit",
])
def test_a_busy_or_full_controllers_answers_are_transient(line):
    assert kind_of(line) is None


@pytest.mark.parametrize(("line", "field", "value"), [
    ("sbatch: error: Batch job submission failed: Invalid qos specification", "qos", "nosuch"),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
     "account", "nobody"),
    ("sbatch: error: Batch job submission failed: Invalid partition name specified", "partition", "gpu"),
    ("sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)",
     "time_min", 60),
])
def test_a_permanent_refusal_names_the_campaign_field_and_its_value(line, field, value):
    settings = SimpleNamespace(qos="nosuch", account="nobody", partition="gpu", time_min=60, additional_parameters={})
    assert kind_of(line) == field
    message = refusal(line, field, settings)
    assert message.startswith(f"backend.{field} ({value!r}): Slurm refused the jobs: {line}")


def test_a_policy_refusal_is_told_apart_from_a_transient_one():
    line = ("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, "
            "user's size and/or time limits)")
    assert kind_of(line) == "policy"


def test_the_window_counts_jobs_and_the_gpus_they_ask_for(tmp_path, monkeypatch):
    from rcpforge.cluster import slurm_backend
    from rcpforge.cluster.backend import Job
    from rcpforge.orchestrator.backends import make_backend
    from rcpforge.sweeps.spec import parse_campaign
    from tests.helpers.backend_jobs import echo
    from tests.helpers.campaigns import tiny_campaign

    monkeypatch.setattr(slurm_backend, "preflight", lambda partition: None)
    limits = SlurmLimits(queue=[Limit(3, "backend.max_queued", own=True)],
                         gpus=[Limit(8, "backend.max_gpus_in_use", own=True)])
    monkeypatch.setattr(slurm_backend, "limits_of", lambda settings: limits)
    campaign = parse_campaign(tiny_campaign(backend={"kind": "slurm", "gpus_per_node": 4}), tmp_path)
    backend = make_backend(campaign)
    gang = campaign.gang
    assert backend.free_slots(gang) == 2  # 8 GPUs, 4 a job: the GPU ceiling binds before the 3 jobs
    backend.submit(Job("a", echo, (1,), gang=gang))
    assert backend.free_slots(gang) == 1
    limits.gpus.clear()
    assert backend.free_slots(gang) == 2  # then the queue's 3 jobs, one of them in flight


def test_a_nearly_full_queue_is_topped_up_a_tenth_at_a_time(tmp_path, monkeypatch):
    from rcpforge.cluster import slurm_backend
    from rcpforge.cluster.backend import Job
    from rcpforge.orchestrator.backends import make_backend
    from rcpforge.sweeps.spec import parse_campaign
    from tests.helpers.backend_jobs import echo
    from tests.helpers.campaigns import tiny_campaign

    monkeypatch.setattr(slurm_backend, "preflight", lambda partition: None)
    monkeypatch.setattr(slurm_backend, "limits_of", lambda settings: SlurmLimits(
        queue=[Limit(100, "backend.max_queued", own=True)]))
    backend = make_backend(parse_campaign(tiny_campaign(backend={"kind": "slurm"}), tmp_path))
    gang = Gang()
    assert backend.free_slots(gang) == 100  # nothing out: all of it
    for i in range(100):  # the first fill goes to the top
        assert backend.free_slots(gang) == 100 - i
        backend.submit(Job(f"r{i}", echo, (i,), gang=gang))
    assert backend.free_slots(gang) == 0
    for _ in range(9):
        backend._queued.pop()  # noqa: SLF001 - a run's job ended
        assert backend.free_slots(gang) == 0  # fewer places than a tenth: wait for more
    backend._queued.pop()  # noqa: SLF001
    assert backend.free_slots(gang) == 10
    backend.submit(Job("again", echo, (0,), gang=gang))
    assert backend.free_slots(gang) == 9  # and once begun, to the top


def test_squeue_is_asked_every_few_seconds_and_at_every_poll_while_a_job_may_be_lost(tmp_path, monkeypatch):
    from rcpforge.cluster import slurm_backend
    from rcpforge.orchestrator.backends import make_backend
    from rcpforge.sweeps.spec import parse_campaign
    from tests.helpers.campaigns import tiny_campaign

    monkeypatch.setattr(slurm_backend, "preflight", lambda partition: None)
    asked: list[list[str]] = []
    states = {"7_0": "RUNNING", "7_1": "RUNNING"}
    monkeypatch.setattr(slurm_backend, "asked_job_states", lambda ids: asked.append(ids) or dict(states))
    backend = make_backend(parse_campaign(tiny_campaign(backend={"kind": "slurm"}), tmp_path))
    backend.poll_s = 0.0
    for task, job in (("a", "7_0"), ("b", "7_1")):
        paths = SimpleNamespace(result_pickle=tmp_path / f"{job}.pkl", stdout=tmp_path / f"{job}.log")
        reporter = SimpleNamespace(job_id=job, paths=paths)
        handle = SimpleNamespace(job_id=job, task=lambda n, reporter=reporter: reporter)
        backend._jobs[task] = slurm_backend._Out(handle, Gang())  # noqa: SLF001
    backend._leaving.add("6_3")  # noqa: SLF001 - a job whose result is in, still listed
    assert backend._poll() == [] and asked == [["7_0", "7_1", "6_3"]]  # noqa: SLF001 - one squeue for all
    assert backend._poll() == [] and len(asked) == 1  # noqa: SLF001 - not again within STATES_EVERY_S
    assert backend._leaving == set()  # noqa: SLF001 - squeue no longer lists it
    backend._states_due = 0.0  # noqa: SLF001 - the next ask is due
    states["7_1"] = "COMPLETED"  # ended, and no result file: maybe lost
    backend._poll()  # noqa: SLF001
    done = backend._poll() or backend._poll()  # noqa: SLF001 - asked at every poll now: lost on the 3rd
    assert len(asked) == 4 and [d.task_id for d in done] == ["b"]
    assert "ended COMPLETED without a result" in (done[0].error or "")
