"""A Slurm job's `secret_env` (credentials: cluster/backend.py's Job) kept until its tasks
start: the one place a backend stores it, since Slurm runs a job long after its
submission, perhaps again after a requeue. Never in submitit's pickles or logs: in
`<the backend's folder>/secrets/<task id>.json`, a file only the user may read (0600)
in a folder only the user may open (0700), removed once the backend sees the job end
(or cancels it). A job left running by `rcpforge run --detach` keeps its file."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

FOLDER = "secrets"


def seal(folder: Path, task_id: str, secret_env: Mapping[str, str]) -> str | None:
    """The job's variables into its user-only file; the path its tasks read (None: none)."""
    if not secret_env:
        return None
    box = Path(folder) / FOLDER
    box.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(box, 0o700)  # made before with a wider mode: narrowed
    path = box / f"{task_id}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file left by an earlier attempt keeps its mode otherwise
    with os.fdopen(fd, "w") as fh:
        json.dump(dict(secret_env), fh)
    return str(path)


def unseal(path: str | None) -> dict[str, str]:
    """In a task: the variables its job was given."""
    return {} if path is None else dict(json.loads(Path(path).read_text()))


def drop_sealed(folder: Path, task_ids: Iterable[str]) -> None:
    """The files of jobs that have ended or were cancelled."""
    for task_id in task_ids:
        (Path(folder) / FOLDER / f"{task_id}.json").unlink(missing_ok=True)
