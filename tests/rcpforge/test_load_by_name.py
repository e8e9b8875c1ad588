"""A campaign opened by name from its store means what its file meant when it ran: its
runs record the file's RCP benchmark, N and reference recipe (tags, outside the run
key), so the RCP table and the factors equal the file's; a store whose runs record none
(older stores) is analysed with defaults that a warning names, once."""

from __future__ import annotations

import sqlite3
import warnings

import pandas as pd
import pytest

import rcpforge
from tests.conftest import run_cli
from tests.helpers.adaptive_campaigns import factor_program
from tests.helpers.campaigns import write_campaign

# Neither the default benchmark (the campaign's name) nor the default N (half the
# smallest cell, at least 3: 3 here), so a default shows in every number.
BENCHMARK, N = "rcpforge_byname", 4


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    folder = tmp_path_factory.mktemp("byname")
    path = write_campaign(folder, {
        "name": "byname", **factor_program(),
        "recipes": [{"bf16": {"slowdown": 1.0}}, {"fp8_like": {"slowdown": 1.25}}],
        "batch_sizes": [16, 64], "seeds": 4, "hparams": {16: {}, 64: {}},
        "backend": {"kind": "local", "workers": 2},
        "rcp": {"benchmark": BENCHMARK, "submission_runs": N},
    })
    done = run_cli("run", str(path))
    assert done.returncode == 0, done.stderr
    return path


def _by_name(uri: str, **given) -> tuple[rcpforge.Campaign, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        campaign = rcpforge.load(tracking_uri=uri, campaign="byname", **given)
    return campaign, [str(w.message) for w in caught]


def test_by_name_the_rcp_table_and_factors_are_the_files(ran):
    from_file = rcpforge.load(ran)
    by_name, notes = _by_name(from_file.tracking_uri)
    assert notes == []  # the runs said it all
    assert (by_name.benchmark, by_name.submission_runs, by_name.reference) == (BENCHMARK, N, "bf16")
    pd.testing.assert_frame_equal(by_name.rcp_table(), from_file.rcp_table())
    pd.testing.assert_frame_equal(by_name.factors(resamples=500), from_file.factors(resamples=500))
    # given, they win over what the runs recorded
    told, notes = _by_name(from_file.tracking_uri, benchmark="other_bench", submission_runs=3)
    assert (told.benchmark, told.submission_runs, notes) == ("other_bench", 3, [])


def test_a_store_without_the_tags_says_which_defaults_it_used(ran, tmp_path):
    older = tmp_path / "older.db"
    older.write_bytes((ran.parent / "rcpforge-mlflow.db").read_bytes())
    with sqlite3.connect(older) as con:  # as a store written before the runs recorded them
        con.execute("DELETE FROM tags WHERE key IN ('rcpforge.benchmark', 'rcpforge.submission_runs', "
                    "'rcpforge.reference')")
    campaign, notes = _by_name(f"sqlite:///{older}")
    assert (campaign.benchmark, campaign.submission_runs) == ("byname", 3)
    assert len(notes) == 1 and "benchmark='byname'" in notes[0] and "submission_runs=3" in notes[0]
    assert "give benchmark= and submission_runs=" in notes[0]
    # the defaults change the numbers: the reason the runs record them
    from_file = rcpforge.load(ran)
    assert not campaign.rcp_table()["min_acceptable_mean"].equals(from_file.rcp_table()["min_acceptable_mean"])
