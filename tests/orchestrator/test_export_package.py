"""`rcpforge export --package DIR`: a submitter package that `python -m
mlperf_logging.package_checker DIR training RULESET` reads through, from a real campaign
of the command trainer (a stdlib program that prints MLLOG lines) in a real MLflow SQLite
store.

The campaign's benchmark is one the installed checker checks under its newest ruleset, so
the checker reads every exported file (compliance, seeds, RCPs) instead of skipping the
folder. It complains about what our tiny runs log; it must not crash or miss a file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlperf_logging.compliance_checker import mlp_compliance
from mlperf_logging.system_desc_checker import system_desc_checker
from typer.testing import CliRunner

from rcpforge.analysis.load import load_runs
from rcpforge.orchestrator.campaign import run_campaign
from rcpforge.orchestrator.cli import app
from rcpforge.orchestrator.package import MARKER
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.mllog.read import follow_file, parse_line
from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.trainer_kinds import command

BENCHMARK = "llama31_8b"
SYSTEMS = {"box_bf16_bs16", "box_fp8_tensorwise_bs16"}  # bs 64 runs all fail: no outcome


def _newest_training_ruleset() -> str:
    """Read off the installed checker, not off rcpforge's code."""
    folder = Path(mlp_compliance.__file__).parent
    versions = [p.name.split("_", 1)[1] for p in folder.iterdir() if re.fullmatch(r"training_\d+\.\d+\.\d+", p.name)]
    return max(versions, key=lambda v: tuple(int(x) for x in v.split(".")))


RULESET = _newest_training_ruleset()


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """bf16 and fp8 at batch sizes 16 and 64, 2 seeds each; every bs 64 run crashes (no
    outcome), so two cells have outcomes and two have none."""
    folder = tmp_path_factory.mktemp("package_campaign")
    kind = command(folder)
    data = tiny_campaign(
        name="package", trainer=kind.trainer, target=kind.converges, budget=kind.budget, seeds=2,
        hparams={16: kind.hparams[16], 64: {**kind.hparams[64], "exit_code": 3}},
        backend={"kind": "local", "workers": 1, "max_attempts": 1},
        rcp={"benchmark": BENCHMARK},  # N is the checker's own (10)
    )
    path = write_campaign(folder, data)
    campaign = load_campaign(path)
    summary = run_campaign(campaign)
    assert dict(summary.statuses) == {"converged": 4, "failed": 4}, summary.statuses
    return path, campaign


def _export(path: Path, *args: str):
    result = CliRunner().invoke(app, ["export", str(path), *args])
    assert "Traceback" not in result.output
    return result


@pytest.fixture(scope="module")
def packaged(ran, tmp_path_factory):
    """The whole campaign as a package, with --results in the same call."""
    path, _ = ran
    folder = tmp_path_factory.mktemp("packaged")
    package, results = folder / "pkg", folder / "results"
    result = _export(path, "--package", str(package), "--submitter", "Acme", "--system", "box",
                     "--results", str(results))
    assert result.exit_code == 0, result.output
    return package, results, result


def _seeds(folder: Path) -> list[int]:
    found = []
    for file in sorted(folder.glob("result_*.txt")):
        for line in file.read_text().splitlines():
            event = parse_line(line)
            if event and event.get("key") == "seed":
                found.append(event["value"])
    return found


def test_one_system_per_cell_with_its_runs_with_an_outcome(ran, packaged):
    _, campaign = ran
    package, results, _ = packaged
    runs = load_runs(campaign.tracking_uri, campaign.name).to_pylist()
    assert {p.name for p in (package / "results").iterdir()} == SYSTEMS
    assert {p.stem for p in (package / "systems").glob("*.json")} == SYSTEMS
    for recipe in ("bf16", "fp8_tensorwise"):
        folder = package / "results" / f"box_{recipe}_bs16" / BENCHMARK
        done = sorted(r["seed"] for r in runs if (r["recipe"], r["batch_size"]) == (recipe, 16)
                      and r["status"] == "converged")
        assert sorted(p.name for p in folder.iterdir()) == [f"result_{i}.txt" for i in range(len(done))]
        assert _seeds(folder) == done == [0, 1]
        for file in folder.iterdir():
            reading = follow_file(file, keep_lines=False)
            assert (reading.benchmark, reading.batch_size, reading.converged) == (BENCHMARK, 16, True)
        # --results in the same call: the same files in the results directory layout
        same = results / recipe / "bs16"
        assert [p.read_bytes() for p in sorted(same.iterdir())] == [p.read_bytes() for p in sorted(folder.iterdir())]


