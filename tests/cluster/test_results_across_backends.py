"""One campaign, three backends (local processes, a real Ray instance, the real dev
Slurm through submitit): the same runs, recorded the same way, with the same
tokens-to-target per run key (determinism carries across backends). The Backend
protocol's own suite, over every backend, is tests/conformance/test_backends.py."""

from __future__ import annotations

import pytest

from rcpforge.sweeps.spec import load_campaign
from tests.cluster.helpers import assert_clean_ledger
from tests.conftest import run_cli
from tests.helpers.backend_services import with_service
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


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory) -> dict[str, dict[str, float]]:
    """Tokens-to-target per run key of the campaign on each backend, each in its own
    store. The three run at once: a backend's time is mostly its workers and jobs
    starting, and the runs are deterministic whatever else the machine does."""
    from concurrent.futures import ThreadPoolExecutor

    def outcome(kind: str, backend: dict) -> dict[str, float]:
        path = write_campaign(tmp_path_factory.mktemp(kind), campaign_on(backend))
        proc = run_cli("run", str(path), "--backend", kind)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "launched 4 runs; 4 converged" in proc.stdout
        return assert_clean_ledger(load_campaign(path), n_keys=4)

    backends = {kind: with_service(request, settings) for kind, settings in BACKENDS.items()}
    with ThreadPoolExecutor(len(backends)) as pool:
        futures = {kind: pool.submit(outcome, kind, backend) for kind, backend in backends.items()}
    return {kind: future.result() for kind, future in futures.items()}


@pytest.mark.parametrize("kind", ["ray", "slurm"])
def test_same_campaign_same_results_on_every_backend(kind, outcomes):
    assert outcomes["local"], outcomes  # every run converged: tokens to compare
    assert outcomes[kind] == outcomes["local"]
