"""`rcpforge status` on the local backend: a campaign with no runs, a half-finished one and
a finished one, read from the tracking store without launching anything."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.cli import invoke, one_line_usage_error

COLUMNS = ("pending", "running", "converged", "not_converged", "diverged", "failed")


def _cells(cli, path) -> dict[tuple[str, int], dict]:
    proc = cli("status", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    return {(c["recipe"], c["batch_size"]): c for c in json.loads(proc.stdout)["cells"]}


def test_status_of_a_campaign_with_no_runs(tmp_path):
    """In a store that exists (another campaign's, say) but holds none of this campaign's
    runs, status says so in one line and adds nothing to the store (before a store
    exists: tests/orchestrator/test_reading_commands.py; a server's or PostgreSQL's:
    test_reading_stores.py); `rcpforge plan` is the command that counts runs to do."""
    from mlflow.tracking import MlflowClient

    path = write_campaign(tmp_path, tiny_campaign())
    store = f"sqlite:///{tmp_path / 'rcpforge-mlflow.db'}"
    MlflowClient(store).create_experiment("another campaign")
    before = sorted(e.name for e in MlflowClient(store).search_experiments())
    one_line_usage_error(invoke("status", str(path)), "no runs of campaign tiny at",
                         f"`rcpforge run {path}` first, or check tracking.uri")
    assert sorted(e.name for e in MlflowClient(store).search_experiments()) == before


def test_status_of_a_finished_and_of_a_half_finished_campaign(finished, cli):
    path, _, _, _ = finished
    cells = _cells(cli, path)
    assert all(c["runs"] == c["converged"] == 3 for c in cells.values())
    # the same campaign asking for 2 more seeds per cell: 3 of 5 runs done in each cell
    more = yaml.safe_load(path.read_text())
    more["seeds"] = 5
    wider = write_campaign(path.parent, more, filename="wider.yaml")
    cells = _cells(cli, wider)
    assert len(cells) == 4
    for cell in cells.values():
        assert (cell["runs"], cell["converged"], cell["pending"]) == (5, 3, 2)
    text = cli("status", str(wider))
    assert text.returncode == 0 and "bf16" in text.stdout and "tracking store" in text.stdout
    # nothing runs them: the hint names the command that does
    assert "8 runs pending and none running" in text.stdout and f"rcpforge run {wider}" in text.stdout
    assert "pending and none running" not in cli("status", str(path)).stdout


def test_status_counts_each_cells_compute_and_eta_from_the_runs_own_records(finished, cli):
    """Core-hours and the ETA of `status --json`, recomputed here from each run's own
    recorded wall time and tokens (docs/clusters.md, "Cost and ETA")."""
    import statistics

    from tests.cluster.helpers import runs_of

    path, campaign, _, _ = finished
    _, runs = runs_of(campaign)
    by_cell: dict[tuple[str, int], list] = {}
    for run in runs:
        cell = (run.data.tags["rcpforge.recipe"], int(run.data.tags["rcpforge.batch_size"]))
        by_cell.setdefault(cell, []).append(run)
    more = yaml.safe_load(path.read_text())
    more["seeds"] = 5  # 2 runs to do per cell
    wider = write_campaign(path.parent, more, filename="wider-cost.yaml")
    proc = cli("status", str(wider), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["world_size"] == 1
    workers = more["backend"]["workers"]
    total_remaining = 0.0
    for cell in report["cells"]:
        cell_runs = by_cell[(cell["recipe"], cell["batch_size"])]
        walls = [r.data.metrics["run_wall_s"] for r in cell_runs]
        tokens = [r.data.metrics["tokens_trained"] for r in cell_runs]
        # one process a run: core-hours are its wall hours
        assert cell["core_hours"] == pytest.approx(sum(walls) / 3600, rel=1e-9)
        assert cell["gpu_hours"] == 0.0
        assert cell["run_wall_hours"] == pytest.approx(sum(walls) / 3600, rel=1e-9)
        typical = statistics.median(tokens)
        remaining_s = 2 * typical * sum(walls) / sum(tokens)
        assert cell["typical_tokens"] == typical and cell["runs_to_do"] == 2
        assert cell["remaining_run_hours"] == pytest.approx(remaining_s / 3600, rel=1e-9)
        assert cell["eta_s"] == pytest.approx(remaining_s / workers, rel=1e-9)  # nothing running: the workers
        total_remaining += remaining_s
    totals = report["totals"]
    assert totals["runs_to_do"] == 8 and totals["concurrency"] == workers
    assert totals["core_hours"] == pytest.approx(sum(r.data.metrics["run_wall_s"] for r in runs) / 3600, rel=1e-9)
    assert totals["eta_s"] == pytest.approx(total_remaining / workers, rel=1e-9)
    text = cli("status", str(wider))
    assert "core-hours" in text.stdout and "8 runs to do" in text.stdout


def test_the_eta_counts_the_tokens_running_runs_have_trained():
    from rcpforge.orchestrator.cost import CellCost, estimates

    done = CellCost(finished=[(100.0, 10.0), (300.0, 30.0)], to_do=[150.0, 0.0], core_hours=0.5)
    fresh = CellCost(to_do=[0.0])  # nothing finished here: the campaign's figures
    cells, totals = estimates([done, fresh], max_tokens=10_000, concurrency=2)
    # typical 200 tokens at 0.1 s a token: (200-150) + (200-0) tokens to go = 25 s
    assert cells[0]["typical_tokens"] == 200.0 and cells[0]["remaining_run_hours"] * 3600 == pytest.approx(25.0)
    assert cells[1]["remaining_run_hours"] * 3600 == pytest.approx(20.0)
    assert totals["eta_s"] == pytest.approx(45.0 / 2) and totals["core_hours"] == 0.5
    # a run past the typical tokens needs nothing more, never a negative time
    past, _ = estimates([CellCost(finished=[(100.0, 10.0)], to_do=[500.0])], 10_000, 1)
    assert past[0]["eta_s"] == 0.0
    # nothing finished anywhere: no ETA, rather than a made-up one
    unknown, totals = estimates([CellCost(to_do=[0.0])], 10_000, 1)
    assert unknown[0]["eta_s"] is None and totals["eta_s"] is None


def test_runs_the_file_does_not_plan_are_shown_where_analyze_counts_them(finished, cli, tmp_path):
    """The same experiment read through a file whose bs 16 learning rate changed: those
    runs are no longer the file's (other keys), yet analyze counts every run of the
    experiment, so status lists them beside the file's own pending runs, and both say so."""
    path, _, _, _ = finished
    edited = yaml.safe_load(path.read_text())
    edited["hparams"][16]["lr"] = edited["hparams"][16]["lr"] * 2
    other = write_campaign(path.parent, edited, filename="edited.yaml")
    cells = _cells(cli, other)
    for (recipe, bs), cell in cells.items():
        assert cell["pending"] == (3 if bs == 16 else 0), (recipe, bs, cell)
        assert cell["outside_plan"] == ({"converged": 3} if bs == 16 else {}), (recipe, bs, cell)
    table = cli("status", str(other))
    assert "not in this file" in table.stdout
    assert "6 runs in the store are not runs of this campaign file" in table.stdout
    assert "not in this file" not in cli("status", str(path)).stdout
    analyzed = cli("analyze", str(other), "--out", str(tmp_path / "out"), "--resamples", "200")
    assert analyzed.returncode == 0, analyzed.stderr
    assert "note: 6 runs in the store are not runs of this campaign file" in analyzed.stderr


def test_a_cell_whose_runs_ran_on_two_kinds_of_gpu_is_flagged_by_status_and_analyze(finished, cli, tmp_path):
    """Runs record the GPUs they ran on (`rcpforge.accelerator`, from nvidia-smi: none on
    this machine, so written here into a copy of the finished campaign's store)."""
    import shutil

    from mlflow.tracking import MlflowClient

    from rcpforge.sweeps.spec import load_campaign
    from rcpforge.trainers.contract.schema import TAG_ACCELERATOR, TAG_BATCH_SIZE, TAG_RECIPE

    path, _, _, _ = finished
    copy = tmp_path / "copy"
    shutil.copytree(path.parent, copy)
    campaign = load_campaign(copy / path.name)
    client = MlflowClient(campaign.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name(campaign.name).experiment_id])
    cell = sorted((r for r in runs if r.data.tags[TAG_RECIPE] == "bf16" and r.data.tags[TAG_BATCH_SIZE] == "16"),
                  key=lambda r: r.info.run_id)
    names = ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]
    for run, name in zip(cell, names, strict=True):
        client.set_tag(run.info.run_id, TAG_ACCELERATOR, name)
    flag = ("bf16 at batch size 16: its runs ran on 2 kinds of GPU (2 on NVIDIA H100 80GB HBM3, "
            "1 on NVIDIA A100-SXM4-80GB); mixing hardware mixes convergence")
    shown = cli("status", str(copy / path.name))
    assert shown.returncode == 0 and f"warning: {flag}" in " ".join(shown.stdout.split()), shown.stdout
    cells = _cells(cli, copy / path.name)
    assert cells[("bf16", 16)]["accelerators"] == {"NVIDIA A100-SXM4-80GB": 1, "NVIDIA H100 80GB HBM3": 2}
    assert all(c["accelerators"] == {} for key, c in cells.items() if key != ("bf16", 16))
    analyzed = cli("analyze", str(copy / path.name), "--out", str(tmp_path / "out"), "--resamples", "200")
    assert analyzed.returncode == 0, analyzed.stderr
    assert flag in " ".join(analyzed.stderr.split())
    assert flag in (tmp_path / "out" / "summary.md").read_text()
    assert "kinds of GPU" not in cli("status", str(path)).stdout  # the campaign's own runs: no GPU named
