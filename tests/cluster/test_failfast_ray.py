"""A configuration error and a transient crash on a real local Ray (the session's 2-CPU
instance): the first run's unit-rule failure stops the campaign (exit 2, one line), the
tasks queued on Ray behind the two that run are cancelled, recorded `cancelled` and
never started, and nothing else is launched; a crash mid-run keeps its retries there.
Instant command programs (tests/helpers/failing_program.py), a real SQLite store."""

from __future__ import annotations

import re
from collections import Counter

from rcpforge.sweeps.spec import load_campaign
from rcpforge.trainers.contract.schema import TAG_ATTEMPTS, TAG_ERROR_KIND, TAG_STATUS
from tests.cluster.helpers import runs_of
from tests.conftest import run_cli
from tests.helpers.campaigns import write_campaign
from tests.orchestrator.test_failfast import failing_campaign


def _ray(address: str) -> dict:
    # one CPU a run: two run at once, and the launcher queues as many again on Ray
    return {"kind": "ray", "address": address, "num_cpus": 1, "max_retries": 0, "max_attempts": 2}


def test_configuration_error_on_ray_cancels_the_queued_tasks(ray_address, tmp_path):
    # seed 0 breaks the unit rule at once; the other seeds hold their slot 30 s first, so
    # the tasks queued behind them cannot start before the stop
    path = write_campaign(tmp_path, failing_campaign("late", backend=_ray(ray_address)))
    proc = run_cli("run", str(path), timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip() and not re.match(r"\d{4}/\d\d/\d\d ", x)]
    assert len(lines) == 1 and "stopped on a configuration error" in lines[0], proc.stderr
    _, runs = runs_of(load_campaign(path))
    tags = [r.data.tags for r in runs]
    kinds = Counter(t.get(TAG_ERROR_KIND) for t in tags)
    assert kinds["configuration"] >= 1 and kinds["cancelled"] >= 1, kinds
    # no retry, and the runs queued on Ray were cancelled before their worker started them
    assert max(int(t.get(TAG_ATTEMPTS, "0")) for t in tags) == 1
    assert any(t.get(TAG_ERROR_KIND) == "cancelled" and t.get(TAG_ATTEMPTS, "0") == "0" for t in tags), tags
    # nothing past those: at most 4 launched (2 slots, 2 queued), the rest never made or pending
    assert sum(1 for t in tags if TAG_ERROR_KIND in t) <= 4
    assert all(t[TAG_STATUS] in ("failed", "pending") for t in tags)
    assert not any(t[TAG_STATUS] == "pending" and TAG_ERROR_KIND in t for t in tags)


def test_a_crash_mid_run_on_ray_keeps_its_retries(ray_address, tmp_path):
    # every run crashes once after MLLOG lines; seed 0's on every attempt
    path = write_campaign(tmp_path, failing_campaign("crash", benchmark="byo_epochs", backend=_ray(ray_address)))
    proc = run_cli("run", str(path), timeout=300)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # finished, 2 runs without an outcome
    _, runs = runs_of(load_campaign(path))
    assert {r.data.tags[TAG_ATTEMPTS] for r in runs} == {"2"}
    assert Counter((r.data.tags[TAG_STATUS], r.data.tags.get(TAG_ERROR_KIND)) for r in runs) == {
        ("converged", None): 4, ("failed", "transient"): 2}
