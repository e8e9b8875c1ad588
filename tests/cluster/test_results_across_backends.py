"""One campaign, three backends (local processes, a real Ray instance, the real dev
Slurm through submitit): the same runs, recorded the same way, with the same
tokens-to-target per run key (determinism carries across backends). The Backend
protocol's own suite, over every backend, is tests/conformance/test_backends.py."""

from __future__ import annotations

import pytest

from sweeps.spec import load_campaign
from tests.cluster.helpers import assert_clean_ledger
from tests.conftest import run_cli
from tests.helpers.campaigns import tiny_campaign, write_campaign

BACKENDS = {
    "local": {"kind": "local", "workers": 2},
    "ray": {"kind": "ray", "num_cpus": 1},
    "slurm": {"kind": "slurm", "time_min": 10, "array_parallelism": 2},
}


def campaign_on(backend: dict) -> dict:
    data = tiny_campaign(recipes=["fp8_tensorwise"], seeds=2, backend=backend)
    data["trainer"] = dict(data["trainer"], checkpoint_every_evals=2)
    return data


_DONE: dict[str, dict[str, float]] = {}


def _outcome(folder_factory, kind: str, address: str | None = None) -> dict[str, float]:
    """Tokens-to-target per run key of the campaign on `kind` (run once per session)."""
    if kind in _DONE:
        return _DONE[kind]
    backend = dict(BACKENDS[kind], **({"address": address} if address else {}))
    path = write_campaign(folder_factory.mktemp(kind), campaign_on(backend))
    proc = run_cli("run", str(path), "--backend", kind)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "launched 4 runs; 4 converged" in proc.stdout
    _DONE[kind] = assert_clean_ledger(load_campaign(path), n_keys=4)
    return _DONE[kind]


@pytest.fixture
def backend_ready(request):
    kind = request.param
    if kind == "ray":
        return request.getfixturevalue("ray_address")
    if kind == "slurm":
        request.getfixturevalue("slurm")
    return None


@pytest.mark.parametrize("backend_ready", ["local", "ray", "slurm"], indirect=True)
def test_same_campaign_same_results_on_every_backend(backend_ready, request, tmp_path_factory):
    kind = request.node.callspec.params["backend_ready"]
    reference = _outcome(tmp_path_factory, "local")
    tokens = _outcome(tmp_path_factory, kind, backend_ready)
    assert tokens == reference
