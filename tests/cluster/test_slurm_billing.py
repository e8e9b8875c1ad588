"""A Slurm run's compute as the cluster billed it: its job's allocation (sacct's
AllocTRES) times its elapsed time, not what the worker asked for times the time it
trained (orchestrator/billing.py, cluster/slurm_billing.py). The parsing and the choice of
runs are logic (no Slurm); the campaign is the dev Slurm's real accounting database, the
runs an instant command program."""

from __future__ import annotations

import subprocess

import pytest

from rcpforge.cluster.slurm_billing import Allocation, parse_alloc_tres, parse_allocations
from rcpforge.orchestrator.billing import billed_job, billed_metrics, unsettled
from rcpforge.orchestrator.ledger import LedgerEntry
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract import RunStatus
from rcpforge.trainers.contract.schema import TAG_BACKEND_JOB, TAG_BILLED
from tests.cluster.helpers import paced_campaign, runs_of
from tests.conftest import run_cli
from tests.helpers.campaigns import write_campaign


@pytest.mark.parametrize("tres, expected", [
    ("billing=2,cpu=2,mem=23081M,node=1", (2, 0, ())),
    ("billing=16,cpu=16,gres/gpu=4,gres/gpu:h100=4,mem=64G,node=1", (16, 4, ("h100",))),  # the count untyped
    ("cpu=32,gres/gpu:a100=2,gres/gpu:h100=4,node=2", (32, 6, ("a100", "h100"))),  # only typed: their sum
    ("", (0, 0, ())),
])
def test_alloc_tres_gives_cpus_gpus_and_gpu_types(tres, expected):
    assert parse_alloc_tres(tres) == expected


def test_only_ended_jobs_are_billed():
    text = ("7_0|billing=1,cpu=1,node=1|6|COMPLETED\n7_1|billing=1,cpu=1,node=1|3|RUNNING\n"
            "7_2||0|PENDING\n8|cpu=8,gres/gpu=8,node=1|3600|CANCELLED by 0\n")
    found = parse_allocations(text)
    assert sorted(found) == ["7_0", "8"]
    assert found["8"].gpu_hours == 8.0 and found["7_0"].core_hours == 6 / 3600
    assert found["8"].describe() == "sacct 8: AllocTRES gres/gpu=8 x ElapsedRaw 3600 s"


def _entry(job: str | None, status: RunStatus, billed: str | None = None, **metrics: float) -> LedgerEntry:
    return LedgerEntry(run_id=f"r-{job}", run_key=f"k-{job}", status=status, attempts=1, backend_job=job,
                       billed=billed, metrics=metrics)


def test_ended_slurm_runs_are_billed_once_per_job():
    ledger = {e.run_key: e for e in [
        _entry("slurm:5_0", RunStatus.converged),
        _entry("slurm:5_1", RunStatus.failed),
        _entry("slurm:5_2", RunStatus.running),  # still holds its allocation
        _entry("slurm:5_3", RunStatus.converged, billed="sacct 5_3: AllocTRES cpu=1 x ElapsedRaw 4 s"),
        _entry("slurm:9", RunStatus.converged, billed="sacct 5_4: AllocTRES cpu=1 x ElapsedRaw 4 s"),  # a new attempt
        _entry(None, RunStatus.converged),  # not a Slurm run
    ]}
    assert sorted(unsettled(ledger)) == ["5_0", "5_1", "9"]
    assert billed_job("sacct 5_4: AllocTRES cpu=1 x ElapsedRaw 4 s") == "5_4" and billed_job(None) is None


def test_a_run_is_billed_gpu_hours_where_it_held_gpus_and_its_asked_ones_stand_where_gpus_are_not_accounted():
    gpus, cpus = Allocation("1", 16, 4, ("h100",), 1800.0), Allocation("2", 2, 0, (), 1800.0)
    assert billed_metrics(_entry("slurm:1", RunStatus.converged, gpu_hours=1.0), gpus) == {"gpu_hours": 2.0}
    assert billed_metrics(_entry("slurm:2", RunStatus.converged, core_hours=0.1), cpus) == {"core_hours": 1.0}
    # the run asked for GPUs, the site's AccountingStorageTRES lacks gres/gpu: no core-hours beside them
    assert billed_metrics(_entry("slurm:2", RunStatus.converged, gpu_hours=1.0), cpus) == {}


def _sacct(job: str) -> tuple[int, int]:
    """(cpus, elapsed s) of `job` as accounting has it, read here independently."""
    line = subprocess.run(["sacct", "-n", "-P", "-X", "-j", job.split("_")[0], "-o", "JobID,AllocTRES,ElapsedRaw"],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    for row in line.splitlines():
        job_id, tres, elapsed = row.split("|")
        if job_id == job:
            return parse_alloc_tres(tres)[0], int(elapsed)
    raise AssertionError(f"sacct has no {job}: {line}")


def test_a_slurm_campaigns_runs_cost_what_accounting_billed(accounting, tmp_path):
    path = write_campaign(tmp_path, paced_campaign({"kind": "slurm", "time_min": 5}, evals=2, sleep=0.05))
    proc = run_cli("run", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "billing: 2 runs' compute as Slurm's accounting billed it" in proc.stdout, proc.stdout
    client, runs = runs_of(load_campaign(path))
    assert len(runs) == 2
    for run in runs:
        job = run.data.tags[TAG_BACKEND_JOB].removeprefix("slurm:")
        cpus, elapsed = _sacct(job)
        assert run.data.tags[TAG_BILLED] == f"sacct {job}: AllocTRES cpu={cpus} x ElapsedRaw {elapsed} s"
        history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "core_hours")}
        assert run.data.metrics["core_hours"] == history[1] == cpus * elapsed / 3600  # the latest: the billed one
        # Step 0 is the run's own measure (its 0.1 s of paced training, well under 5 s on a
        # loaded machine); step 1 sacct's whole job in whole seconds, which an idle machine's
        # job of under a second reads as 0: only that it is sacct's figure is certain.
        assert set(history) == {0, 1} and 0 < history[0] < 5 / 3600, history
    again = run_cli("run", str(path))  # nothing left to bill: no line, no second value
    assert again.returncode == 0 and "billing:" not in again.stdout, again.stdout
    assert all(len(client.get_metric_history(r.info.run_id, "core_hours")) == 2 for r in runs)
