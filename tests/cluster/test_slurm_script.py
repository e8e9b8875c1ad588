"""The sbatch script the Slurm backend asks submitit for, from every campaign setting
(no Slurm needed: the script is rendered, not submitted)."""

from __future__ import annotations

import sys

import cluster.slurm_backend as slurm_backend
from orchestrator.backends import make_backend
from sweeps.spec import parse_campaign
from tests.conftest import ROOT
from tests.helpers.campaigns import tiny_campaign


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
    script = made._executor._executor._make_submission_file_text("CMD", "uid")  # noqa: SLF001
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
    assert made._executor._executor.python.strip("'") == sys.executable  # noqa: SLF001 - the same interpreter
    assert made._executor._executor.max_num_timeout == 3  # max_requeues (default)
