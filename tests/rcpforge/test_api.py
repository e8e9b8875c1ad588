"""The Python API gives what the command line writes, for the same campaign: the runs
table (`export --parquet`), the RCP table, factors and selection (`analyze`), a check
and a round (`check --json`, `round --json`); and bad input is one RcpforgeError line."""

from __future__ import annotations

import json
import math

import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import rcpforge
from tests.helpers.cli import invoke
from tests.rcpforge.conftest import SEEDS


def _records(frame: pd.DataFrame) -> list[dict]:
    """Rows as plain dicts, a missing number None (as JSON has it)."""
    rows = frame.astype(object).to_dict("records")
    return [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()} for row in rows]


def test_the_api_gives_the_numbers_the_command_line_wrote(demo):
    campaign = rcpforge.load(demo.campaign_file)
    assert (campaign.name, campaign.benchmark, campaign.submission_runs) == ("demo", "rcpforge_demo", 3)
    assert campaign.recipes == ("bf16", "fp8_like")

    runs = campaign.runs_arrow()
    assert runs.equals(pq.read_table(demo.runs_file))
    assert runs.num_rows == 2 * 2 * SEEDS
    frame = campaign.runs()
    assert list(frame.columns) == runs.schema.names and len(frame) == runs.num_rows
    assert frame["hparams"].iloc[0]["lr"] == "0.01"  # a dict, not Arrow's list of pairs

    pd.testing.assert_frame_equal(campaign.rcp_table(), pd.read_parquet(demo.analysis / "rcp_table.parquet"))

    factors = json.loads((demo.analysis / "factors.json").read_text())
    found = campaign.factors()
    assert _records(found) == factors["factors"]
    assert set(found["candidate"]) == {"fp8_like"} and (found["ci_low"] > 1).all()  # 25% slower, and it shows

    cells = json.loads((demo.analysis / "selection.json").read_text())["cells"]
    for cell in cells:
        cell.update({f"honest_{k}": v for k, v in cell.pop("honest").items()})
    assert _records(campaign.selection_risk()) == cells


def test_a_store_opens_by_campaign_name(demo):
    from_file = rcpforge.load(demo.campaign_file)
    by_name = rcpforge.load(tracking_uri=from_file.tracking_uri, campaign="demo", benchmark="rcpforge_demo",
                            submission_runs=3)
    assert by_name.recipes == from_file.recipes
    pd.testing.assert_frame_equal(by_name.rcp_table(), from_file.rcp_table())
    # without a campaign file: the benchmark and N the runs recorded, the file's
    plain = rcpforge.load(tracking_uri=from_file.tracking_uri, campaign="demo")
    assert (plain.benchmark, plain.submission_runs) == ("rcpforge_demo", 3)
    # a filtered runs table is analysed as given
    runs = from_file.runs_arrow()
    only_bs16 = runs.filter(pc.equal(runs["batch_size"], 16))
    assert set(from_file.rcp_table(runs=only_bs16)["batch_size"]) == {16}


def test_check_and_round_are_the_commands_numbers(demo):
    rcps = demo.analysis / "rcps_demo_bf16.json"
    folder = demo.results / "fp8_like" / "bs16"
    result = rcpforge.check(folder, rcps)
    shown = invoke("check", str(folder), "--rcps", str(rcps), "--json")
    assert shown.exit_code == (0 if result.passed else 1)
    assert json.loads(shown.stdout) == result.to_json()
    assert result.benchmark == "rcpforge_demo" and result.olympic_mean > result.rcp_mean  # the slower recipe

    found = rcpforge.round(demo.results, rcps, group_by=["benchmark", "batch_size"])
    assert len(found.submissions) == 4 and found.group_by == ("benchmark", "batch_size")
    listed = invoke("round", str(demo.results), "--rcps", str(rcps), "--group-by", "benchmark,batch_size",
                    "--json", "--no-import")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout) == json.loads(json.dumps(found.submissions))
    assert len(found.table()) == 4 and {g["submissions"] for g in found.groups()} == {2}


@pytest.mark.parametrize("call, fragment", [
    (lambda d: rcpforge.load(d.folder / "nope.yaml"), "nope.yaml"),
    (lambda d: rcpforge.load(tracking_uri=f"sqlite:///{d.folder}/other.db", campaign="demo"), "no such store yet"),
    (lambda d: rcpforge.load(tracking_uri=rcpforge.load(d.campaign_file).tracking_uri, campaign="demo2"),
     "no runs of campaign demo2"),
    (lambda d: rcpforge.load(), "give a campaign file, or tracking_uri= and campaign="),
    (lambda d: rcpforge.load(d.campaign_file).factors(reference="fp4"), "give one of bf16, fp8_like"),
    (lambda d: rcpforge.check(d.results, "7.9.9"), "neither an RCP file nor a ruleset"),
    (lambda d: rcpforge.check(d.folder / "nope", "5.1.0"), "is not a folder"),
    (lambda d: rcpforge.round(d.results, "5.0.0", p_threshold=2), "--p-threshold 2"),
    (lambda d: rcpforge.round(d.results, "5.0.0", group_by="benchmark,gpu"), "unknown key 'gpu'"),
])
def test_bad_input_is_one_line(demo, call, fragment):
    with pytest.raises(rcpforge.RcpforgeError) as err:
        call(demo)
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert not (demo.folder / "other.db").exists()  # asking made no store


def test_an_imported_campaign_opens_with_the_benchmark_its_files_name(demo, tmp_path):
    uri = f"sqlite:///{tmp_path / 'imported.db'}"
    imported = invoke("import", str(demo.results), "--campaign", "imported", "--tracking-uri", uri)
    assert imported.exit_code == 0, imported.output
    campaign = rcpforge.load(tracking_uri=uri, campaign="imported")
    assert (campaign.benchmark, campaign.recipes) == ("rcpforge_demo", ("bf16", "fp8_like"))  # recipes: the folders
    trained = rcpforge.load(demo.campaign_file).rcp_table()
    columns = ["recipe", "batch_size", "runs", "converged", "olympic_mean", "min_acceptable_mean"]
    pd.testing.assert_frame_equal(campaign.rcp_table()[columns], trained[columns])
