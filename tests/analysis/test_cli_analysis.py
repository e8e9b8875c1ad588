"""The analysis commands through the real CLI, on a real MLflow SQLite store."""

from __future__ import annotations

import io
import json

import mlperf_logging.rcp_checker.rcp_checker as checker_mod
import numpy as np
import pyarrow.parquet as pq
import pytest

from rcpforge.analysis.load import load_runs
from rcpforge.sweeps.spec import load_campaign
from tests.analysis.mllog_dirs import write_results
from tests.analysis.stores import file_runs
from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.cli import invoke, one_line_usage_error

SEEDS = 6


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    folder = tmp_path_factory.mktemp("camp")
    path = write_campaign(folder, tiny_campaign(seeds=SEEDS))
    spec = load_campaign(path)
    rng = np.random.default_rng(0)
    runs = []
    for recipe, scale in (("bf16", 1.0), ("fp8_tensorwise", 1.15)):
        for bs, base in ((16, 4000), (64, 9000)):
            for seed in range(SEEDS):
                runs.append({"recipe": recipe, "batch_size": bs, "seed": seed, "status": "converged",
                             "samples": round(base * scale * rng.normal(1, 0.02))})
    file_runs(spec.tracking_uri, spec.name, (folder / "art").as_uri(), runs)
    return path, spec


def test_analyze_writes_every_output(campaign, tmp_path, cli, monkeypatch):
    path, spec = campaign
    proc = cli("analyze", str(path), "--out", str(tmp_path), "--resamples", "2000")
    assert proc.returncode == 0, proc.stderr
    for name in ("rcp_table.csv", "rcp_table.parquet", "factors.json", "selection.json", "summary.md",
                 "rcps_tiny_bf16.json", "rcps_tiny_fp8_tensorwise.json", "rcps_tiny_fp8_tensorwise_derived.json"):
        assert (tmp_path / name).exists(), name
    table = pq.read_table(tmp_path / "rcp_table.parquet").to_pylist()
    assert {(r["recipe"], r["batch_size"]) for r in table} == {(r, b) for r in ("bf16", "fp8_tensorwise") for b in (16, 64)}
    factors = json.loads((tmp_path / "factors.json").read_text())
    assert factors["reference"] == "bf16"
    assert {f["batch_size"]: f["verdict"] for f in factors["factors"]} == {16: "slower", 64: "slower"}
    om = {(r["recipe"], r["batch_size"]): r["olympic_mean"] for r in table}
    for f in factors["factors"]:
        assert f["factor"] == pytest.approx(om[("fp8_tensorwise", f["batch_size"])] / om[("bf16", f["batch_size"])])
        assert f["ci_low"] < f["factor"] < f["ci_high"]
    # The derived RCPs load in the checker and their means are the reference's times the factor.
    monkeypatch.setitem(checker_mod.submission_runs["training"], "rcpforge_tiny", 3)
    derived = (tmp_path / "rcps_tiny_fp8_tensorwise_derived.json").read_text()
    assert {r["Precision"] for r in json.loads(derived).values()} == {"fp8_tensorwise"}
    checker = checker_mod.RCP_Checker("training", "6.0.0", "rcpforge_tiny", False, io.StringIO(derived))
    by_bs = {f["batch_size"]: f["factor"] for f in factors["factors"]}
    for rec in checker.rcp_data.values():
        assert rec["RCP Mean"] == pytest.approx(om[("bf16", rec["BS"])] * by_bs[rec["BS"]])
    selection = json.loads((tmp_path / "selection.json").read_text())
    assert len(selection["cells"]) == 4 and all(c["n"] == 3 and c["runs"] == SEEDS for c in selection["cells"])
    summary = (tmp_path / "summary.md").read_text()
    assert "## Convergence factors" in summary and "## Selection (M-of-N)" in summary


def test_export_parquet_equals_the_api_table(campaign, tmp_path, cli):
    path, spec = campaign
    out = tmp_path / "runs.parquet"
    proc = cli("export", str(path), "--parquet", str(out))
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(out).to_pylist() == load_runs(spec.tracking_uri, spec.name).to_pylist()


