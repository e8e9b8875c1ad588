"""Bad backend settings give one clear line, before anything is submitted: wrong types
and ranges when the campaign is read, what only the cluster knows (partition, Ray
address, sbatch) when the backend starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rcpforge.sweeps.backends import LocalBackendSpec, RayBackendSpec, SlurmBackendSpec, with_kind
from rcpforge.sweeps.spec import CampaignError, load_campaign, parse_campaign
from tests.cluster.helpers import runs_of
from tests.conftest import ROOT
from tests.helpers.campaigns import tiny_campaign, write_campaign


def _cli(*args: str, path_env: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    if path_env is not None:
        env["PATH"] = path_env
    return subprocess.run([sys.executable, "-m", "rcpforge.orchestrator.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def _one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and "mlflow" not in line]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize(
    ("backend", "fragments"),
    [
        ({"kind": "slurm", "gpus_per_node": -1}, ("backend.slurm.gpus_per_node", "greater than or equal to 0")),
        ({"kind": "ray", "num_gpus": -0.5}, ("backend.ray.num_gpus", "greater than or equal to 0")),
        ({"kind": "ray", "address": "http:/x"}, ("backend.ray.address", "not a Ray address")),
        ({"kind": "ray", "placement_strategy": "TIGHT"}, ("backend.ray.placement_strategy", "'STRICT_SPREAD'")),
        ({"kind": "ray", "placement_timeout_s": 0}, ("backend.ray.placement_timeout_s", "greater than 0")),
        ({"kind": "kubernetes"}, ("backend", "'local', 'ray', 'slurm'")),
        ({"kind": "slurm", "partition": "a b"}, ("backend.slurm.partition", "not a Slurm name")),
        ({"kind": "slurm", "time_limit": 5}, ("backend.slurm.time_limit", "not a known field")),
    ],
)
def test_bad_settings_are_rejected_when_the_campaign_is_read(backend, fragments):
    with pytest.raises(CampaignError) as err:
        parse_campaign(tiny_campaign(backend=backend), source="c.yaml")
    for fragment in fragments:
        assert fragment in str(err.value)


def test_backend_kinds_and_the_cli_override():
    assert isinstance(parse_campaign(tiny_campaign(backend={"workers": 3})).backend, LocalBackendSpec)
    slurm = parse_campaign(tiny_campaign(backend={"kind": "slurm", "partition": "gpu", "max_attempts": 4})).backend
    assert isinstance(slurm, SlurmBackendSpec) and slurm.partition == "gpu"
    assert with_kind(slurm, "slurm") is slurm  # its own section is kept
    ray = with_kind(slurm, "ray")
    assert isinstance(ray, RayBackendSpec) and ray.address == "local" and ray.max_attempts == 4
    with pytest.raises(ValueError, match="unknown kind 'k8s'"):
        with_kind(slurm, "k8s")


def _nothing_submitted(path) -> None:
    _, runs = runs_of(load_campaign(path))
    assert runs == []


def test_unreachable_ray_address_fails_before_submitting(tmp_path):
    path = write_campaign(tmp_path, tiny_campaign(backend={"kind": "ray", "address": "127.0.0.1:1"}))
    _one_line_error(_cli("run", str(path)), "backend.address", "cannot reach Ray at '127.0.0.1:1'")
    _nothing_submitted(path)


def test_missing_sbatch_fails_before_submitting(tmp_path):
    path = write_campaign(tmp_path, tiny_campaign(backend={"kind": "slurm"}))
    empty = tmp_path / "empty-path"
    empty.mkdir()
    _one_line_error(_cli("run", str(path), path_env=str(empty)), "needs `sbatch` on PATH", "make slurm-up")
    _nothing_submitted(path)


def test_unknown_partition_fails_before_submitting(slurm, tmp_path):
    path = write_campaign(tmp_path, tiny_campaign(backend={"kind": "slurm", "partition": "nosuchpart"}))
    _one_line_error(_cli("run", str(path)), "backend.partition", "no Slurm partition 'nosuchpart'", "debug")
    _nothing_submitted(path)


def test_detach_needs_slurm(tmp_path):
    path = write_campaign(tmp_path, tiny_campaign())
    _one_line_error(_cli("run", str(path), "--detach"), "--detach needs backend.kind slurm, not local")
    _one_line_error(_cli("run", str(path), "--backend", "k8s"), "--backend: unknown kind 'k8s'")
