"""`rcpforge status` on the local backend: a campaign with no runs, a half-finished one and
a finished one, read from the tracking store without launching anything."""

from __future__ import annotations

import json

import yaml

from tests.helpers.campaigns import tiny_campaign, write_campaign

COLUMNS = ("pending", "running", "converged", "not_converged", "diverged", "failed")


def _cells(cli, path) -> dict[tuple[str, int], dict]:
    proc = cli("status", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    return {(c["recipe"], c["batch_size"]): c for c in json.loads(proc.stdout)["cells"]}


def test_status_of_a_campaign_with_no_runs(tmp_path, cli):
    path = write_campaign(tmp_path, tiny_campaign())
    cells = _cells(cli, path)
    assert len(cells) == 4
    for cell in cells.values():
        assert cell["runs"] == cell["pending"] == 3
        assert all(cell[c] == 0 for c in COLUMNS if c != "pending")


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
