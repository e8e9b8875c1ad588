"""Runs as gangs on the local backend, end to end through `rcpforge run`: a command
program started per node that joins its process group from the rendezvous variables
alone, and one rank killed mid-run. The tiny LM's 2-rank runs on local, Ray and Slurm
(world size, cost, rank folders, run keys, the same tokens everywhere, a preempted gang):
test_gangs_across_backends.py."""

from __future__ import annotations

import time

from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_ERROR, TAG_STATUS, TAG_WORLD_SIZE
from tests.cluster.helpers import assert_clean_ledger, ddp_command_campaign, runs_of
from tests.helpers.campaigns import write_campaign
from tests.helpers.processes import alive, port_freed


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
    # The failed attempt is shown and retried. Which of its ranks' ends arrives first (rank 1
    # killed, or rank 0 failing in gloo a moment later) is a race between two processes, so
    # the rank named in the error is asserted by the conformance suite, where rank 0 waits.
    assert "failed:" in proc.stdout and "retry" in proc.stdout, proc.stdout
    # nothing of the torn-down gang survives, and its rendezvous port is free
    pids = [int(p.stem) for p in marks.glob("*.pid")]
    assert len(pids) >= 4  # both ranks of the failed attempt and of the retries
    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if alive(p)]
    _, port = (marks / "port").read_text().split()
    assert not port_freed(int(port))  # nobody listens on the gang's rendezvous port any more
