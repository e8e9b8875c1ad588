"""The sbatch script the Slurm backend asks submitit for, from every campaign setting
(no Slurm needed: the script is rendered, not submitted)."""

from __future__ import annotations

import sys

import pytest

import cluster.slurm_backend as slurm_backend
from cluster.backend import BackendError
from orchestrator.backends import make_backend
from sweeps.spec import parse_campaign
from tests.conftest import ROOT
from tests.helpers.campaigns import tiny_campaign
from trainers.contract.gang import Gang


def _script(backend, gang: Gang) -> str:
    """The sbatch script of a job of `gang`, with the command line CMD."""
    return backend._executor_for(gang)._executor._make_submission_file_text("CMD", "uid")  # noqa: SLF001


def test_every_setting_reaches_the_sbatch_script(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(slurm_backend, "preflight", lambda partition: asked.append(partition))
    backend = {
        "kind": "slurm", "partition": "gpu", "account": "proj1", "qos": "high", "time_min": 90,
        "nodes": 1, "gpus_per_node": 2, "cpus_per_task": 8, "mem_gb": 32, "array_parallelism": 5,
        "additional_parameters": {"constraint": "a100"}, "setup": ["module load cuda/12"],
        "signal_delay_s": 120,
    }
    campaign = parse_campaign(tiny_campaign(backend=backend), tmp_path)
    made = make_backend(campaign)
    assert asked == ["gpu"]  # the partition is checked against the cluster first
    script = _script(made, campaign.gang)
    lines = set(script.splitlines())
    for expected in (
        "#SBATCH --partition=gpu", "#SBATCH --account=proj1", "#SBATCH --qos=high", "#SBATCH --time=90",
        "#SBATCH --nodes=1", "#SBATCH --gpus-per-node=2", "#SBATCH --cpus-per-task=8", "#SBATCH --mem=32GB",
        "#SBATCH --constraint=a100", "#SBATCH --signal=USR2@120", "#SBATCH --job-name=rcpforge-tiny",
        "module load cuda/12",
    ):
        assert expected in lines, f"{expected!r} not in:\n{script}"
    export = next(line for line in lines if line.startswith("export PYTHONPATH="))
    assert str(ROOT) in export
    executor = made._executor_for(campaign.gang)._executor  # noqa: SLF001
    assert executor.python.strip("'") == sys.executable  # the same interpreter
    assert executor.max_num_timeout == 3  # max_requeues (default)


def test_the_gang_shapes_the_job_and_its_srun(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_backend, "preflight", lambda partition: None)
    launch = {"nodes": 2, "processes_per_node": 4, "gpus_per_process": 1, "gpu_type": "h100"}
    campaign = parse_campaign(tiny_campaign(backend={"kind": "slurm"}, launch=launch), tmp_path)
    made = make_backend(campaign)
    script = _script(made, campaign.gang)
    lines = set(script.splitlines())
    for expected in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-task=1",
                     "#SBATCH --constraint=h100"):
        assert expected in lines, f"{expected!r} not in:\n{script}"
    assert not any(line.startswith("#SBATCH --gpus-per-node") for line in lines)
    srun = next(line for line in lines if line.startswith("srun "))
    assert "--kill-on-bad-exit=1" in srun.split()  # a dying rank ends the whole step
    # a job of another shape (Job.gang) gets its own parameters, not the campaign's
    other = set(_script(made, Gang(nodes=1, processes_per_node=2)).splitlines())
    assert {"#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=2"} <= other


def test_gpu_type_and_a_constraint_of_its_own_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_backend, "preflight", lambda partition: None)
    backend = {"kind": "slurm", "additional_parameters": {"constraint": "a100"}}
    campaign = parse_campaign(tiny_campaign(backend=backend, launch={"gpu_type": "h100"}), tmp_path)
    with pytest.raises(BackendError, match=r"backend\.additional_parameters\.constraint: launch\.gpu_type"):
        make_backend(campaign)
