"""`rcpforge export --package` (issue 38): each system's division is the one its result
files log (MLLOG `submission_division`), so `mlperf_logging.package_checker` applies that
division's checks (the RCP test only for closed); a `--division` that contradicts the
files, and files of one cell that disagree, are refused with nothing written; a cell with
fewer result files than the checker's N for the benchmark gets a note.

A real campaign of the command trainer (a stdlib program that prints MLLOG lines) in a
real MLflow SQLite store; the program is wrapped so that it logs the division its
`my_division` hyperparameter names first ("mixed": open for seed 0, closed for the others)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcpforge.orchestrator.campaign import run_campaign
from rcpforge.orchestrator.cli import app
from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.submission import SUBMISSION_RUNS
from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.trainer_kinds import command

BENCHMARK = "deepseekv3_671b"  # one the newest training ruleset checks, with N = 3
N = SUBMISSION_RUNS[BENCHMARK]

_WRAPPER = textwrap.dedent('''
    import json, runpy, sys, time
    division, program, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if division == "mixed":
        division = "open" if int(args[2]) == 0 else "closed"
    event = {"namespace": "", "time_ms": int(time.time() * 1000), "event_type": "POINT_IN_TIME",
             "key": "submission_division", "value": division, "metadata": {}}
    print(":::MLLOG " + json.dumps(event), flush=True)
    sys.argv = [program, *args]
    runpy.run_path(program, run_name="__main__")
''')


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """bf16 (N seeds) and fp8_tensorwise (N - 1 seeds) at batch sizes 16 (files log open)
    and 64 (files log open for seed 0, closed for the others)."""
    assert N == 3
    folder = tmp_path_factory.mktemp("division_campaign")
    kind = command(folder)
    wrapper = folder / "log_division.py"
    wrapper.write_text(_WRAPPER)
    argv = kind.trainer["argv"]
    trainer = {**kind.trainer, "argv": [argv[0], str(wrapper), "{my_division}", *argv[1:]]}
    data = tiny_campaign(
        name="division", trainer=trainer, target=kind.converges, budget=kind.budget,
        seeds={"default": N, "fp8_tensorwise": N - 1},
        hparams={16: {**kind.hparams[16], "my_division": "open"}, 64: {**kind.hparams[64], "my_division": "mixed"}},
        backend={"kind": "local", "workers": 1, "max_attempts": 1},
        rcp={"benchmark": BENCHMARK},
    )
    path = write_campaign(folder, data)
    summary = run_campaign(load_campaign(path))
    assert dict(summary.statuses) == {"converged": 4 * N - 2}, summary.statuses
    return path


def _export(path: Path, *args: str):
    result = CliRunner().invoke(app, ["export", str(path), *args])
    assert "Traceback" not in result.output
    return result


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def test_the_division_is_the_files_and_the_checker_applies_it(ran, tmp_path):
    package = tmp_path / "pkg"
    result = _export(ran, "--package", str(package), "--submitter", "Acme", "--system", "box", "--batch-size", "16")
    assert result.exit_code == 0, result.output
    systems = {"box_bf16_bs16", "box_fp8_tensorwise_bs16"}
    for system in systems:
        assert json.loads((package / "systems" / f"{system}.json").read_text())["division"] == "open"
    assert result.stdout.count("division open (logged by its result files)") == 2
    proc = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(package), "training",
                           result.stdout.split()[-1], "--log_output", str(tmp_path / "checker.log")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    for system in sorted(systems):
        assert f"Running compliance checks in dir {package}/results/{system}/{BENCHMARK}" in out, out[-3000:]
    # open: no seed or RCP check (a closed description made it report "RCP Test Failed")
    assert "RCP Test" not in out and "Seed checker" not in out, out[-3000:]
    assert "Traceback" not in out


def test_a_contradicting_division_is_refused_and_nothing_written(ran, tmp_path):
    before = _tree(tmp_path)
    result = _export(ran, "--package", str(tmp_path / "pkg"), "--submitter", "Acme", "--system", "box",
                     "--batch-size", "16", "--division", "closed")
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("error: --division closed"), line
    assert "log submission_division 'open'" in line and "drop --division" in line, line
    assert _tree(tmp_path) == before
    agreeing = _export(ran, "--package", str(tmp_path / "pkg"), "--submitter", "Acme", "--system", "box",
                       "--batch-size", "16", "--division", "open")
    assert agreeing.exit_code == 0, agreeing.output


def test_files_of_a_cell_that_disagree_are_refused_naming_them(ran, tmp_path):
    before = _tree(tmp_path)
    result = _export(ran, "--package", str(tmp_path / "pkg"), "--submitter", "Acme", "--system", "box")
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line and "bf16 bs 64: its result files log different submission_division" in line, line
    assert "closed: seed 1 (" in line and "open: seed 0 (" in line, line
    assert _tree(tmp_path) == before


def test_a_cell_with_fewer_files_than_the_checker_wants_gets_a_note(ran, tmp_path):
    result = _export(ran, "--package", str(tmp_path / "pkg"), "--submitter", "Acme", "--system", "box",
                     "--batch-size", "16")
    assert result.exit_code == 0, result.output
    short = (f"note: fp8_tensorwise bs 16: {N - 1} result files, fewer than the {N} the MLCommons checker "
             f"wants for benchmark {BENCHMARK}")
    assert short in result.stderr
    assert "bf16 bs 16:" not in result.stderr and result.stderr.count("fewer than the") == 1
