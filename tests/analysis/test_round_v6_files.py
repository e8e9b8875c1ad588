"""`rcpforge round` on what rounds since v6.0 hold: `summary.json` files (mlperf-logging's
result summarizer's records: `<benchmark>:samples_to_converge`, `:RCP`,
`:rcp_scaling_factor`) set beside what rcpforge computes, disagreements named; and AMD's
misspelled `lowest_numerical_precision_linear`, read as the submission's precision. The
v5.0 subset has no summary.json: these tests add some to a copy of it."""

from __future__ import annotations

import json
import shutil

import pytest

from rcpforge.analysis.round.summary import COLUMNS
from rcpforge.analysis.round.verdicts import analyze_round
from tests.conftest import run_cli
from tests.helpers.round_data import write_submission


def _record(row: dict, **changed) -> dict:
    """The summarizer's record of the row's system, agreeing with the row unless `changed`."""
    bench = row["benchmark"]
    values = {"samples_to_converge": row["olympic_mean"], "RCP": "Pass" if row["passed"] else "Fail",
              "rcp_scaling_factor": row["norm_factor"], **changed}
    return {"division": "closed", "submitter": row["submitter"], "system": row["system"],
            **{f"{bench}:{k}": v for k, v in values.items()}, f"{bench}:time_to_train": 12.5}


@pytest.fixture
def round_with_summaries(round_v50_subset, tmp_path):
    """The subset, with a summary.json per submitter: tinycorp's records for its systems
    (one names the system by its description's system_name; tinybox_green's retinanet
    disagrees on all three numbers), and one inside Dell's results directory."""
    root = shutil.copytree(round_v50_subset, tmp_path / "round")
    rows = {r["dir"]: r for r in analyze_round(root, "5.0.0")}
    assert all(r[c] is None for r in rows.values() for c in COLUMNS)  # no summary.json yet
    tinycorp = [r for d, r in rows.items() if d.startswith("tinycorp/")]
    records = []
    for row in tinycorp:
        if row["dir"] == "tinycorp/results/tinybox_green/retinanet":
            records.append(_record(row, samples_to_converge=row["olympic_mean"] * 1.25, RCP="Fail",
                                   rcp_scaling_factor=1.5))
        elif row["system"] == "tinybox_8xMI300X":
            records.append({**_record(row), "system": "tinybox 8xMI300X"})  # its system_name
        else:
            records.append(_record(row))
    # the two tinybox_green submissions are one record, as the summarizer writes a system
    green = [r for r in records if r["system"] == "tinybox_green"]
    records = [r for r in records if r["system"] != "tinybox_green"] + [{k: v for r in green for k, v in r.items()}]
    (root / "tinycorp" / "summary.json").write_text(json.dumps(records, indent=2))
    dell = rows["Dell/results/1xXE9680x8MI300X/llama2_70b_lora"]
    (root / dell["dir"] / "summary.json").write_text(json.dumps(
        {"samples_to_converge": dell["olympic_mean"], "RCP": "Pass", "rcp_scaling_factor": dell["norm_factor"]}))
    return root, rows


def test_round_reads_summary_json_and_names_each_disagreement(round_with_summaries):
    root, before = round_with_summaries
    proc = run_cli("round", "--no-import", str(root), "--rcps", "5.0.0", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["dir"]: r for r in json.loads(proc.stdout)}
    assert set(rows) == set(before)
    for folder, row in rows.items():
        assert row["summary_file"] is not None, folder  # every submission has its record
        assert (row["passed"], row["olympic_mean"], row["norm_factor"]) == (
            before[folder]["passed"], before[folder]["olympic_mean"], before[folder]["norm_factor"])  # unchanged
    odd = rows.pop("tinycorp/results/tinybox_green/retinanet")
    assert odd["summary_file"] == str(root / "tinycorp" / "summary.json")
    assert (odd["summary_samples_to_converge"], odd["summary_rcp"], odd["summary_rcp_scaling_factor"]) == (
        pytest.approx(5.0), "Fail", 1.5)
    said = odd["summary_disagrees"]
    assert "samples_to_converge 5 in summary.json, olympic mean 4 here" in said
    assert "rcp_scaling_factor 1.5 in summary.json, normalization factor 1 here" in said
    assert "RCP 'Fail' in summary.json, 'Pass' here" in said
    assert {d: r["summary_disagrees"] for d, r in rows.items()} == dict.fromkeys(rows)
    assert rows["Dell/results/1xXE9680x8MI300X/llama2_70b_lora"]["summary_file"].endswith(
        "Dell/results/1xXE9680x8MI300X/llama2_70b_lora/summary.json")


def test_the_round_table_shows_the_disagreement_and_the_count(round_with_summaries):
    root, _ = round_with_summaries
    proc = run_cli("round", "--no-import", str(root), "--rcps", "5.0.0")
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "summary.json: 5 submissions compared with what it says, 1 disagree" in out
    assert "the round's summary.json" in out


def test_an_unreadable_summary_json_is_a_note_and_the_round_goes_on(round_v50_subset, tmp_path):
    root = shutil.copytree(round_v50_subset, tmp_path / "round")
    (root / "tinycorp" / "summary.json").write_text("{not json")
    proc = run_cli("round", "--no-import", str(root), "--rcps", "5.0.0", "--json")
    assert proc.returncode == 0, proc.stderr
    assert f"note: {root / 'tinycorp' / 'summary.json'}: not readable JSON" in proc.stderr
    assert all(r["summary_file"] is None for r in json.loads(proc.stdout))


def test_amds_misspelled_precision_key_is_the_submissions_precision(tmp_path):
    """AMD's v6.0 llama31_8b files write `lowest_numerical_precision_linear`."""
    write_submission(tmp_path / "AMD" / "results" / "mi355x" / "llama31_8b", "llama31_8b", 32,
                     [100_000.0] * 10, logged={"lowest_numerical_precision_linear": "mxfp4"})
    write_submission(tmp_path / "Other" / "results" / "box" / "llama31_8b", "llama31_8b", 32,
                     [100_000.0] * 10, logged={"lowest_numerical_precision_in_linear": "fp8"})
    rows = {r["submitter"]: r for r in analyze_round(tmp_path, "6.0.0")}
    assert (rows["AMD"]["precision"], rows["Other"]["precision"]) == ("mxfp4", "fp8")
