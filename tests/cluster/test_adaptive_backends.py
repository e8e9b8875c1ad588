"""One adaptive campaign on every backend: local workers, the test session's Ray, the dev
Slurm (detached). The campaign (tests/helpers/adaptive_campaigns.py, on the instant command
trainer) is shrunk to three looks on 24 runs: three recipes at two batch sizes, 3 seeds,
then a fourth for the arms the allocation picks, look by look. Looks are barriers, so
whichever run a backend finishes first, every backend ends with the same seeds per cell
(0..k-1, each once in MLflow), the same stops and the same looks as the local one.

On Slurm the campaign runs detached (the harder path; attached, Slurm shares the look loop
of the other backends and its job handling with every fixed campaign's): nobody takes
the next look, each `rcpforge run --detach` submits the runs the looks so far ask for and
returns. Run again once they have an outcome, it takes the next look; run again while
they are out, it submits nothing. Look by look, it ends as the local campaign run
attached does, every run on its first attempt. (One Slurm campaign, not an attached and a
detached one: Slurm here runs two jobs at once, about 2 s each.)"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from rcpforge.orchestrator.adaptive import ANSWERED, FUTILE, MAX_SEEDS, LookEntry, Stop
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_ATTEMPTS
from tests.cluster.helpers import runs_of, wait_for
from tests.conftest import run_cli
from tests.helpers.adaptive_campaigns import adaptive_campaign, final_looks, ledger_cells
from tests.helpers.backend_services import with_service
from tests.helpers.campaigns import write_campaign
from tests.helpers.store import run_statuses

BACKENDS = {
    "local": {"kind": "local", "workers": 2},
    "ray": {"kind": "ray", "num_cpus": 1},
    "slurm": {"kind": "slurm", "time_min": 5, "array_parallelism": 2},
}
# 3 seeds a cell (no interval yet: olympic scoring drops one at each end), then one more
# for some arms at each look, up to 4: the example's question (sweeps/examples/adaptive.yaml,
# with equivalence, futility and the calibrated spending) stops cells at looks 2 and 3, as
# answered, futile and at max seeds, so every kind of stop decides the same on each backend.
QUESTION = {"min_seeds": 3, "step": 1, "max_seeds": 4}
FIRST_LOOK, RUNS, LOOKS = 3 * 2 * 3, 3 * 2 * 4, 3
OUT = ("pending", "running", "preempted")  # statuses of a run still on the cluster


@dataclass(frozen=True)
class Ended:
    """What a finished adaptive campaign left in its store."""

    seeds: dict[tuple[str, int], list[int]]  # per cell, its seeds in MLflow, sorted
    stops: dict[tuple[str, int], Stop]
    looks: list[LookEntry]


def _campaign(backend: dict) -> dict:
    return dict(adaptive_campaign(**QUESTION), backend=backend)


def _ended(path) -> Ended:
    campaign = load_campaign(path)
    state = final_looks(campaign)
    assert state.finished
    seeds = ledger_cells(campaign)
    # consecutive from 0 and each once: a seed run twice would show twice
    assert seeds == {cell: list(range(k)) for cell, k in state.seeds.items()}
    return Ended(seeds, state.stops, state.looks)


_ATTACHED: dict[str, Ended] = {}


def _attached(request, folders, kind: str) -> Ended:
    """The campaign run to its end by one `rcpforge run` on `kind` (once per session)."""
    if kind not in _ATTACHED:
        path = write_campaign(folders.mktemp(kind), _campaign(with_service(request, BACKENDS[kind])))
        proc = run_cli("run", str(path))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"adaptive: every cell has stopped, after {LOOKS} looks and {RUNS} runs" in proc.stdout, proc.stdout
        ended = _ended(path)
        # the campaign this suite needs: cells stopped at different looks, for more than one reason
        assert {s.look for s in ended.stops.values()} == {2, 3}
        assert {s.reason for s in ended.stops.values()} == {ANSWERED, FUTILE, MAX_SEEDS}
        _ATTACHED[kind] = ended
    return _ATTACHED[kind]


@pytest.mark.parametrize("kind", ["local", "ray"])
def test_an_adaptive_campaign_ends_the_same_on_every_backend(kind, request, tmp_path_factory):
    local = _attached(request, tmp_path_factory, "local")
    ended = _attached(request, tmp_path_factory, kind)
    assert ended.seeds == local.seeds
    assert ended.stops == local.stops
    assert ended.looks == local.looks


def _nothing_out(db) -> bool:
    statuses = run_statuses(db)
    return bool(statuses) and not any(statuses[s] for s in OUT)


def test_a_detached_adaptive_campaign_on_slurm_takes_the_next_look_when_run_again(
        slurm, request, tmp_path_factory, tmp_path):
    local = _attached(request, tmp_path_factory, "local")
    path = write_campaign(tmp_path / "detached", _campaign(BACKENDS["slurm"]))
    submitted = []

    def detach() -> str:
        proc = run_cli("run", str(path), "--detach")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        if "nothing to launch" not in proc.stdout:
            found = re.search(r"submitted (\d+) runs to Slurm and detached", proc.stdout)
            assert found, proc.stdout
            submitted.append(int(found[1]))
            # it says who takes the next look
            assert f"`rcpforge run {path} --detach` again takes it and submits the next runs" in proc.stdout
        return proc.stdout

    for _ in range(LOOKS + 1):  # a look per round, at most, then the round that finds nothing to do
        if "nothing to launch" in detach():
            break
        # at once, with this look's jobs out as a rule: it follows them, submits none again
        detach()
        wait_for(lambda: _nothing_out(path.parent / "rcpforge-mlflow.db"), "every submitted run has an outcome")
    else:
        pytest.fail(f"still launching after {len(submitted)} detached runs: {submitted}")
    assert sum(submitted) == RUNS and submitted[0] == FIRST_LOOK, submitted  # each once
    assert _ended(path) == local  # the same seeds, stops (at looks 2 and 3) and looks
    _, runs = runs_of(load_campaign(path))
    assert len(runs) == RUNS and {r.data.tags[TAG_ATTEMPTS] for r in runs} == {"1"}
