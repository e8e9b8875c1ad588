"""Runs as gangs, end to end through `rcpforge run`: the tiny LM in data parallel over
2 gloo ranks, and command programs that join their process group from the rendezvous
variables alone; one rank killed mid-run. Backends here: local (the two-node Ray and
Slurm gangs are in test_ray_gangs.py and test_slurm_gangs.py)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from sweeps.spec import load_campaign
from tests.cluster.helpers import assert_clean_ledger, ddp_command_campaign, runs_of
from tests.helpers.campaigns import tiny_campaign, write_campaign
from trainers.contract.schema import METRIC_CORE_HOURS, METRIC_WALL_S, TAG_ERROR, TAG_STATUS, TAG_WORLD_SIZE

# Two runs of 2 ranks; delayed scaling takes part in the ranks' collectives (its amax
# is reduced over them). Determinism across processes and backends, and resuming a gang
# from its checkpoint: test_gangs_across_backends.py, tests/trainers/test_tinylm_gang.py.
GANG_TINY = dict(recipes=["fp8_delayed"], seeds=1, batch_sizes=[16, 64])


def tinylm_gang(tmp_path: Path, name: str, backend: dict, processes: int = 2):
    data = tiny_campaign(name=name, backend=backend, launch={"processes_per_node": processes}, **GANG_TINY)
    return write_campaign(tmp_path / name, data)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] not in ("Z", "X")


@pytest.fixture(scope="module")
def local_pair(tmp_path_factory):
    """The tiny campaign with 2 ranks a run on the local backend, run once."""
    from tests.conftest import run_cli

    path = tinylm_gang(tmp_path_factory.mktemp("gang"), "pair", {"kind": "local", "workers": 1})
    proc = run_cli("run", str(path))
    assert proc.returncode == 0, proc.stderr
    return load_campaign(path), proc


def test_a_two_rank_tinylm_run_reports_once_with_its_world_size_and_cost(local_pair):
    campaign, proc = local_pair
    tokens = assert_clean_ledger(campaign, 2)  # one MLflow run per key, each point once
    assert all(t is not None for t in tokens.values()), proc.stdout
    _, runs = runs_of(campaign)
    for run in runs:
        assert run.data.tags[TAG_WORLD_SIZE] == "2"
        # core-hours: wall time x the 2 processes of the gang
        wall = run.data.metrics[METRIC_WALL_S]
        assert run.data.metrics[METRIC_CORE_HOURS] == pytest.approx(wall * 2 / 3600, rel=1e-9)
        folder = campaign.run_dir(next(s for s in __import__("sweeps.expand").expand.expand(campaign)
                                       if s.run_key == run.data.tags["rcpforge.run_key"]))
        # rank 1 trained in its own folder and reported nothing: one result file, rank 0's
        assert (folder / "result.txt").is_file() and (folder / "rank1").is_dir()
        assert not list((folder / "rank1").glob("*.txt"))


def test_the_world_size_enters_the_run_key_only_above_one(local_pair, tmp_path):
    campaign, _ = local_pair
    from sweeps.expand import expand

    one = load_campaign(tinylm_gang(tmp_path, "pair", {"kind": "local"}, processes=1))
    two_keys = {s.run_key for s in expand(campaign)}
    one_specs = expand(one)
    assert not two_keys & {s.run_key for s in one_specs}  # 2 ranks compute another result
    # a one-process run's key is what it was before runs could be gangs
    spec = one_specs[0]
    legacy = spec.model_dump(mode="json", exclude={"campaign", "role", "world_size"})
    assert "world_size" not in legacy and spec.world_size == 1
    assert spec.run_key == type(spec).model_validate({**spec.model_dump(), "world_size": 1}).run_key


def test_a_command_program_started_per_node_joins_its_process_group_from_the_rendezvous_variables(tmp_path, cli):
    """Started once per node, it starts the node's ranks itself (as torchrun does); once
    per rank (the default) is tested here with a killed rank and on Ray and Slurm in
    test_gangs_across_backends.py."""
    data = ddp_command_campaign({"kind": "local", "workers": 2}, {"processes_per_node": 2}, per_node=True)
    path = write_campaign(tmp_path, data)
    proc = cli("run", str(path))
    assert proc.returncode == 0, proc.stderr
    campaign = load_campaign(path)
    # accuracy reaches 1.0 only if both ranks' all-reduce met: a converged run proves it
    tokens = assert_clean_ledger(campaign, 2, metric="eval_accuracy")
    assert all(t is not None for t in tokens.values()), proc.stdout
    _, runs = runs_of(campaign)
    assert {r.data.tags[TAG_WORLD_SIZE] for r in runs} == {"2"}


def test_a_rank_killed_mid_run_fails_the_attempt_and_the_retry_completes(tmp_path, cli):
    marks = tmp_path / "marks"
    marks.mkdir()
    data = ddp_command_campaign({"kind": "local", "workers": 1, "max_attempts": 2}, {"processes_per_node": 2},
                                evals=4, die_once=marks)
    path = write_campaign(tmp_path, data)
    proc = cli("run", str(path))
    assert proc.returncode == 0, proc.stderr
    assert (marks / "died").exists()
    campaign = load_campaign(path)
    tokens = assert_clean_ledger(campaign, 2, metric="eval_accuracy")  # one outcome per key
    assert all(t is not None for t in tokens.values())
    _, runs = runs_of(campaign)
    retried = [r for r in runs if r.data.tags["rcpforge.attempts"] == "2"]
    assert len(retried) == 1 and retried[0].data.tags[TAG_STATUS] == "converged"
    assert TAG_ERROR not in retried[0].data.tags  # the first attempt's error left with it
    assert "rank 1 of 2" in proc.stdout, proc.stdout  # the failed attempt named its rank
    # nothing of the torn-down gang survives, and its rendezvous port is free
    pids = [int(p.stem) for p in marks.glob("*.pid")]
    assert len(pids) >= 4  # both ranks of the failed attempt and of the retries
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if _alive(p)]
    host, port = (marks / "port").read_text().split()
    with socket.socket() as probe:
        probe.bind((host, int(port)))
