"""RCP records say what their runs were run with, and a cell of runs made under two
settings is not pooled silently (analysis/mixtures.py): the logic on small tables, then a
real instant campaign whose file is edited between two `rcpforge run`s."""

from __future__ import annotations

import json

import pyarrow as pa
import yaml

from rcpforge.analysis.load import RUN_SCHEMA
from rcpforge.analysis.mixtures import mixtures, recorded_hyperparams
from rcpforge.analysis.rcp_table import rcp_records
from tests.cluster.helpers import paced_campaign
from tests.conftest import run_cli
from tests.helpers.campaigns import write_campaign


def _runs(cells: dict[int, list[tuple[str | None, dict[str, str]]]]) -> pa.Table:
    rows = [{"run_id": f"{bs}-{seed}", "run_key": f"{bs}-{seed}", "recipe": "bf16", "batch_size": bs, "seed": seed,
             "status": "converged", "samples_to_target": 100.0 + seed, "model": "", "config_key": key,
             "hparams": sorted(params.items())}
            for bs, runs in cells.items() for seed, (key, params) in enumerate(runs)]
    return pa.Table.from_pylist(rows, schema=RUN_SCHEMA)


def test_a_cell_of_two_configurations_is_named_and_gets_no_record_unless_pooled():
    old, new = {"lr": "0.003", "recipe.x": "e4m3"}, {"lr": "0.004", "recipe.x": "e4m3"}
    runs = _runs({16: [("a", old)] * 3 + [("b", new)] * 2, 64: [("c", {"lr": "0.01"})] * 3})
    (mixed,) = mixtures(runs)
    assert mixed.line() == ("bf16 at batch size 16: its runs are of 2 configurations (lr: 3 runs at 0.003, 2 runs "
                            "at 0.004); not pooled: no RCP record for the cell (`rcpforge analyze --pool-mixed` "
                            "writes one)")
    assert sorted(rcp_records(runs, "bf16", "unit", {})) == ["unit_ref_64"]
    assert rcp_records(runs, "bf16", "unit", {})["unit_ref_64"]["Hyperparams"] == {"lr": 0.01}
    pooled = rcp_records(runs, "bf16", "unit", {}, pool_mixed=True)
    assert pooled["unit_ref_16"]["Hyperparams"] == {"lr": [0.003, 0.004]}  # the recipe's option is no hyperparameter


def test_configurations_that_differ_outside_the_parameters_and_runs_without_a_key():
    same = {"lr": "0.003"}
    outside = _runs({16: [("a", same)] * 3 + [("b", same)] * 3})
    (mixed,) = mixtures(outside)
    assert "(3 and 3 runs differ in a setting outside their parameters" in mixed.line()
    # runs recorded before the configuration key: told apart by their parameters alone
    assert mixtures(_runs({16: [(None, same)] * 3 + [("a", same)] * 2})) == []
    assert len(mixtures(_runs({16: [(None, same)] * 3 + [("a", {"lr": "0.1"})] * 2}))) == 1
    assert recorded_hyperparams(_runs({16: [("a", {"lr": "1e-3", "name": "adamw", "betas": "[0.9, 0.95]"})]}),
                                "bf16", 16) == {"betas": [0.9, 0.95], "lr": 0.001, "name": "adamw"}


def test_an_edited_file_gets_records_of_what_the_runs_used_and_no_silent_pool(tmp_path):
    data = paced_campaign({"kind": "local", "workers": 2}, evals=2, sleep=0.01, seeds=3)
    data["hparams"] = {bs: {"lr": 0.003} for bs in data["batch_sizes"]}
    path = write_campaign(tmp_path, data)
    assert run_cli("run", str(path)).returncode == 0
    small = min(data["batch_sizes"])
    data["hparams"][small]["lr"] = 0.004  # edited: the runs already made trained at 0.003
    write_campaign(tmp_path, data)
    out = tmp_path / "before"
    analyzed = run_cli("analyze", str(path), "--out", str(out), "--resamples", "200")
    assert analyzed.returncode == 0, analyzed.stderr
    records = json.loads(next(out.glob("rcps_*_bf16.json")).read_text())
    assert {r["BS"]: r["Hyperparams"] for r in records.values()} == {bs: {"lr": 0.003} for bs in data["batch_sizes"]}

    assert run_cli("run", str(path)).returncode == 0  # 3 new runs at 0.004 beside the 3 at 0.003
    out = tmp_path / "after"
    analyzed = run_cli("analyze", str(path), "--out", str(out), "--resamples", "200")
    assert analyzed.returncode == 0, analyzed.stderr
    line = (f"bf16 at batch size {small}: its runs are of 2 configurations (lr: 3 runs at 0.003, 3 runs at 0.004); "
            "not pooled")
    assert line in " ".join(analyzed.stderr.split()), analyzed.stderr
    records = json.loads(next(out.glob("rcps_*_bf16.json")).read_text())
    assert small not in {r["BS"] for r in records.values()} and len(records) == len(data["batch_sizes"]) - 1
    pooled = run_cli("analyze", str(path), "--out", str(tmp_path / "pooled"), "--resamples", "200", "--pool-mixed")
    assert pooled.returncode == 0, pooled.stderr
    records = json.loads(next((tmp_path / "pooled").glob("rcps_*_bf16.json")).read_text())
    assert {r["BS"]: r["Hyperparams"] for r in records.values()}[small] == {"lr": [0.003, 0.004]}
    assert yaml.safe_load(path.read_text())["hparams"][small]["lr"] == 0.004


def test_every_seed_of_a_configuration_has_one_config_key_and_another_setting_another():
    from rcpforge.sweeps.expand import expand
    from rcpforge.sweeps.spec import parse_campaign
    from tests.helpers.campaigns import tiny_campaign

    specs = expand(parse_campaign(tiny_campaign(recipes=["bf16"], seeds=3)))
    by_cell: dict[int, set[str]] = {}
    for spec in specs:
        by_cell.setdefault(spec.batch_size, set()).add(spec.config_key)
    assert all(len(keys) == 1 for keys in by_cell.values()) and len(set().union(*by_cell.values())) == 2
    assert len({s.run_key for s in specs}) == len(specs)  # the seed stays in the run key
    other = specs[0].model_copy(update={"budget": specs[0].budget.model_copy(update={"max_tokens": 1})})
    assert other.config_key != specs[0].config_key
