"""The 6.1 rules' disclosure keys in what rcpforge exports from a command campaign whose
program writes none (the label says them), judged by mlperf-logging's own compliance and
package checkers for ruleset 6.1.0 (the tiny LM's files: tests/orchestrator/test_mllog.py).
The checkers complain about much else the tiny runs do not log; these tests hold them to
the disclosure rules, and check that they did complain about the rest (they read the files)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcpforge.orchestrator.campaign import run_campaign
from rcpforge.orchestrator.cli import app
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.mllog.read import DISCLOSURE_KEYS
from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.rules61 import RULESET, compliance, disclosed, disclosure_complaints
from tests.helpers.trainer_kinds import command

BENCHMARK = "llama31_8b"  # one the 6.1 package checker checks (it skips others)
# A label that says every key, and one that says only its precision.
FULL = {"precision": "mxfp4", "lowest_numerical_precision_in_attn": "bfloat16",
        "lowest_numerical_precision_in_comm": "bfloat16", "tensor_parallelism": 2, "pipeline_parallelism": 1,
        "context_parallelism": 1, "expert_parallelism": 1, "micro_batch_size": 8}


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """(campaign file, package): one run per label and batch size, exported as a package."""
    folder = tmp_path_factory.mktemp("rules61")
    kind = command(folder)
    data = tiny_campaign(name="labelled", trainer=kind.trainer, target=kind.converges, budget=kind.budget, seeds=1,
                         recipes=[{"vendor_full": FULL}, {"vendor_mx": {"precision": "mxfp4"}}],
                         hparams=kind.hparams, backend={"kind": "local", "workers": 2, "max_attempts": 1},
                         rcp={"benchmark": BENCHMARK})
    path = write_campaign(folder, data, "labelled_campaign.yaml")
    summary = run_campaign(load_campaign(path))
    assert dict(summary.statuses) == {"converged": 4}, summary.statuses
    result = CliRunner().invoke(app, ["export", str(path), "--package", str(folder / "pkg"), "--submitter", "Acme",
                                      "--system", "box"])
    assert result.exit_code == 0, result.output
    assert f"package_checker {folder / 'pkg'} training {RULESET}" in result.stdout  # 6.1.0: the newest, the default
    return path, folder / "pkg", result.output


def _results(package: Path, label: str) -> list[Path]:
    files = sorted((package / "results").glob(f"box_{label}_bs*/{BENCHMARK}/result_*.txt"))
    assert len(files) == 2
    return files


def test_a_label_that_says_every_key_gives_files_that_pass_the_61_disclosure_rules(package):
    campaign_file, folder, _ = package
    for path in _results(folder, "vendor_full"):
        found = disclosed(path)
        assert {k: len(v) for k, v in found.items()} == dict.fromkeys(DISCLOSURE_KEYS, 1), path
        assert found["config_filename"] == [campaign_file.name]
        assert found["lowest_numerical_precision_in_linear"] == ["mxfp4"]
        assert found["tensor_parallelism"] == [2]
        assert disclosure_complaints(path) == {}


def test_a_label_that_says_only_its_precision_gives_that_and_no_more(package):
    campaign_file, folder, _ = package
    for path in _results(folder, "vendor_mx"):
        assert disclosed(path) == {"lowest_numerical_precision_in_linear": ["mxfp4"],
                                   "config_filename": [campaign_file.name]}
        complaints = compliance(path).overwritable
        assert not {"lowest_numerical_precision_in_linear", "config_filename"} & set(complaints)
        # what neither the program nor the label says is not made up: the checker wants it
        assert "tensor_parallelism" in complaints


def test_export_names_per_file_what_the_compliance_checker_will_refuse_before_it_runs(package):
    _, folder, said = package
    lines = [line for line in said.splitlines() if line.startswith(f"compliance ({RULESET}): the checker will refuse")]
    partial = [line for line in lines if "box_vendor_mx_" in line]
    full = [line for line in lines if "box_vendor_full_" in line]
    named = " ".join(partial)
    assert all(f"results/box_vendor_mx_bs{bs}/{BENCHMARK}/result_0.txt" in named for bs in (16, 64)), said
    # what the label did not say, named as missing before the checker names it (its oracle: the checker's own)
    for path in _results(folder, "vendor_mx"):
        refused = [k for k in DISCLOSURE_KEYS if k in compliance(path).overwritable]
        assert refused and all(k in named for k in refused), (refused, said)
    assert "missing" in named and "lowest_numerical_precision_in_linear" not in named
    # the full label's files: refused for what the tiny program does not log, never for a disclosure key
    assert full and not any(key in line for line in full for key in DISCLOSURE_KEYS), full


def test_the_61_package_checker_raises_nothing_about_the_full_labels_disclosure(package, tmp_path):
    folder = Path(shutil.copytree(package[1], tmp_path / "pkg"))
    for stale in (folder / "results").glob("box_vendor_mx_*"):  # its missing keys are the test above's
        shutil.rmtree(stale)
        (folder / "systems" / f"{stale.name}.json").unlink()
    proc = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(folder), "training", RULESET,
                           "--log_output", str(tmp_path / "checker.log")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = proc.stdout + proc.stderr + (tmp_path / "checker.log").read_text()
    assert "Traceback" not in out
    for bs in (16, 64):
        assert f"Running compliance checks in dir {folder}/results/box_vendor_full_bs{bs}/{BENCHMARK}" in out
    assert "cache_clear" in out  # its compliance complaints are in this output
    for key in DISCLOSURE_KEYS:
        assert f"'{key}'" not in out, f"the package checker complains about {key}:\n{out[-3000:]}"
