"""Submit and leave (`rcpforge run --detach`), then read progress back with `rcpforge
status` from the tracking store and Slurm; a later `rcpforge run` follows the jobs still
on Slurm instead of submitting them again."""

from __future__ import annotations

import json

from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_ATTEMPTS, TAG_BACKEND_JOB
from tests.cluster.helpers import assert_clean_ledger, paced_campaign, runs_of
from tests.conftest import run_cli
from tests.helpers.campaigns import write_campaign

COLUMNS = ("pending", "running", "converged", "not_converged", "diverged", "failed")


def _status(path) -> list[dict]:
    proc = run_cli("status", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["cells"]


def test_detach_then_status_then_follow(slurm, tmp_path):
    backend = {"kind": "slurm", "time_min": 10}
    # the instant paced program: about 8 s a run, long enough to be caught on Slurm
    path = write_campaign(tmp_path, paced_campaign(backend, evals=8, sleep=1.0))
    campaign = load_campaign(path)

    # before the first run there is no store, and status makes none
    before = run_cli("status", str(path), "--json")
    assert before.returncode == 2 and "(no such store yet)" in before.stderr, before.stderr
    assert not (tmp_path / "rcpforge-mlflow.db").exists()

    detached = run_cli("run", str(path), "--detach")
    assert detached.returncode == 0, detached.stderr
    assert "submitted 2 runs to Slurm and detached" in detached.stdout
    _, runs = runs_of(campaign)
    jobs = {r.data.tags[TAG_BACKEND_JOB] for r in runs}
    assert len(jobs) == 2 and all(j.startswith("slurm:") for j in jobs)

    cells = _status(path)
    for cell in cells:
        assert sum(cell[c] for c in COLUMNS) == cell["runs"] == 1
        # a run still out has its job's state; a finished one is counted as converged
        assert cell["converged"] == 1 or sum(cell["slurm"].values()) == 1, cell

    followed = run_cli("run", str(path))
    assert followed.returncode == 0, followed.stdout + followed.stderr
    assert "0 to launch" in followed.stdout
    assert_clean_ledger(campaign, n_keys=2, metric="eval_accuracy")
    _, runs = runs_of(campaign)
    assert all(r.data.tags[TAG_ATTEMPTS] == "1" for r in runs)  # never submitted twice
    assert [c["converged"] for c in _status(path)] == [1, 1]