def test_check_and_rcp_stats_commands(tmp_path, cli):
    folder = write_results(tmp_path / "r", "llama31_8b", 32, [180_000.0 + 1000 * i for i in range(10)])
    proc = cli("check", str(folder), "--rcps", "6.1.0", "--json")
    result = json.loads(proc.stdout)
    expected = checker_mod.check_directory(str(folder), "training", "6.1.0", False, False, rcp_pass="pruned_rcps")
    assert (result["passed"], result["message"], result["norm_factor"]) == tuple(expected)
    assert proc.returncode == (0 if expected[0] else 1)
    assert set(result) >= {"passed", "message", "norm_factor", "batch_size", "benchmark", "olympic_mean", "rcp_mean",
                           "min_acceptable_mean"}
    proc = cli("rcp-stats", "6.1.0", "--benchmark", "llama31_8b", "--json")
    rows = json.loads(proc.stdout)
    checker = checker_mod.RCP_Checker("training", "6.1.0", "llama31_8b", False)
    assert [r["mean"] for r in rows] == [r["RCP Mean"] for r in checker.rcp_data.values()]
    bad = cli("check", str(folder), "--rcps", "7.7.7")
    assert bad.returncode == 2 and "neither an RCP file nor a ruleset" in bad.stderr and "Traceback" not in bad.stderr


def test_check_on_a_malformed_file_names_file_and_line_without_a_traceback(tmp_path, cli):
    folder = write_results(tmp_path / "r", "llama31_8b", 32, [180_000.0 + 1000 * i for i in range(10)])
    path = folder / "result_4.txt"
    lines = path.read_text().splitlines()
    lines[5] = lines[5][: lines[5].index('"metadata"')]  # an eval line cut mid-JSON
    lines.append(':::MLLOG {"key": "init_sta')  # a line the checker ignores
    path.write_text("\n".join(lines) + "\n")
    proc = cli("check", str(folder), "--rcps", "6.1.0")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout
    assert "FAILED" in proc.stdout and f"{path}:6" in proc.stdout and "not valid JSON" in proc.stdout
    with pytest.raises(Exception):  # the reference checker itself stops on this input
        checker_mod.check_directory(str(folder), "training", "6.1.0", False, False, rcp_pass="pruned_rcps")


def test_analyze_prints_a_short_cell_marked_and_an_overridden_n(tmp_path, cli):
    """3 runs per cell with N = 3 kept on purpose for a benchmark whose checker N is 10:
    every RCP row says "not an RCP", its limits "n/m", and a note says N is not the checker's."""
    data = tiny_campaign(name="short", seeds=3, recipes=["bf16"],
                         rcp={"benchmark": "llama31_8b", "submission_runs": 3, "override_checker_runs": True})
    path = write_campaign(tmp_path, data)
    spec = load_campaign(path)
    file_runs(spec.tracking_uri, spec.name, (tmp_path / "art").as_uri(),
              [{"recipe": "bf16", "batch_size": bs, "seed": s, "status": "converged", "samples": base + 500 * s}
               for bs, base in ((16, 4000), (64, 9000)) for s in range(3)])
    proc = cli("analyze", str(path), "--out", str(tmp_path / "out"), "--resamples", "200")
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if " bf16 " in line]
    assert len(rows) == 2
    for line in rows:
        assert line.count("n/m") == 2 and "not an RCP (3 of 2N = 6 runs)" in line
    assert "note: bf16 bs 16: not an RCP (3 of 2N = 6 runs); min acceptable mean and max speedup not meaningful" in proc.stderr
    assert ("N = 3 (rcp.override_checker_runs), but the MLCommons checker uses N = "
            f"{checker_mod.submission_runs['training']['llama31_8b']} for llama31_8b") in " ".join(proc.stderr.split())


# (how the input is made wrong, the check arguments after RESULTS_DIR, what the one line names)
CHECK_USAGE = [
    ("empty", ["--rcps", "6.1.0"], "RESULTS_DIR"),
    ("not_json", ["--rcps", "{tmp}/rcps.json"], "--rcps {tmp}/rcps.json: not an RCP JSON file"),
    ("custom", ["--rcps", "6.1.0"], "give --submission-runs N"),
    ("llama", ["--rcps", "4.0.0"], "--rcps 4.0.0: ruleset 4.0.0 has no RCPs of benchmark llama31_8b; rulesets that have"),
]


@pytest.mark.parametrize("case,args,names", CHECK_USAGE, ids=[c[0] for c in CHECK_USAGE])
def test_check_answers_a_usage_problem_with_exit_2_naming_the_flag_not_a_failing_verdict(tmp_path, case, args, names):
    folder = tmp_path / "r"
    if case == "empty":
        folder.mkdir()
    else:
        write_results(folder, "mybench" if case == "custom" else "llama31_8b", 32,
                      [180_000.0 + 1000 * i for i in range(10)])
    (tmp_path / "rcps.json").write_text("not json {")
    line = one_line_usage_error(invoke("check", str(folder), *[a.format(tmp=tmp_path) for a in args]),
                                names.format(tmp=tmp_path))
    assert "FAILED" not in line


