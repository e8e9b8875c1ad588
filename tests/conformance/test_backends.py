"""The Backend protocol (`cluster/backend.py`), the same tests for every backend, faults
included, against the real thing: local worker processes, a real Ray instance, the real
dev Slurm. A backend added later gets every test by adding one entry to BACKEND_SETTINGS
(and, where it needs a service, its fixture to tests/helpers/backend_services.py).

Job functions are instant (`tests/helpers/backend_jobs.py`): these tests are of the
backends, not of training."""

from __future__ import annotations

import time

import pytest

from rcpforge.cluster.backend import Backend, Done, Job
from rcpforge.orchestrator.backends import make_backend
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.contract.gang import Gang
from tests.helpers import backend_jobs
from tests.helpers.backend_services import with_service
from tests.helpers.campaigns import tiny_campaign
from tests.helpers.processes import alive, port_freed

# kind -> the campaign's `backend:` section for this suite. Ray: no task retries, so a
# killed worker is reported at once (retries are the campaign's business, tested there).
BACKEND_SETTINGS = {
    "local": {"kind": "local", "workers": 2},
    "ray": {"kind": "ray", "num_cpus": 1, "max_retries": 0},
    "slurm": {"kind": "slurm", "time_min": 5, "array_parallelism": 4},
}
DEADLINE_S = 180.0


@pytest.fixture(params=sorted(BACKEND_SETTINGS))
def backend(request, tmp_path) -> Backend:
    settings = with_service(request, BACKEND_SETTINGS[request.param])
    made = make_backend(parse_campaign(tiny_campaign(backend=settings), tmp_path))
    try:
        yield made
    finally:
        made.cancel()
        made.close()


def _collect(backend: Backend, expected: int) -> list[Done]:
    done: list[Done] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(done) < expected and time.monotonic() < deadline:
        done += backend.wait(timeout=1.0)
    return done


def test_every_job_is_reported_once_with_its_value(backend):
    for i in range(3):
        backend.submit(Job(f"job-{i}", backend_jobs.echo, ({"i": i},)))
    assert backend.in_flight() == 3
    done = _collect(backend, 3)
    assert sorted(d.task_id for d in done) == ["job-0", "job-1", "job-2"]
    assert {d.task_id: d.value for d in done} == {f"job-{i}": {"i": i} for i in range(3)}
    assert all(d.error is None for d in done)
    assert backend.in_flight() == 0 and backend.wait(timeout=0.5) == []  # never reported twice


def test_a_job_that_raises_is_that_jobs_error_and_the_others_complete(backend):
    backend.submit(Job("bad", backend_jobs.raise_error, ("the trainer broke",)))
    backend.submit(Job("good", backend_jobs.echo, (7,)))
    done = {d.task_id: d for d in _collect(backend, 2)}
    assert set(done) == {"bad", "good"}
    assert done["good"].value == 7 and done["good"].error is None
    assert done["bad"].error is not None and "the trainer broke" in done["bad"].error


def test_a_job_whose_process_is_killed_is_reported_failed_and_the_backend_goes_on(backend):
    backend.submit(Job("killed", backend_jobs.die, ()))
    done = _collect(backend, 1)
    assert [d.task_id for d in done] == ["killed"]
    assert done[0].error and done[0].value is None
    # the backend still runs jobs after losing a worker
    backend.submit(Job("after", backend_jobs.echo, ("still here",)))
    assert [(d.task_id, d.value) for d in _collect(backend, 1)] == [("after", "still here")]


def test_cancel_stops_a_running_job_and_nothing_is_reported_after(backend, tmp_path):
    folder = tmp_path / "pids"
    folder.mkdir()
    backend.submit(Job("long", backend_jobs.note_pid_and_sleep, (str(folder), 600.0)))
    deadline = time.monotonic() + DEADLINE_S
    while not list(folder.glob("*.pid")) and time.monotonic() < deadline:
        backend.wait(timeout=0.5)
    pids = [int(p.stem) for p in folder.glob("*.pid")]
    assert pids, "the job never started"
    backend.cancel()
    assert backend.in_flight() == 0 and backend.wait(timeout=0.5) == []
    deadline = time.monotonic() + 60
    while alive(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(pids[0]), "the cancelled job's process is still running"


def test_job_ids_name_the_jobs_a_cluster_owns_beyond_this_process(backend, request):
    backend.submit(Job("owned", backend_jobs.echo, (1,)))
    ids = backend.job_ids()
    if request.node.callspec.params["backend"] == "slurm":
        assert set(ids) == {"owned"} and ids["owned"].replace("_", "").isdigit()
    else:
        assert ids == {}  # local workers and Ray tasks end with this process
    assert [d.task_id for d in _collect(backend, 1)] == ["owned"]


# Two ranks on one node: every backend's dev cluster holds it (the multi-node gangs are
# in tests/cluster/test_gangs.py, against two-node clusters).
PAIR = Gang(nodes=1, processes_per_node=2)


def test_a_gang_starts_every_rank_at_once_with_the_rendezvous_environment(backend, tmp_path):
    backend.submit(Job("pair", backend_jobs.gang_env, (str(tmp_path),), gang=PAIR))
    done = _collect(backend, 1)
    assert [d.task_id for d in done] == ["pair"] and done[0].error is None
    envs = backend_jobs.task_files(tmp_path, 2)
    assert sorted(envs) == [0, 1]
    assert done[0].value == envs[0]  # task 0's return is the job's value
    for task, env in envs.items():
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["NODE_RANK"]) == (
            str(task), str(task), "2", "2", "0")
        assert env["RCPFORGE_GANG_TASK"] == str(task)
    # one rendezvous per run: every rank has the same address and port, a real port
    assert envs[0]["MASTER_ADDR"] == envs[1]["MASTER_ADDR"] and envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"]
    assert 0 < int(envs[0]["MASTER_PORT"]) < 65536
    assert envs[0]["pid"] != envs[1]["pid"]  # two processes, not one called twice


def test_a_rank_killed_mid_run_stops_the_whole_gang_and_frees_its_port(backend, tmp_path):
    backend.submit(Job("pair", backend_jobs.gang_with_a_dying_rank, (str(tmp_path), 1, 600.0), gang=PAIR))
    done = _collect(backend, 1)
    assert [d.task_id for d in done] == ["pair"]
    assert done[0].error is not None and done[0].value is None
    assert "rank 1" in done[0].error or "task 1" in done[0].error, done[0].error
    pids = {int(p.stem): p.read_text() for p in tmp_path.glob("*.pid")}
    assert sorted(pids.values()) == ["0", "1"]
    deadline = time.monotonic() + 60
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in pids if alive(pid)], "a rank of the failed gang is still running"
    _, port = (tmp_path / "port").read_text().split()
    assert not port_freed(int(port))  # nobody listens on the gang's rendezvous port any more
    # the backend goes on with the next gang
    backend.submit(Job("next", backend_jobs.gang_env, (str(tmp_path),), gang=PAIR))
    assert [(d.task_id, d.error) for d in _collect(backend, 1)] == [("next", None)]