def test_system_files_pass_the_system_description_checker(packaged):
    package, _, _ = packaged
    for path in (package / "systems").glob("*.json"):
        description = json.loads(path.read_text())
        assert (description["submitter"], description["division"], description["system_name"]) == (
            "Acme", "closed", path.stem)
        valid, name, _, _ = system_desc_checker.check_system_desc(str(path), "training", RULESET)
        assert (valid, name) == (True, path.stem)


def test_cells_without_an_outcome_are_named_and_the_checker_command_is_printed(packaged):
    package, _, result = packaged
    assert "bf16 bs 64: no run has an outcome yet" in result.stderr
    assert "fp8_tensorwise bs 64: no run has an outcome yet" in result.stderr
    assert f"python -m mlperf_logging.package_checker {package} training {RULESET}" in result.stdout


def test_the_package_checker_reads_every_file_without_a_crash(packaged, tmp_path):
    package, _, result = packaged
    command = result.stdout.strip().splitlines()[-1].split("check it with: ", 1)[1].split()
    assert command[:3] == ["python", "-m", "mlperf_logging.package_checker"]
    proc = subprocess.run([sys.executable, *command[1:], "--log_output", str(tmp_path / "checker.log")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for crash in ("Traceback", "Error:", "FileNotFoundError", "No such file", "does not exist"):
        assert crash not in out, f"{crash!r} in the checker's output:\n{out[-3000:]}"
    for system in sorted(SYSTEMS):
        assert f"System description checker passed for {system}" in out
        assert f"Running compliance checks in dir {package}/results/{system}/{BENCHMARK}" in out
    assert "Skipping benchmark" not in out
    assert out.count("RCP Test") == len(SYSTEMS)  # the RCP checker read each folder's files
    assert "System description checker failed" not in out


def test_one_selected_cell_is_the_system_itself(ran, tmp_path):
    path, _ = ran
    one = _export(path, "--package", str(tmp_path / "one"), "--submitter", "Acme", "--system", "box",
                  "--recipe", "bf16", "--batch-size", "16")
    assert one.exit_code == 0, one.output
    assert sorted(p.name for p in (tmp_path / "one" / "results" / "box" / BENCHMARK).iterdir()) == [
        "result_0.txt", "result_1.txt"]
    assert [p.name for p in (tmp_path / "one" / "systems").iterdir()] == ["box.json"]
    several = _export(path, "--package", str(tmp_path / "several"), "--submitter", "Acme", "--system", "box",
                      "--batch-size", "16")
    assert several.exit_code == 0, several.output
    assert {p.name for p in (tmp_path / "several" / "results").iterdir()} == SYSTEMS


def test_a_re_export_replaces_its_results_and_keeps_what_the_submitter_wrote(ran, tmp_path):
    path, _ = ran
    package = tmp_path / "pkg"
    base = ["--package", str(package), "--system", "box", "--batch-size", "16"]
    assert _export(path, *base, "--submitter", "Acme").exit_code == 0
    edited = package / "systems" / "box_bf16_bs16.json"
    edited.write_text(json.dumps({**json.loads(edited.read_text()), "host_processor_model_name": "EPYC 9654"}))
    (package / "benchmarks").mkdir()
    (package / "benchmarks" / "train.py").write_text("print('the code')\n")
    again = _export(path, *base, "--submitter", "Acme2", "--division", "open")
    assert again.exit_code == 0, again.output
    description = json.loads(edited.read_text())
    assert (description["host_processor_model_name"], description["submitter"], description["division"]) == (
        "EPYC 9654", "Acme2", "open")
    assert (package / "benchmarks" / "train.py").read_text() == "print('the code')\n"
    # a narrower export: the earlier systems' result files go, their system files stay (with a note)
    narrower = _export(path, "--package", str(package), "--submitter", "Acme", "--system", "box",
                       "--recipe", "fp8_tensorwise", "--batch-size", "16")
    assert narrower.exit_code == 0, narrower.output
    assert [p.name for p in (package / "results").iterdir()] == ["box"]
    assert {p.stem for p in (package / "systems").glob("*.json")} == SYSTEMS | {"box"}
    assert "box_bf16_bs16.json is from an earlier export" in narrower.stderr
    assert json.loads((package / MARKER).read_text())["result_files"] == [
        f"results/box/{BENCHMARK}/result_0.txt", f"results/box/{BENCHMARK}/result_1.txt"]


@pytest.mark.parametrize("args, says", [
    (["--package", "{pkg}", "--system", "box"], "--package needs --submitter"),
    (["--package", "{pkg}", "--submitter", "Acme"], "--package needs --system"),
    (["--package", "{pkg}", "--submitter", "Acme", "--system", "a/b"], "--system 'a/b'"),
    (["--package", "{pkg}", "--submitter", "-Acme", "--system", "box"], "--submitter '-Acme'"),
    (["--package", "{pkg}", "--submitter", "Acme", "--system", "box", "--division", "secret"], "--division 'secret'"),
    (["--package", "{pkg}", "--submitter", "Acme", "--system", "box", "--ruleset", "0.6.0"], "--ruleset '0.6.0'"),
    (["--results", "{pkg}", "--recipe", "bf16"], "--recipe: only with --package"),
    (["--package", "{pkg}", "--submitter", "Acme", "--system", "box", "--recipe", "fp4"],
     "--recipe fp4: selects none of the campaign's cells (bf16 bs 16, bf16 bs 64, fp8_tensorwise bs 16"),
    (["--package", "{pkg}", "--submitter", "Acme", "--system", "box", "--batch-size", "64"],
     "no run of bf16 bs 64, fp8_tensorwise bs 64 has an outcome yet"),
])
def test_bad_input_is_one_line_that_names_the_flag(ran, tmp_path, args, says):
    path, _ = ran
    result = _export(path, *[a.replace("{pkg}", str(tmp_path / "pkg")) for a in args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and says in result.stderr, result.stderr
    assert not (tmp_path / "pkg").exists()


def test_a_folder_with_other_content_is_refused_untouched(ran, tmp_path):
    path, _ = ran
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    result = _export(path, "--package", str(folder), "--submitter", "Acme", "--system", "box")
    assert result.exit_code == 2 and "not an rcpforge package" in result.stderr, result.output
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    file = tmp_path / "a-file"
    file.write_text("x")
    result = _export(path, "--package", str(file), "--submitter", "Acme", "--system", "box")
    assert result.exit_code == 2 and "is a file" in result.stderr, result.output


def test_result_files_that_log_another_benchmark_are_refused(ran, tmp_path):
    """The same runs read through a campaign file that names another benchmark: the
    package checker would take the folder's name and the RCP checker the files'."""
    path, _ = ran
    other = yaml.safe_load(path.read_text())
    other["rcp"]["benchmark"] = "rcpforge_other"
    other_path = path.parent / "other.yaml"
    other_path.write_text(yaml.safe_dump(other, sort_keys=False))
    result = _export(other_path, "--package", str(tmp_path / "pkg"), "--submitter", "Acme", "--system", "box")
    assert result.exit_code == 2, result.output
    # The clash named, both values and where each comes from; rcp.benchmark is set already, so
    # "set rcp.benchmark" alone would be no fix.
    line = " ".join(result.stderr.split())  # rich may wrap the one line on a narrow console
    assert f"(the program's MLLOG) logs submission_benchmark '{BENCHMARK}'" in line, line
    assert "the campaign's benchmark, under which the package puts it, is 'rcpforge_other' " \
           "(the campaign's rcp.benchmark)" in line, line
    assert "make the program log submission_benchmark 'rcpforge_other'" in line
    assert f"or set rcp.benchmark: {BENCHMARK} in the campaign file" in line
    assert not (tmp_path / "pkg").exists()