def test_analyze_and_report_refuse_an_unknown_reference_naming_the_recipes(campaign, tmp_path):
    path, _ = campaign
    for command in (["analyze", str(path), "--out", str(tmp_path)], ["report", str(path), "--out", str(tmp_path / "r.html")]):
        one_line_usage_error(invoke(*command, "--reference", "nosuch"), "--reference 'nosuch'", "bf16, fp8_tensorwise")
    assert not list(tmp_path.iterdir())


VARIANTS = {"nvfp4-hadamard_on-sr_on": 1.10, "nvfp4-hadamard_on-sr_off": 1.15, "nvfp4-hadamard_off-sr_on": 1.30,
            "nvfp4-hadamard_off-sr_off": 1.35}


@pytest.fixture(scope="module")
def ablation(tmp_path_factory):
    """A 2x2 NVFP4 grid against BF16 in a real store: Hadamard on 10-15% slower than BF16,
    off 30-35% slower; stochastic rounding off 5% slower than on."""
    folder = tmp_path_factory.mktemp("ablation")
    grid = {"nvfp4": {"grid": {"hadamard": [True, False], "stochastic_rounding": [True, False]}}}
    # 3 seeds: fewer than 2N = 6, so every RCP row carries the long notes a small first
    # campaign has ("not an RCP", "not meaningful") beside its n/m cells
    path = write_campaign(folder, tiny_campaign(seeds=3, recipes=["bf16", grid]))
    spec = load_campaign(path)
    assert [r.name for r in spec.recipes] == ["bf16", *VARIANTS]
    rng = np.random.default_rng(3)
    # five-digit sample counts and the variants' long names: the RCP table's widest rows
    runs = [{"recipe": recipe, "batch_size": bs, "seed": seed, "status": "converged",
             "samples": round(base * scale * rng.normal(1, 0.01))}
            for recipe, scale in {"bf16": 1.0, **VARIANTS}.items()
            for bs, base in ((16, 40000), (64, 90000)) for seed in range(3)]
    file_runs(spec.tracking_uri, spec.name, (folder / "art").as_uri(), runs)
    return path, spec


def test_the_variants_of_an_ablation_are_compared_with_each_other_in_analyze_and_the_report(ablation, tmp_path, cli):
    from tests.analysis.test_report import _tables

    path, _ = ablation
    assert cli("analyze", str(path), "--out", str(tmp_path), "--resamples", "2000").returncode == 0
    om = {(r["recipe"], r["batch_size"]): r["olympic_mean"]
          for r in pq.read_table(tmp_path / "rcp_table.parquet").to_pylist()}
    factors = json.loads((tmp_path / "factors.json").read_text())
    assert {(f["candidate"], f["batch_size"]) for f in factors["factors"]} == {
        (v, bs) for v in VARIANTS for bs in (16, 64)}
    pairs = factors["pairwise"]
    # each pair once per batch size: the later variant against the earlier
    names = list(VARIANTS)
    assert [(p["candidate"], p["reference"], p["batch_size"]) for p in pairs] == [
        (b, a, bs) for i, a in enumerate(names) for b in names[i + 1:] for bs in (16, 64)]
    for p in pairs:
        bs, cand, ref = p["batch_size"], p["candidate"], p["reference"]
        assert p["factor"] == pytest.approx(om[(cand, bs)] / om[(ref, bs)])
        assert p["factor"] == pytest.approx(VARIANTS[cand] / VARIANTS[ref], rel=0.03)
        assert p["ci_low"] <= p["factor"] <= p["ci_high"] and p["ci_low"] < p["ci_high"]
    hadamard = [p for p in pairs if (p["candidate"], p["reference"]) == ("nvfp4-hadamard_off-sr_on",
                                                                         "nvfp4-hadamard_on-sr_on")]
    assert len(hadamard) == 2 and all(p["verdict"] == "slower" for p in hadamard)
    summary = (tmp_path / "summary.md").read_text()
    assert "## Candidates against each other" in summary
    assert "| nvfp4-hadamard_off-sr_on | nvfp4-hadamard_on-sr_on | 16 |" in summary

    assert cli("report", str(path), "--out", str(tmp_path / "report.html")).returncode == 0
    shown = _tables(tmp_path)["table-pairwise"]["rows"]
    assert [(r["candidate"], r["against"], r["batch_size"]) for r in shown] == [
        (p["candidate"], p["reference"], p["batch_size"]) for p in pairs]
    assert [r["factor"] for r in shown] == [p["factor"] for p in pairs]
    # in a real Chromium, at the widths a reader has, no table scrolls or is cut
    from tests.helpers.browser import layout_problems

    for width in (1280, 900):
        assert layout_problems(tmp_path / "report.html", width, tmp_path)["problems"] == [], width
