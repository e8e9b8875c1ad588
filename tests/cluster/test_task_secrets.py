"""A job's `secret_env` on its way to its tasks: set for the call alone (a reused worker
keeps none), and on Slurm, which stores a job until it runs, only in a user-only file
(cluster/task_secrets.py), never in submitit's pickles or scripts, removed as the job
ends or is cancelled. No Slurm needed: the stand-in `sbatch` of tests/cluster/conftest.py.
The campaign end to end on every backend: tests/orchestrator/test_secrets.py."""

from __future__ import annotations

import os
import stat

import submitit

import rcpforge.cluster.slurm_backend as slurm_backend
from rcpforge.cluster.backend import Job
from rcpforge.cluster.gang import run_task
from rcpforge.cluster.task_secrets import unseal
from rcpforge.orchestrator.backends import make_backend
from rcpforge.sweeps.spec import parse_campaign
from tests.helpers.backend_jobs import echo
from tests.helpers.campaigns import tiny_campaign

SECRET = "s3cr3t-9f2c41"


def test_the_secret_env_is_set_for_the_call_only(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "the shell's own")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    seen = run_task(lambda: (os.environ["HF_TOKEN"], os.environ["WANDB_API_KEY"]), (), {},
                    {"HF_TOKEN": SECRET, "WANDB_API_KEY": "w"})
    assert seen == (SECRET, "w")
    assert os.environ["HF_TOKEN"] == "the shell's own" and "WANDB_API_KEY" not in os.environ


def test_a_slurm_jobs_secret_is_in_its_user_only_file_alone(tmp_path, monkeypatch, sbatch):
    monkeypatch.setattr(slurm_backend, "preflight", lambda partition: None)
    campaign = parse_campaign(tiny_campaign(backend={"kind": "slurm"}), tmp_path)
    backend = make_backend(campaign)
    backend.submit(Job("key1", echo, (1,), secret_env={"HF_TOKEN": SECRET}))
    backend.submit(Job("key2", echo, (2,)))
    backend.job_ids()  # sends what was submitted
    sealed = backend.folder / "secrets" / "key1.json"
    assert stat.S_IMODE(sealed.stat().st_mode) == 0o600
    assert stat.S_IMODE(sealed.parent.stat().st_mode) == 0o700
    holding = [p for p in [*backend.folder.rglob("*"), *sbatch.iterdir()]
               if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert holding == [sealed]
    assert sorted(p.name for p in sealed.parent.iterdir()) == ["key1.json"]  # a job without secrets has no file

    pickles = sorted(backend.folder.rglob("*_submitted.pkl"))
    assert len(pickles) == 2
    calls = [submitit.core.utils.pickle_load(p) for p in pickles]
    given = sorted((call.args[1], unseal(call.args[1])) for call in calls if call.args[1] is not None)
    assert given == [(str(sealed), {"HF_TOKEN": SECRET})]  # what each task reads back

    monkeypatch.setattr(slurm_backend.subprocess, "run", lambda *a, **k: None)  # no scancel of the real cluster's jobs
    backend.cancel()
    assert not sealed.exists()
