"""GPU-hours (issue 36): a run whose ranks hold GPUs records gpu_hours = wall time x
processes x GPUs per process / 3600, and an adaptive campaign's `cost_cap: {gpu_hours}`
stops extending its cells once the next step would pass it.

The real CLI, the local backend, a real SQLite store and instant command programs
(tests/helpers/paced_program.py, factor_program.py). No GPU is needed: the local backend
takes the orchestrator's CUDA_VISIBLE_DEVICES as the machine's GPUs and pins each run to
its own of them; the programs never touch one."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rcpforge.orchestrator.adaptive import COST_CAP, MAX_SEEDS
from rcpforge.orchestrator.cli import app
from rcpforge.orchestrator.cli.render import usd
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import METRIC_CORE_HOURS, METRIC_GPU_HOURS, METRIC_WALL_S, TAG_RUN_KEY
from tests.cluster.helpers import paced_campaign, runs_of
from tests.conftest import run_cli
from tests.helpers.adaptive_campaigns import adaptive_campaign, final_looks, ledger_cells
from tests.helpers.campaigns import write_campaign


def _status(path) -> dict:
    status = CliRunner().invoke(app, ["status", str(path), "--json"])
    assert status.exit_code == 0, status.output
    return json.loads(status.stdout[status.stdout.index("{"):])


def _hours(campaign) -> dict[str, float]:
    """Each run's recorded gpu_hours, by run key."""
    _, runs = runs_of(campaign)
    return {r.data.tags[TAG_RUN_KEY]: r.data.metrics[METRIC_GPU_HOURS] for r in runs}


