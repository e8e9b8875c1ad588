"""Soak: a tiny-LM campaign under a stream of injected faults (seeded SIGKILLs of worker
processes and of the orchestrator, which is then restarted), compared with the same
campaign run undisturbed: every run key must have exactly one MLflow run, one outcome
and the same tokens-to-target, and no eval point may be written twice.

    python benchmarks/soak.py [--faults 100] [--seeds 30] [--seed 20261129]

Prints faults injected, runs lost and runs double-counted (both must be 0); exits 1 if
either is not.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from mlflow import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rcpforge.sweeps.spec import load_campaign  # noqa: E402
from rcpforge.trainers.contract.schema import TAG_RUN_KEY, TAG_STATUS  # noqa: E402
from tests.helpers.campaigns import tiny_campaign, write_campaign  # noqa: E402
from tests.reliability.test_worker_kills import _worker_pids  # noqa: E402


def _start(path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rcpforge.orchestrator.cli", "run", str(path)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _ledger(path: Path) -> tuple[MlflowClient, list]:
    campaign = load_campaign(path)
    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    exp = client.get_experiment_by_name(campaign.name)
    return client, client.search_runs([exp.experiment_id], max_results=10_000)


def _disturbed(path: Path, faults: int, rng: random.Random) -> tuple[int, int, int]:
    """Returns (worker kills, orchestrator kills, restarts)."""
    worker_kills = orchestrator_kills = restarts = 0
    proc = _start(path)
    while worker_kills + orchestrator_kills < faults:
        time.sleep(rng.uniform(0.5, 3.0))
        if proc.poll() is not None:
            break  # the campaign completed before every fault was injected
        if rng.random() < 0.7:
            workers = _worker_pids(proc.pid)
            if workers:
                os.kill(rng.choice(sorted(workers)), signal.SIGKILL)
                worker_kills += 1
        else:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            orchestrator_kills += 1
            proc = _start(path)
            restarts += 1
    proc.wait()
    final = _start(path)  # the campaign completes on resume
    final.wait()
    return worker_kills, orchestrator_kills, restarts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--faults", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=30, help="campaign seeds per batch size (bf16, 2 batch sizes)")
    parser.add_argument("--seed", type=int, default=20261129, help="seed of the fault schedule")
    args = parser.parse_args()
    data = tiny_campaign(recipes=["bf16"], seeds=args.seeds)
    data["backend"] = {"kind": "local", "workers": 2, "max_attempts": 50}
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        calm, stormy = write_campaign(Path(tmp, "calm"), data), write_campaign(Path(tmp, "stormy"), data)
        _start(calm).wait()
        t_calm = time.monotonic() - start
        kills = _disturbed(stormy, args.faults, random.Random(args.seed))
        client, runs = _ledger(stormy)
        _, calm_runs = _ledger(calm)
        expected = {r.data.tags[TAG_RUN_KEY]: r.data.metrics.get("tokens_to_target") for r in calm_runs}
        per_key = Counter(r.data.tags[TAG_RUN_KEY] for r in runs)
        outcome = {r.data.tags[TAG_RUN_KEY]: r for r in runs if r.data.tags.get(TAG_STATUS) in ("converged", "not_converged", "diverged")}
        lost = sorted(k for k in expected if k not in outcome)
        doubled = sorted(k for k, n in per_key.items() if n > 1)
        for run in runs:
            steps = [m.step for m in client.get_metric_history(run.info.run_id, "eval_excess_loss")]
            if len(steps) != len(set(steps)) or len(client.get_metric_history(run.info.run_id, "tokens_to_target")) > 1:
                doubled.append(run.data.tags[TAG_RUN_KEY])
        differ = sorted(k for k, r in outcome.items() if r.data.metrics.get("tokens_to_target") != expected.get(k))
    print(f"campaign: {len(expected)} runs (bf16, 2 batch sizes, {args.seeds} seeds); undisturbed run {t_calm:.0f} s")
    print(f"faults injected: {kills[0] + kills[1]} ({kills[0]} worker SIGKILLs, {kills[1]} orchestrator SIGKILLs "
          f"with {kills[2]} restarts); fault seed {args.seed}")
    print(f"runs lost: {len(lost)}")
    print(f"runs double-counted: {len(set(doubled))}")
    print(f"runs whose tokens-to-target differ from the undisturbed campaign: {len(differ)}")
    print(f"total wall time {time.monotonic() - start:.0f} s")
    return 0 if not (lost or doubled or differ) else 1


if __name__ == "__main__":
    raise SystemExit(main())
