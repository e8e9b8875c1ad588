"""The same gangs through `rcpforge run` on every backend: a 2-rank tiny-LM campaign on
local (2 processes on one node), on the two-node Ray and on the two-node Slurm (one rank
on each node) reports each run once with its world size, and every run's tokens-to-target
is the same on all three; a 2-rank command program joins its process group from the
rendezvous variables across the two nodes of Ray and of Slurm (on local: test_gangs.py).

One `rcpforge run` per backend and campaign, all of them at once, shared by the module's
tests."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import Campaign, load_campaign
from rcpforge.trainers.contract.schema import METRIC_CORE_HOURS, METRIC_WALL_S, TAG_WORLD_SIZE
from tests.cluster.helpers import (
    assert_clean_ledger,
    ddp_command_campaign,
    mid_run,
    runs_of,
    slow_campaign,
    start_cli,
    starts,
    wait_for,
)
from tests.helpers.campaigns import tiny_campaign, write_campaign

# One recipe x 2 batch sizes x 1 seed: 2 runs of 2 ranks a campaign.
SMALL = dict(recipes=["bf16"], seeds=1, batch_sizes=[16, 64])
LOCAL_LAUNCH = {"processes_per_node": 2}
ACROSS_LAUNCH = {"nodes": 2, "processes_per_node": 1}


def _ray_backend(address: str) -> dict[str, Any]:
    return {"kind": "ray", "address": address, "num_cpus": 1, "placement_strategy": "STRICT_SPREAD",
            "max_retries": 0}


# The two-node dev Slurm: partition `debug` (`sinfo` with its SLURM_CONF), 1 CPU a node.
SLURM_BACKEND = {"kind": "slurm", "partition": "debug", "time_min": 5, "cpus_per_task": 1}


def _run(folder: Path, data: dict[str, Any]) -> tuple[Campaign, float]:
    """`rcpforge run` on the campaign `data`, which must succeed; the campaign and the
    seconds it took."""
    from tests.conftest import run_cli

    path = write_campaign(folder, data)
    start = time.monotonic()
    proc = run_cli("run", str(path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return load_campaign(path), time.monotonic() - start


def _tinylm(name: str, backend: dict[str, Any], launch: dict[str, Any]) -> dict[str, Any]:
    return tiny_campaign(name=name, backend=backend, launch=launch, **SMALL)


@pytest.fixture(scope="module")
def slurm_env(two_node_slurm_conf):
    """SLURM_CONF pointing at the two-node cluster for the module (`two_node_slurm` is
    per test): the CLI's subprocesses and the jobs inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", str(two_node_slurm_conf))
        yield two_node_slurm_conf


@pytest.fixture(scope="module")
def gang_runs(tmp_path_factory, two_node_ray, slurm_env) -> dict[tuple[str, str], Campaign]:
    """Every campaign of the module, each run once in its own store: the small tiny-LM
    gang campaign on each backend, and the 2-rank command program on the two-node Ray and
    Slurm. All five run at once: most of each one's time is processes starting and
    meeting and cluster jobs starting, not training, and a cluster that has no room for
    the next gang queues it, so together they take about the time of the slowest
    cluster's two campaigns."""
    from concurrent.futures import ThreadPoolExecutor

    root = tmp_path_factory.mktemp("across")
    ray = _ray_backend(two_node_ray.address)
    layouts = {("tinylm", "local"): _tinylm("across", {"kind": "local", "workers": 1}, LOCAL_LAUNCH),
               ("tinylm", "ray"): _tinylm("across", ray, ACROSS_LAUNCH),
               ("tinylm", "slurm"): _tinylm("across", SLURM_BACKEND, ACROSS_LAUNCH),
               ("command", "ray"): ddp_command_campaign(ray, ACROSS_LAUNCH),
               ("command", "slurm"): ddp_command_campaign(SLURM_BACKEND, ACROSS_LAUNCH)}
    with ThreadPoolExecutor(len(layouts)) as pool:
        futures = {name: pool.submit(_run, root / "-".join(name), data) for name, data in layouts.items()}
    campaigns = {}
    for name, future in futures.items():
        campaigns[name], took = future.result()
        print(f"{name[0]} gang on {name[1]}: {took:.1f} s")
    return campaigns


@pytest.fixture(scope="module")
def tinylm_runs(gang_runs) -> dict[str, Campaign]:
    """The tiny-LM gang campaign of each backend."""
    return {kind: campaign for (trainer, kind), campaign in gang_runs.items() if trainer == "tinylm"}


def _by_run(campaign: Campaign) -> dict[tuple[str, int, int], tuple[str, float]]:
    """(recipe, batch size, seed) -> (run key, tokens-to-target) of every run."""
    tokens = assert_clean_ledger(campaign, 2)
    return {(s.recipe, s.batch_size, s.seed): (s.run_key, tokens[s.run_key]) for s in expand(campaign)}


def test_a_two_rank_tinylm_run_reports_once_with_world_size_2_on_every_backend(tinylm_runs):
    for kind, campaign in tinylm_runs.items():
        tokens = assert_clean_ledger(campaign, 2)  # one MLflow run per key, each point once
        assert all(t is not None for t in tokens.values()), (kind, tokens)
        _, runs = runs_of(campaign)
        assert {r.data.tags[TAG_WORLD_SIZE] for r in runs} == {"2"}, kind


