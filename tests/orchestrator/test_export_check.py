"""Issue 6's done-when: `rcpforge export --results` directories, checked by the MLCommons
RCP checker's own command line (the campaign's benchmark registered) and by `rcpforge
check`, get the same verdict and normalization factor, in every RCP branch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rcpforge.analysis.load import load_runs
from tests.conftest import ROOT, run_cli

WRAPPER = ROOT / "tests" / "helpers" / "mlperf_checker.py"


@pytest.fixture(scope="module")
def exported(finished, tmp_path_factory):
    """The finished tiny campaign exported by the CLI (both outputs in one call) and its
    RCP files written by `rcpforge analyze`."""
    path, campaign, _, _ = finished
    folder = tmp_path_factory.mktemp("export_check")
    results, table, out = folder / "results", folder / "runs.parquet", folder / "analysis"
    proc = run_cli("export", str(path), "--parquet", str(table), "--results", str(results))
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("analyze", str(path), "--out", str(out), "--resamples", "100")
    assert proc.returncode == 0, proc.stderr
    return campaign, results, table, out


def _checker(benchmark: str, runs: int, folder: Path, rcp_file: Path, log: Path) -> tuple[dict, int]:
    proc = subprocess.run(
        [sys.executable, str(WRAPPER), benchmark, str(runs), str(folder), "--rcp_usage", "training",
         "--custom_rcps", str(rcp_file), "--log_output", str(log)],
        capture_output=True, text=True, timeout=120,
    )
    verdict = json.loads(proc.stdout.splitlines()[0])
    assert f"{verdict['message']}, RCP test {'PASSED' if verdict['passed'] else 'FAILED'}" in proc.stderr
    return verdict, proc.returncode


def _ours(folder: Path, rcp_file: Path, runs: int) -> tuple[dict, int]:
    proc = run_cli("check", str(folder), "--rcps", str(rcp_file), "--submission-runs", str(runs), "--json")
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout), proc.returncode


def _variants(rcp_file: Path, tmp: Path) -> dict[str, Path]:
    """The RCP file as analyze wrote it, and edits of it that reach the checker's other
    branches: only one batch size present, and the two records moved to batch sizes
    around both of ours (interpolation)."""
    raw = json.loads(rcp_file.read_text())
    by_bs = sorted(raw.items(), key=lambda kv: kv[1]["BS"])
    assert [body["BS"] for _, body in by_bs] == [16, 64]
    (small_name, small), (large_name, large) = by_bs
    variants = {"as written": raw, "only bs 64": {large_name: large}, "only bs 16": {small_name: small},
                "bs 8 and 128": {small_name: {**small, "BS": 8}, large_name: {**large, "BS": 128}}}
    paths = {}
    for name, content in variants.items():
        paths[name] = tmp / f"rcps_{name.replace(' ', '_')}.json"
        paths[name].write_text(json.dumps(content))
    return paths


def test_export_writes_both_the_table_and_the_results_directories(exported):
    campaign, results, table, _ = exported
    runs = load_runs(campaign.tracking_uri, campaign.name).to_pylist()
    assert pq.read_table(table).to_pylist() == runs
    cells = {(r["recipe"], r["batch_size"]) for r in runs}
    for recipe, bs in cells:
        seeds = sum(1 for r in runs if (r["recipe"], r["batch_size"]) == (recipe, bs))
        files = sorted(p.name for p in (results / recipe / f"bs{bs}").glob("result_*.txt"))
        assert files == sorted(f"result_{i}.txt" for i in range(seeds))


def test_checker_and_rcpforge_check_agree_on_every_exported_directory(exported, tmp_path):
    campaign, results, _, out = exported
    rcp_file = out / f"rcps_{campaign.name}_bf16.json"
    runs, benchmark = campaign.submission_runs, campaign.benchmark
    variants = _variants(rcp_file, tmp_path)
    folders = sorted(results.glob("*/bs*"))
    assert len(folders) == 4
    # Every directory against the RCPs as written; then one directory per other branch
    # (the fp8 directories, checked against RCPs of the bf16 recipe).
    cases = [(folder, "as written") for folder in folders] + [
        (results / "fp8_tensorwise" / "bs16", "only bs 64"),
        (results / "fp8_tensorwise" / "bs64", "only bs 16"),
        (results / "fp8_tensorwise" / "bs16", "bs 8 and 128"),
    ]
    messages = set()
    for folder, variant in cases:
        rcps = variants[variant]
        theirs, their_rc = _checker(benchmark, runs, folder, rcps, tmp_path / "checker.log")
        ours, our_rc = _ours(folder, rcps, runs)
        where = f"{folder.relative_to(results)} against {variant}"
        assert (ours["passed"], ours["message"]) == (theirs["passed"], theirs["message"]), where
        assert ours["norm_factor"] == pytest.approx(theirs["norm_factor"], rel=1e-12), where
        assert our_rc == their_rc == (0 if theirs["passed"] else 1), where
        messages.add(theirs["message"])
    assert "RCP found" in messages
    assert "RCP Interpolation" in messages
    assert messages & {"Missing RCP, please submit RCP with BS = 16", "Missing RCP, please submit RCP with BS = 64",
                       "RCP not found but slower convergence on smaller batch size"}


def test_export_needs_an_output(finished):
    path = finished[0]
    proc = run_cli("export", str(path))
    assert proc.returncode != 0 and "--parquet" in proc.stderr and "--results" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert run_cli("export-results", str(path), "--results", "x").returncode != 0  # the old command is gone
