"""Gangs on Ray, against real clusters: a placement strategy that spreads a gang over two
nodes, a gang no node layout can hold (its job fails within placement_timeout_s while
the others go on), and the preflight that refuses a gang bigger than the whole cluster.
The gang tests every backend shares are in tests/conformance/test_backends.py."""

from __future__ import annotations

import pytest

from rcpforge.cluster.backend import BackendError, Job
from rcpforge.cluster.ray_backend import RayBackend
from rcpforge.sweeps.backends import RayBackendSpec
from rcpforge.trainers.contract.gang import Gang
from tests.helpers import backend_jobs
from tests.helpers.ray_cluster import drive

PLACEMENT_TIMEOUT_S = 5.0


def test_a_strict_spread_gang_puts_one_rank_on_each_node(two_node_ray, tmp_path):
    answer = drive({
        "address": two_node_ray.address,
        "settings": {"num_cpus": 1, "placement_strategy": "STRICT_SPREAD"},
        "gang": {"nodes": 2},
        "jobs": [{"task_id": "pair", "fn": "gang_node", "args": [str(tmp_path)], "gang": {"nodes": 2}}],
    })
    assert [(d["task_id"], d["error"]) for d in answer["done"]] == [("pair", None)]
    seen = backend_jobs.task_files(tmp_path, 2)
    assert sorted(seen) == [0, 1]
    assert {s["node"] for s in seen.values()} == set(two_node_ray.node_ids)  # one rank on each node
    for task, s in seen.items():
        assert (s["RANK"], s["NODE_RANK"], s["LOCAL_RANK"], s["WORLD_SIZE"]) == (str(task), str(task), "0", "2")
    assert seen[0]["MASTER_ADDR"] == seen[1]["MASTER_ADDR"] and seen[0]["MASTER_PORT"] == seen[1]["MASTER_PORT"]
    assert answer["done"][0]["value"] == seen[0]
    assert answer["groups"] and set(answer["groups"]) == {"REMOVED"}  # its bundles were given back


def test_a_gang_that_cannot_be_placed_fails_within_its_timeout_and_the_others_go_on(two_node_ray, tmp_path):
    # 3 ranks x 0.5 CPU fit the cluster's 2 CPUs, but STRICT_SPREAD wants 3 distinct nodes.
    answer = drive({
        "address": two_node_ray.address,
        "settings": {"num_cpus": 0.5, "placement_strategy": "STRICT_SPREAD",
                     "placement_timeout_s": PLACEMENT_TIMEOUT_S},
        "gang": {"nodes": 3},
        "jobs": [{"task_id": "too-wide", "fn": "gang_node", "args": [str(tmp_path)], "gang": {"nodes": 3}},
                 {"task_id": "alone", "fn": "echo", "args": [7]}],
    })
    done = {d["task_id"]: d for d in answer["done"]}
    assert set(done) == {"too-wide", "alone"}
    assert (done["alone"]["value"], done["alone"]["error"]) == (7, None)
    error = done["too-wide"]["error"]
    for fragment in ("gang of 3 ranks x 0.5 CPUs", "cannot be placed", "STRICT_SPREAD", "2 CPUs",
                     "over 2 nodes", f"placement_timeout_s={PLACEMENT_TIMEOUT_S:g}", "add nodes"):
        assert fragment in error, error
    # its clock runs once the other job has given its CPU back (it cannot end sooner);
    # that it is not left waiting is the answer coming back at all (drive's own limit)
    assert done["too-wide"]["after_s"] >= PLACEMENT_TIMEOUT_S
    assert not list(tmp_path.glob("task*.json"))  # no rank of it ever started
    assert set(answer["groups"]) == {"REMOVED"}


@pytest.mark.parametrize(
    ("settings", "gang", "fragments"),
    [
        ({"num_cpus": 1}, Gang(processes_per_node=3), ("backend.num_cpus", "3 CPUs (3 processes x 1)", "has 2")),
        ({}, Gang(processes_per_node=2, gpus_per_process=1), ("launch.gpus_per_process", "2 GPUs", "has 0")),
        ({"num_cpus": 0}, Gang(processes_per_node=2), ("backend.num_cpus", "above 0")),
    ],
)
def test_a_gang_bigger_than_the_cluster_is_refused_before_anything_is_submitted(ray_address, settings, gang,
                                                                               fragments):
    with pytest.raises(BackendError) as err:
        RayBackend(RayBackendSpec(kind="ray", address=ray_address, **settings), gang=gang)
    for fragment in fragments:
        assert fragment in str(err.value), err.value


def test_a_gpu_type_no_node_has_is_refused_naming_the_field(ray_address):
    with pytest.raises(BackendError, match=r"launch.gpu_type: no node of the Ray cluster has accelerator type 'H100'"):
        RayBackend(RayBackendSpec(kind="ray", address=ray_address), gpu_type="H100")


def test_a_one_process_run_is_a_world_of_one_with_its_own_rendezvous_port(ray_address, tmp_path):
    with RayBackend(RayBackendSpec(kind="ray", address=ray_address, max_retries=0)) as backend:
        backend.submit(Job("alone", backend_jobs.gang_env, (str(tmp_path),)))
        done = []
        while not done:
            done = backend.wait(timeout=5.0)
    env = done[0].value
    assert (env["RANK"], env["WORLD_SIZE"], env["RCPFORGE_GANG_TASK"]) == ("0", "1", "0")
    assert env["MASTER_ADDR"] == "127.0.0.1"
    assert 0 < int(env["MASTER_PORT"]) < 65536