def test_a_gang_with_gpus_records_gpu_hours_of_every_rank(tmp_path, monkeypatch):
    # 8 GPU ids: two runs at once, each 2 processes x 2 GPUs
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    data = paced_campaign({"kind": "local", "workers": 2}, evals=3, sleep=0.1)
    data["launch"] = {"processes_per_node": 2, "gpus_per_process": 2}
    path = write_campaign(tmp_path, data)
    proc = run_cli("run", str(path), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, runs = runs_of(load_campaign(path))
    assert len(runs) == 2 and {r.data.tags["rcpforge.status"] for r in runs} == {"converged"}
    for run in runs:
        wall = run.data.metrics[METRIC_WALL_S]
        assert wall >= 0.3  # three evals 0.1 s apart: a real wall time, not 0
        assert run.data.metrics[METRIC_GPU_HOURS] == pytest.approx(wall * 2 * 2 / 3600, rel=1e-9)
        assert METRIC_CORE_HOURS not in run.data.metrics  # GPU runs count GPU-hours only
    status = _status(path)
    assert status["totals"]["gpu_hours"] == pytest.approx(sum(r.data.metrics[METRIC_GPU_HOURS] for r in runs))
    assert status["totals"]["core_hours"] == 0.0
    assert sum(c["gpu_hours"] for c in status["cells"]) == pytest.approx(status["totals"]["gpu_hours"])
    _priced(tmp_path, data, path, status)


def _priced(folder, data: dict, path, status: dict) -> None:
    """Prices (issue 34) for the same runs (they are not in the run key): each cell's
    GPU-hours at the price of the file's GPU type, else at the default; nothing else
    that status says changes, and without prices it shows no money."""
    prices = {"usd_per_gpu_hour": {"h100": 2.5, "default": 2.0}}
    for gpu_type, price in (("H100", 2.5), ("A100", 2.0)):
        launch = dict(data["launch"], gpu_type=gpu_type)
        priced = write_campaign(folder, dict(data, launch=launch, cost=prices), filename=f"{gpu_type}.yaml")
        shown = _status(priced)
        assert [c.pop("cost_usd") for c in shown["cells"]] == pytest.approx(
            [c["gpu_hours"] * price for c in status["cells"]])
        assert shown["totals"].pop("cost_usd") == pytest.approx(status["totals"]["gpu_hours"] * price)
        assert shown == status
    table = CliRunner().invoke(app, ["status", str(priced)])
    assert table.exit_code == 0 and "cost" in table.stdout
    assert f"gpu-hours spent ({usd(status['totals']['gpu_hours'] * 2.0)})" in table.stdout
    plain = CliRunner().invoke(app, ["status", str(path)])
    assert plain.exit_code == 0 and "$" not in plain.stdout and "cost" not in plain.stdout


def _capped(gpu_hours: float | None) -> dict:
    """Four cells (bf16 against fp8_like at batch sizes 16 and 64), 3 seeds then one
    more up to 4, with a question no look answers (+-0.1%): only the cost cap or
    max_seeds stops them (no equivalence asked, no futility stop). Each run holds 2 GPUs."""
    data = adaptive_campaign(min_seeds=3, step=1, max_seeds=4, margin=None, half_width=0.001, equivalence=None,
                             futility=False, cost_cap={} if gpu_hours is None else {"gpu_hours": gpu_hours})
    data["recipes"] = data["recipes"][:2]
    data["launch"] = {"gpus_per_process": 2}
    return data


def test_the_gpu_hours_cap_stops_launching_and_keeps_what_was_spent(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    cells = {(r, bs) for r in ("bf16", "fp8_like") for bs in (16, 64)}
    # a cap that the first look's runs already pass: no step is granted
    path = write_campaign(tmp_path, _capped(1e-9))
    proc = run_cli("run", str(path), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stop: cost cap: the next step would pass adaptive.cost_cap (1e-09 gpu-hours)" in proc.stdout
    assert "adaptive: every cell has stopped, after 1 looks and 12 runs" in proc.stdout
    campaign = load_campaign(path)
    assert ledger_cells(campaign) == {cell: [0, 1, 2] for cell in cells}
    state = final_looks(campaign)
    assert {cell: stop.reason for cell, stop in state.stops.items()} == {cell: COST_CAP for cell in cells}
    spent = _hours(campaign)
    assert len(spent) == 12 and all(h > 0 for h in spent.values())
    status = _status(path)
    assert {c["stop_reason"] for c in status["cells"]} == {COST_CAP}
    assert status["totals"]["gpu_hours"] == pytest.approx(sum(spent.values()))

    # run again: the cap still holds, nothing is launched, nothing recorded changes
    again = run_cli("run", str(path), timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "12 have an outcome, 0 failed with no attempts left, 0 to launch" in again.stdout
    assert ledger_cells(campaign) == {cell: [0, 1, 2] for cell in cells} and _hours(campaign) == spent

    # where the cap falls decides the next step, on the GPU-hours recorded: the campaign's
    # spend plus one more run at the arm's mean cost, best arm first (the looks are a
    # pure function of the store: each cap is replayed on it, nothing runs)
    per_run = {cell: _cell_mean(campaign, cell) for cell in cells}
    total = sum(spent.values())
    uncapped = _seeds_at(path, tmp_path, None)
    assert uncapped == {cell: 4 for cell in cells}
    # Once GPU-hours are capped, allocation weighs a run by its GPU-hours (by tokens without
    # a cap), so the runs' wall times decide which arms a step wants: an arm whose gain per
    # GPU-hour falls below half the best of its comparison's is not asked for (on a loaded
    # machine that happened to bf16 at 16). A cap that never binds shows the arms wanted;
    # the spend plus one more run of each of them grants them all.
    unbound = _seeds_at(path, tmp_path, 1e9)
    wanted = [cell for cell in cells if unbound[cell] == 4]
    assert {cell[1] for cell in wanted} == {16, 64}  # an arm of each comparison at least
    assert _seeds_at(path, tmp_path, total + sum(per_run[c] for c in wanted) * (1 + 1e-6)) == unbound
    # Room for one more run of the dearest wanted arm: less than all of them cost (at least
    # two are wanted), more than any one. The best arm is granted, and what is granted fits
    # the room; how many arms fit depends on the runs' wall times, so it is not fixed
    # (on a loaded machine the dearest run cost more than two others: two were granted).
    room = max(per_run[c] for c in wanted) * (1 + 1e-6)
    some = _seeds_at(path, tmp_path, total + room)
    granted = [cell for cell in cells if some[cell] == 4]
    assert granted and set(granted) < set(wanted) and set(some.values()) == {3, 4}, (some, wanted)
    assert sum(per_run[c] for c in granted) <= room, (some, per_run)
    assert sorted(_seeds_at(path, tmp_path, total + min(per_run.values()) * (1 - 1e-6)).values()) == [3, 3, 3, 3]

    # without the cap the campaign goes on from where it stopped: seed 3, each once,
    # the first twelve runs kept as they were
    write_campaign(tmp_path, _capped(None))
    resumed = run_cli("run", str(path), timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "12 have an outcome" in resumed.stdout
    assert ledger_cells(campaign) == {cell: [0, 1, 2, 3] for cell in cells}
    after = _hours(campaign)
    assert len(after) == 16 and {k: after[k] for k in spent} == spent
    state = final_looks(load_campaign(path))
    assert {stop.reason for stop in state.stops.values()} == {MAX_SEEDS}
    assert _status(path)["totals"]["gpu_hours"] == pytest.approx(sum(after.values()))


def _cell_mean(campaign, cell) -> float:
    _, runs = runs_of(campaign)
    hours = [r.data.metrics[METRIC_GPU_HOURS] for r in runs
             if (r.data.tags["rcpforge.recipe"], int(r.data.tags["rcpforge.batch_size"])) == cell]
    return sum(hours) / len(hours)


def _seeds_at(path, folder, cap: float | None) -> dict:
    """The seeds each cell would run with `cap`, replayed on the store as it is."""
    write_campaign(folder, _capped(cap))
    state = final_looks(load_campaign(path))
    return dict(state.seeds)
