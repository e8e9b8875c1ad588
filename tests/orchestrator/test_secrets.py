"""Secrets stay secret (issue 53): a campaign whose program needs a credential given by
reference (`HF_TOKEN: {from_env: ...}`) and one written in the open (`WANDB_API_KEY: ...`)
runs on every backend, and every command a user then runs, while the program is shown
to have had both values (it writes their hashes), leaves neither in any byte rcpforge
wrote (the store's rows, the campaign's folders and outputs, submitit's and Ray's files)
nor in any line it printed. The rule itself: tests/trainers/test_redact.py; the campaign's
side: tests/sweeps/test_secrets.py; the Slurm file: tests/cluster/test_task_secrets.py."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import load_campaign
from tests.conftest import ROOT, run_cli
from tests.helpers.backend_services import with_service
from tests.helpers.campaigns import write_campaign
from tests.helpers.secret_program import digest

BACKENDS = {
    "local": {"kind": "local", "workers": 2},
    "ray": {"kind": "ray", "num_cpus": 1},
    "slurm": {"kind": "slurm", "time_min": 10, "array_parallelism": 4},
}
VARIABLE = "RCPF_TEST_HF_TOKEN"  # the launching shell's name for the by-reference secret


def secret_campaign(backend: dict, literal: str, seeds: int = 3) -> dict:
    """Two recipes x two batch sizes x 3 seeds of the instant program: enough runs for
    `analyze`, `report` and the exports to have something to write."""
    return {
        "name": "secrets",
        "trainer": {"kind": "command", "argv": ["{python}", str(ROOT / "tests/helpers/secret_program.py"),
                                                "{output_dir}"],
                    "env": {"HF_TOKEN": {"from_env": VARIABLE}, "WANDB_API_KEY": literal, "OMP_NUM_THREADS": "1"}},
        "target": {"metric": "eval_accuracy", "mode": "max", "value": 0.9},
        "budget": {"max_tokens": 100, "eval_every_tokens": 10},
        "recipes": ["ref", "cand"], "batch_sizes": [1, 2], "seeds": seeds, "hparams": {1: {}, 2: {}},
        "backend": backend, "rcp": {"benchmark": "secrets", "submission_runs": 3},
    }


def ray_files() -> list[Path]:
    """The session folder of this test process's Ray instance (its logs, its spilled objects)."""
    import ray

    node = ray._private.worker._global_node  # noqa: SLF001 - Ray has no public name for its session folder
    return [Path(node.get_session_dir_path())] if node is not None else []


def files_holding(folders: list[Path], secrets: list[str], skip: set[Path]) -> list[str]:
    """Every file under `folders` (but `skip`) whose bytes hold one of `secrets`."""
    needles = [s.encode() for s in secrets]
    hits = []
    for folder in folders:
        for path in folder.rglob("*"):
            if path in skip or not path.is_file() or path.is_symlink():
                continue
            try:
                data = path.read_bytes()
            except OSError:  # a socket, a file gone meanwhile
                continue
            hits += [f"{path}: {needle.decode()[:6]}..." for needle in needles if needle in data]
    return hits


@pytest.mark.parametrize("kind", list(BACKENDS))
def test_no_secret_is_written_or_printed_anywhere(kind, request, tmp_path, monkeypatch):
    backend = with_service(request, BACKENDS[kind])  # Ray starts before the variable is set: carried, not inherited
    reference, literal = f"hf_ref_{uuid.uuid4().hex}", f"wandb_lit_{uuid.uuid4().hex}"
    monkeypatch.setenv(VARIABLE, reference)
    # On Slurm, a seed a cell: what the commands read and write after the runs does not
    # depend on the backend (the local and Ray cases give them 3 seeds, RCP records and all),
    # while each Slurm job costs some 3 s of CPU.
    seeds = 1 if kind == "slurm" else 3
    path = write_campaign(tmp_path, secret_campaign(backend, literal, seeds))
    out = tmp_path / "out"
    printed = []

    def cli(*args: str) -> None:
        proc = run_cli(*args, cwd=tmp_path)
        printed.append(proc.stdout + proc.stderr)
        assert proc.returncode == 0, (args, proc.stdout + proc.stderr)

    cli("run", str(path))
    campaign = load_campaign(path)
    seen = [json.loads((campaign.run_dir(spec) / "seen.json").read_text()) for spec in expand(campaign)]
    assert len(seen) == 4 * seeds
    assert all(s == {"HF_TOKEN": digest(reference), "WANDB_API_KEY": digest(literal)} for s in seen), seen[0]

    cli("status", str(path))
    cli("status", str(path), "--json")
    cli("run", str(path), "--dry-run")
    cli("run", str(path), "--dry-run", "--json")
    cli("analyze", str(path), "--out", str(out / "analysis"), "--reference", "ref")
    cli("report", str(path), "--out", str(out / "report.html"), "--reference", "ref")
    cli("export", str(path), "--results", str(out / "results"))
    cli("export", str(path), "--parquet", str(out / "runs.parquet"))
    cli("export", str(path), "--package", str(out / "package"), "--submitter", "me", "--system", "box")
    assert (out / "report.html").is_file() and (out / "runs.parquet").is_file()

    for line in "\n".join(printed).splitlines():
        assert reference not in line and literal not in line, line
    assert "HF_TOKEN='<from the environment: RCPF_TEST_HF_TOKEN>'" in printed[3]  # the dry run says where
    assert "WANDB_API_KEY='***'" in printed[3]
    # The campaign file is the user's own and holds the literal they wrote; nothing else may.
    folders = [tmp_path, *(ray_files() if kind == "ray" else [])]
    assert len(folders) == (2 if kind == "ray" else 1) and all(f.is_dir() for f in folders)
    assert files_holding(folders, [reference, literal], skip={path}) == []
    assert literal.encode() in path.read_bytes()  # the search would have found it


def test_a_rotated_token_keeps_every_run(tmp_path, monkeypatch):
    """A new value of the by-reference secret (or of the literal) is the same campaign: the
    runs it already has are not launched again, and the new value reaches new runs."""
    monkeypatch.setenv(VARIABLE, "hf_old")
    data = secret_campaign(BACKENDS["local"], "wandb_old")
    path = write_campaign(tmp_path, data)
    first = run_cli("run", str(path), cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    keys = [s.run_key for s in expand(load_campaign(path))]

    monkeypatch.setenv(VARIABLE, "hf_new")
    path = write_campaign(tmp_path, {**data, "trainer": {**data["trainer"], "env": {
        **data["trainer"]["env"], "WANDB_API_KEY": "wandb_new"}}})
    assert [s.run_key for s in expand(load_campaign(path))] == keys
    again = run_cli("run", str(path), cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to launch" in again.stdout


def test_a_missing_variable_is_one_line_and_nothing_launches(tmp_path, monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    path = write_campaign(tmp_path, secret_campaign(BACKENDS["local"], "wandb_x"))
    proc = run_cli("run", str(path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"from_env {VARIABLE} is not set" in errors[0], proc.stderr
    assert "trainer.env.HF_TOKEN" in errors[0]
    assert not (tmp_path / "rcpforge-runs").exists()  # nothing launched


def test_a_literal_credential_warns_once(tmp_path, monkeypatch):
    monkeypatch.setenv(VARIABLE, "hf_x")
    path = write_campaign(tmp_path, secret_campaign(BACKENDS["local"], "wandb_y"))
    proc = run_cli("run", str(path), "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "WANDB_API_KEY" in line]
    assert len(warned) == 1 and "{from_env: WANDB_API_KEY}" in warned[0], proc.stderr
    assert "wandb_y" not in proc.stdout + proc.stderr
