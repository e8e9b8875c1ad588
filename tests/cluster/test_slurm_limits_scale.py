"""Issue 47's done-when at its own scale, opt-in (RCPFORGE_SLOW_SLURM=1, `make test-slow`):
300 instant runs on the limits cluster with MaxArraySize=11 and a QOS allowing 15 submitted
jobs per user, the QOS lifted mid-campaign. Every part of it runs in CI in a smaller form
(tests/cluster/test_slurm_limits.py: 8 runs, MaxArraySize=6, a QOS of 8)."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from rcpforge.orchestrator.tracking import Tracking
from rcpforge.trainers.contract.schema import TAG_ATTEMPTS, TAG_BACKEND_JOB, TAG_STATUS
from tests.cluster.helpers import assert_clean_ledger, runs_of, start_cli, wait_for
from tests.cluster.test_slurm_limits import METRIC, array_sizes, limited_campaign
from tests.helpers.queue_peak import QueuePeak
from tests.helpers.slurm_cluster import limits_max_array, set_qos

RUNS, MAX_ARRAY, MAX_SUBMIT, LIFTED = 300, 11, 15, 40


@pytest.mark.skipif(os.environ.get("RCPFORGE_SLOW_SLURM") != "1",
                    reason="300 Slurm jobs, 4-8 minutes; its parts run on 8 runs in test_slurm_limits.py; "
                           "set RCPFORGE_SLOW_SLURM=1 to run it")
def test_300_runs_within_an_array_limit_of_11_and_15_queued_jobs_each_run_once(limits_slurm, tmp_path,
                                                                                monkeypatch):
    monkeypatch.setenv("RCPF_SLURM_LIMITS_REFRESH_S", "5")  # the lifted limit is seen within 5 s
    with limits_max_array(MAX_ARRAY):
        set_qos(MaxSubmitJobsPerUser=MAX_SUBMIT)
        path, campaign = limited_campaign(tmp_path, seeds=RUNS // 2)  # 2 batch sizes
        runs_of(campaign)  # the store exists before two processes open it
        with QueuePeak() as queue:
            proc = start_cli("run", str(path))

            def converged() -> int:
                _, runs = runs_of(campaign)
                return sum(r.data.tags.get(TAG_STATUS) == "converged" for r in runs)

            wait_for(lambda: converged() >= RUNS // 2, f"{RUNS // 2} runs converged", proc, limit_s=1800, every_s=2)
            held = queue.peak
            set_qos(MaxSubmitJobsPerUser=LIFTED)
            out, _ = proc.communicate(timeout=1800)
    assert proc.returncode == 0, out
    assert "Slurm did not take" not in out  # kept within the limits, never refused
    assert 0 < held <= MAX_SUBMIT, held  # polled every 0.2 s while the limit held
    assert queue.peak > MAX_SUBMIT, queue.peak  # the lifted limit's room was used
    assert_clean_ledger(campaign, n_keys=RUNS, metric=METRIC)  # MLflow: one run a key, each with its outcome
    _, runs = runs_of(campaign)
    assert Counter(r.data.tags[TAG_STATUS] for r in runs) == {"converged": RUNS}
    assert all(r.data.tags[TAG_ATTEMPTS] == "1" for r in runs)  # none refused, none run twice
    sizes = array_sizes(runs)
    assert max(sizes.values()) <= MAX_ARRAY - 1 and sum(sizes.values()) == RUNS, sizes
    ledger = Tracking(campaign.tracking_uri).campaign_ledger(campaign.name)  # the ledger agrees with MLflow
    assert len(ledger) == RUNS and all(e.status.value == "converged" and e.charged == 1 for e in ledger.values())
    assert len({r.data.tags[TAG_BACKEND_JOB] for r in runs}) == RUNS  # a Slurm job (array task) a run
