"""`rcpforge run --smoke` (issue 52): one short run of each configuration, recorded apart
from the campaign, and what the MLCommons checkers will say of the program's MLLOG. The
shipped example program (it logs every key of the 6.1 rules), and the same behind a
program that drops two of them; the real CLI, a real SQLite store, and the compliance
checker's own verdict on the smoke's files as the oracle."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from mlflow import MlflowClient

from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.mllog.read import DISCLOSURE_KEYS
from tests.conftest import ROOT, run_cli
from tests.helpers.rules61 import compliance

EXAMPLES = ROOT / "sweeps" / "examples"
LEAVES_OUT = ROOT / "tests" / "helpers" / "leaves_out.py"


def _example(folder: Path, leave_out: tuple[str, ...] = ()) -> Path:
    """The shipped command example in `folder`; its program's `leave_out` keys dropped."""
    for name in ("command.yaml", "mllog_trainer.py"):
        shutil.copy(EXAMPLES / name, folder / name)
    path = folder / "command.yaml"
    if leave_out:
        data = yaml.safe_load(path.read_text())
        data["trainer"]["argv"] = ["{python}", str(LEAVES_OUT), ",".join(leave_out), *data["trainer"]["argv"]]
        path.write_text(yaml.safe_dump(data))
    return path


def _smoke_files(path: Path) -> list[Path]:
    """The result files of the campaign's one smoke, from the store's one smoke experiment."""
    campaign = load_campaign(path)
    client = MlflowClient(campaign.tracking_uri)
    smokes = [e.name for e in client.search_experiments() if e.name.startswith(f"{campaign.name}.smoke-")]
    assert len(smokes) == 1, smokes
    assert client.get_experiment_by_name(campaign.name) is None  # the campaign has no run yet
    files = sorted((path.parent / "rcpforge-runs" / smokes[0]).glob("*/result.txt"))
    assert len(files) == 2  # bf16 at batch sizes 16 and 128
    return files


def test_a_program_that_logs_every_key_passes_and_its_smoke_counts_for_nothing(tmp_path):
    path = _example(tmp_path)
    proc = run_cli("run", str(path), "--smoke", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "smoke: nothing missing" in proc.stdout and "MISSING" not in proc.stdout, proc.stdout
    findings = [line.split()[:2] for line in proc.stdout.splitlines() if line.startswith("  ")]
    assert [f for f in findings if f[0] == "ok"].count(["ok", "disclosure"]) == 2, proc.stdout
    assert "config_filename added by rcpforge" in proc.stdout
    assert "the RCP checker reads mllog_example's value to converge from epoch_num: on every eval line" in proc.stdout
    for result in _smoke_files(path):
        # the checker's common rules refuse nothing (the division's would refuse the benchmark,
        # which is no MLPerf one: the smoke notes that, and the package checker skips it)
        assert compliance(result).overwritable == {}, result
    ran = run_cli("run", str(path), cwd=tmp_path)  # the campaign: every run launched, none taken from the smoke
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "campaign command_example: launched 6 runs" in ran.stdout, ran.stdout
    # the shipped example's program logs epoch_num: no unit-rule warning on its launch
    assert "warning" not in ran.stderr, ran.stderr


def test_a_program_that_lacks_two_keys_is_told_which_before_the_campaign(tmp_path):
    lacking = ("tensor_parallelism", "micro_batch_size")
    path = _example(tmp_path, leave_out=lacking)
    proc = run_cli("run", str(path), "--smoke", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("  MISSING disclosure")]
    assert len(lines) == 2, proc.stdout
    assert all("missing tensor_parallelism, micro_batch_size" in line for line in lines), lines
    assert "a recipe label can say tensor_parallelism, micro_batch_size" in lines[0]
    assert "smoke: 2 of 2 configurations have something" in proc.stdout
    for result in _smoke_files(path):  # what the checker itself refuses of the disclosure keys
        assert set(compliance(result).overwritable) & set(DISCLOSURE_KEYS) == set(lacking), result


def test_a_program_argv_cannot_find_is_named_and_nothing_else_is_blamed(tmp_path):
    path = _example(tmp_path)
    path.write_text(path.read_text().replace("mllog_trainer.py,", "mllog_trainr.py,"))
    proc = run_cli("run", str(path), "--smoke", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "MISSING argv       argv names mllog_trainr.py" in proc.stdout
    # no MLLOG line at all: its keys are not listed one by one as missing
    assert "MISSING disclosure" not in proc.stdout and "MISSING metric" not in proc.stdout, proc.stdout


def test_smoke_flags_that_cannot_work_are_one_line(tmp_path):
    path = _example(tmp_path)
    for args, says in ((("--detach",), "--smoke: not with --detach"),
                       (("--smoke-ruleset", "9.9.9"), "--smoke-ruleset '9.9.9': the installed compliance checker has")):
        proc = run_cli("run", str(path), "--smoke", *args, cwd=tmp_path)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and not (tmp_path / "rcpforge-runs").exists()
