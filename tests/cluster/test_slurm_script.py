"""The sbatch script the Slurm backend hands sbatch, from every campaign setting, and the
whole script of a one-node and a two-node gang against golden files (no Slurm needed: a
stand-in `sbatch` keeps the script it is given and submits nothing)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import rcpforge.cluster.slurm_backend as slurm_backend
from rcpforge.cluster.backend import BackendError, Job
from rcpforge.cluster.slurm_submit import TOKEN_PREFIX
from rcpforge.orchestrator.backends import make_backend
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.contract.gang import Gang
from tests.conftest import ROOT
from tests.helpers.backend_jobs import echo
from tests.helpers.campaigns import tiny_campaign
from tests.helpers.golden import assert_matches_golden

GOLDEN = Path(__file__).parent / "golden"

def _script(backend, gang: Gang, kept: Path) -> str:
    """The sbatch script of a job of `gang`, as the backend submits it."""
    backend.submit(Job("task", echo, (1,), gang=gang))
    backend.job_ids()  # sends what was submitted
    return (kept / f"{len(list(kept.iterdir())) - 1}.sbatch").read_bytes().decode()


def test_every_setting_reaches_the_sbatch_script(tmp_path, monkeypatch, sbatch):
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
    script = _script(made, campaign.gang, sbatch)
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


def test_the_gang_shapes_the_job_and_its_srun(tmp_path, monkeypatch, sbatch):
    monkeypatch.setattr(slurm_backend, "preflight", lambda partition: None)
    launch = {"nodes": 2, "processes_per_node": 4, "gpus_per_process": 1, "gpu_type": "h100"}
    campaign = parse_campaign(tiny_campaign(backend={"kind": "slurm"}, launch=launch), tmp_path)
    made = make_backend(campaign)
    script = _script(made, campaign.gang, sbatch)
    lines = set(script.splitlines())
    for expected in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-task=1",
                     "#SBATCH --constraint=h100"):
        assert expected in lines, f"{expected!r} not in:\n{script}"
    assert not any(line.startswith("#SBATCH --gpus-per-node") for line in lines)
    srun = next(line for line in lines if line.startswith("srun "))
    assert "--kill-on-bad-exit=1" in srun.split()  # a dying rank ends the whole step
    # a job of another shape (Job.gang) gets its own parameters, not the campaign's
    other = set(_script(made, Gang(nodes=1, processes_per_node=2), sbatch).splitlines())
    assert {"#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=2"} <= other


def test_gpu_type_and_a_constraint_of_its_own_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm_backend, "preflight", lambda partition: None)
    backend = {"kind": "slurm", "additional_parameters": {"constraint": "a100"}}
    campaign = parse_campaign(tiny_campaign(backend=backend, launch={"gpu_type": "h100"}), tmp_path)
    with pytest.raises(BackendError, match=r"backend\.additional_parameters\.constraint: launch\.gpu_type"):
        make_backend(campaign)


def _normalised(script: str, tmp_path: Path) -> str:
    """The script with what differs between machines and runs replaced by placeholders,
    and nothing else touched: <PYTHON> this interpreter (submitit's command is
    sys.executable), <TMP> the test's temporary folder (the campaign's, so submitit's job
    folder and its logs), <ROOT> this checkout (the worker's PYTHONPATH), <HOME> the home
    folder, <TOKEN> the array's submission token (its comment, new at each submission). The
    script holds no date, user or host name, and no job id (Slurm's %A_%a)."""
    places = {sys.executable: "<PYTHON>", str(tmp_path): "<TMP>", str(tmp_path.resolve()): "<TMP>",
              str(ROOT): "<ROOT>", str(Path.home()) + "/": "<HOME>/"}
    for value in sorted(places, key=len, reverse=True):  # a path inside another is replaced whole
        script = script.replace(value, places[value])
    return re.sub(f"{TOKEN_PREFIX}[0-9a-f]{{32}}", f"{TOKEN_PREFIX}<TOKEN>", script)


@pytest.mark.parametrize("golden, nodes", [("slurm_one_node.sbatch", 1), ("slurm_two_node.sbatch", 2)])
def test_the_whole_sbatch_script_of_a_gang(golden, nodes, tmp_path, monkeypatch, sbatch):
    """A gang of 2 processes on each node, one GPU each, with the campaign's default Slurm
    settings: the script sbatch gets, whole."""
    monkeypatch.setattr(slurm_backend, "preflight", lambda partition: None)
    # The worker's PYTHONPATH is this checkout and then the caller's own PYTHONPATH: none here.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    launch = {"nodes": nodes, "processes_per_node": 2, "gpus_per_process": 1}
    campaign = parse_campaign(tiny_campaign(backend={"kind": "slurm"}, launch=launch), tmp_path)
    script = _script(make_backend(campaign), campaign.gang, sbatch)
    assert_matches_golden(GOLDEN / golden, _normalised(script, tmp_path), "tests/cluster/test_slurm_script.py")