def test_only_rank_0_reports_and_the_run_records_its_compute(tinylm_runs):
    campaign = tinylm_runs["local"]
    _, runs = runs_of(campaign)
    specs = {s.run_key: s for s in expand(campaign)}
    for run in runs:
        # core-hours: wall time x the 2 processes of the gang
        wall = run.data.metrics[METRIC_WALL_S]
        assert run.data.metrics[METRIC_CORE_HOURS] == pytest.approx(wall * 2 / 3600, rel=1e-9)
        folder = campaign.run_dir(specs[run.data.tags["rcpforge.run_key"]])
        # rank 1 trained in its own folder and reported nothing: one result file, rank 0's
        assert (folder / "result.txt").is_file() and (folder / "rank1").is_dir()
        assert not list((folder / "rank1").glob("*.txt"))


def test_the_run_key_depends_on_the_world_size_not_on_the_backend_or_the_node_layout(tinylm_runs):
    keys = {kind: [s.run_key for s in expand(campaign)] for kind, campaign in tinylm_runs.items()}
    assert keys["local"] == keys["ray"] == keys["slurm"]  # 1 node x 2 processes and 2 nodes x 1: the same runs
    assert all(c.launch.world_size == 2 for c in tinylm_runs.values())
    assert (tinylm_runs["local"].launch.nodes, tinylm_runs["ray"].launch.nodes) == (1, 2)


def test_every_run_reaches_its_target_at_the_same_tokens_on_every_backend(tinylm_runs):
    results = {kind: _by_run(campaign) for kind, campaign in tinylm_runs.items()}
    assert set(results["local"]) == {("bf16", 16, 0), ("bf16", 64, 0)}
    assert results["local"] == results["ray"] == results["slurm"], results


@pytest.mark.parametrize("kind", ["ray", "slurm"])
def test_a_command_program_joins_its_process_group_across_two_nodes(kind, gang_runs):
    campaign = gang_runs[("command", kind)]
    # accuracy reaches 1.0 only if both ranks' all-reduce met: a converged run proves it
    tokens = assert_clean_ledger(campaign, 2, metric="eval_accuracy")
    assert all(t is not None for t in tokens.values()), tokens
    _, runs = runs_of(campaign)
    assert {r.data.tags[TAG_WORLD_SIZE] for r in runs} == {"2"}
    assert campaign.launch.nodes == 2


# About a minute of CI's budget, and every part of it is covered in a smaller form in
# every run: a preempted gang is requeued whole within its attempt and resumes
# (test_slurm_gangs.py, at the backend), a preempted tiny-LM run resumes from its
# checkpoint through `rcpforge run` (test_slurm_faults.py), and a resumed 2-rank tiny-LM
# run ends exactly as the uninterrupted one (test_tinylm_gang.py). Opt-in, as the
# time-limit test is.
@pytest.mark.skipif(
    os.environ.get("RCPFORGE_SLOW_SLURM") != "1",
    reason="about a minute; its parts run in smaller tests; set RCPFORGE_SLOW_SLURM=1 to run it",
)
def test_a_preempted_two_node_tinylm_gang_resumes_from_its_checkpoint(tinylm_runs, tmp_path):
    """Slurm preempts a 2-node tiny-LM gang mid-run (USR2): the whole gang is requeued
    within its one attempt, every rank resumes from the run's checkpoint, and the run
    reaches its target at exactly the tokens of the uninterrupted local gang."""
    import subprocess

    from rcpforge.trainers.contract.schema import TAG_ATTEMPTS, TAG_BACKEND_JOB, TAG_RUN_KEY

    data = slow_campaign(dict(SLURM_BACKEND, time_min=10, max_attempts=1), sleep=0.5, checkpoint_every=2)
    data.update(name="preempted", launch=ACROSS_LAUNCH, **SMALL)
    path = write_campaign(tmp_path, data)
    campaign = load_campaign(path)
    runs_of(campaign)  # the schema exists before two processes open the store
    proc = start_cli("run", str(path))
    victim = wait_for(lambda: mid_run(campaign, min_points=4), "a gang with 4 eval points logged", proc)
    subprocess.run(["scancel", "--signal=USR2", victim.data.tags[TAG_BACKEND_JOB].removeprefix("slurm:")],
                   check=True)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    tokens = assert_clean_ledger(campaign, 2)
    _, runs = runs_of(campaign)
    run = next(r for r in runs if r.info.run_id == victim.info.run_id)
    assert run.data.tags[TAG_ATTEMPTS] == "1"  # requeued within its attempt, never counted twice
    begun = starts(campaign, run)
    assert len(begun) >= 2 and begun[0] == 0 and all(b > 0 for b in begun[1:]), begun
    spec = next(s for s in expand(campaign) if s.run_key == run.data.tags[TAG_RUN_KEY])
    local = _by_run(tinylm_runs["local"])
    assert tokens[spec.run_key] == local[(spec.recipe, spec.batch_size, spec.seed)][1]
