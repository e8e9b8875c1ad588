"""A configuration error on the real one-node dev Slurm (`make slurm-up`): the first run's
unit-rule failure stops the campaign (exit 2, one line), the jobs still queued are
cancelled (none of the campaign's is left in squeue) and recorded `cancelled`, never as
an outcome."""

from __future__ import annotations

import subprocess
import time
from collections import Counter

from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_BACKEND_JOB, TAG_ERROR_KIND, TAG_STATUS
from tests.cluster.helpers import runs_of
from tests.conftest import run_cli
from tests.helpers.campaigns import write_campaign
from tests.orchestrator.test_failfast import failing_campaign


def test_configuration_error_cancels_the_queued_jobs(slurm, tmp_path):
    # one job of the array at a time: the others wait in the queue when the first fails.
    # Slurm starts the next task the moment the first ends, before the campaign has read
    # its error: that run (mode `first`) waits 30 s before its own, and is cancelled there.
    backend = {"kind": "slurm", "time_min": 5, "array_parallelism": 1, "max_attempts": 2}
    path = write_campaign(tmp_path, failing_campaign("first", backend=backend))
    proc = run_cli("run", str(path), timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "stopped on a configuration error" in proc.stderr
    _, runs = runs_of(load_campaign(path))
    kinds = Counter(r.data.tags.get(TAG_ERROR_KIND) for r in runs)
    assert kinds["configuration"] == 1 and kinds["cancelled"] >= 1, kinds
    assert all(r.data.tags[TAG_STATUS] == "failed" for r in runs)
    jobs = [r.data.tags[TAG_BACKEND_JOB].removeprefix("slurm:") for r in runs if TAG_BACKEND_JOB in r.data.tags]
    # The job that reported the error may still be listed for a moment while its Python
    # exits (its result was in before); the queued ones were cancelled and are gone.
    deadline = time.monotonic() + 30
    while True:
        listed = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(jobs)], capture_output=True,
                                text=True).stdout.split("\n")
        left = [line for line in listed if line.strip()]
        if not left or time.monotonic() > deadline:
            break
        assert all(line.split()[1] in ("RUNNING", "COMPLETING") for line in left), left  # none still queued
        time.sleep(0.5)
    assert not left, left
