"""What every backend test checks in the tracking store after a campaign."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from mlflow import MlflowClient

from rcpforge.trainers.contract.schema import TAG_RUN_KEY, TAG_STATUS
from tests.conftest import ROOT


def runs_of(campaign):
    client = MlflowClient(tracking_uri=campaign.tracking_uri)
    exp = client.get_experiment_by_name(campaign.name)
    if exp is None:
        return client, []
    return client, client.search_runs([exp.experiment_id], max_results=10_000)


def assert_clean_ledger(campaign, n_keys: int, metric: str = "eval_excess_loss") -> dict[str, float]:
    """One MLflow run per key, every key with an outcome, no eval point (of `metric`, the
    target's, and of samples) written twice; returns tokens-to-target per run key."""
    client, runs = runs_of(campaign)
    keys = Counter(r.data.tags[TAG_RUN_KEY] for r in runs)
    assert len(keys) == n_keys and set(keys.values()) == {1}, f"runs per key: {keys}"
    tokens = {}
    for run in runs:
        assert run.data.tags[TAG_STATUS] == "converged", (run.info.run_name, run.data.tags)
        for name in (metric, "samples"):
            steps = [m.step for m in client.get_metric_history(run.info.run_id, name)]
            assert steps == sorted(set(steps)), f"{name} points duplicated in {run.info.run_name}: {steps}"
        assert len(client.get_metric_history(run.info.run_id, "tokens_to_target")) == 1
        tokens[run.data.tags[TAG_RUN_KEY]] = run.data.metrics["tokens_to_target"]
    return tokens


# The CLI with Python's Ctrl-C handler whatever the test runner inherited: a shell starts
# background jobs with SIGINT ignored, the child would inherit that and a test's SIGINT
# would do nothing (seen when .ci/run itself ran in the background).
_INTERRUPTIBLE = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('rcpforge.orchestrator.cli', run_name='__main__', alter_sys=True)"
)


def start_cli(*args: str, interruptible: bool = False) -> subprocess.Popen:
    """`rcpforge` in a child process; `interruptible`: SIGINT raises KeyboardInterrupt in
    it even if this process ignores SIGINT."""
    launch = ["-c", _INTERRUPTIBLE] if interruptible else ["-m", "rcpforge.orchestrator.cli"]
    return subprocess.Popen(
        [sys.executable, *launch, *args],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def wait_for(condition, what: str, proc: subprocess.Popen | None = None, limit_s: float = 180, every_s: float = 0.3):
    """Poll until `condition()` returns something truthy (a safety limit, not a timing
    assertion: it only turns a hang into a failure), failing at once if `proc` ended."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the campaign ended before {what}:\n{proc.stdout.read()}")
        time.sleep(every_s)
    if proc is not None:
        proc.kill()
        raise AssertionError(f"never happened: {what}:\n{proc.communicate()[0]}")
    raise AssertionError(f"never happened: {what}")


def mid_run(campaign, min_points: int, metric: str = "eval_excess_loss"):
    """A run that is running and has logged at least `min_points` eval points."""
    client, runs = runs_of(campaign)
    for run in runs:
        if run.data.tags.get(TAG_STATUS) == "running":
            if len(client.get_metric_history(run.info.run_id, metric)) >= min_points:
                return run
    return None


def run_folder(campaign, run) -> Path:
    from rcpforge.sweeps.expand import expand

    spec = next(s for s in expand(campaign) if s.run_key == run.data.tags[TAG_RUN_KEY])
    return campaign.run_dir(spec)


PACED_PROGRAM = ROOT / "tests" / "helpers" / "paced_program.py"


def paced_campaign(backend: dict, *, evals: int = 12, sleep: float = 0.25, seeds: int = 1,
                   hold: Path | None = None) -> dict:
    """The tiny campaign on an instant command trainer (tests/helpers/paced_program.py):
    `evals` evals `sleep` s apart per run, no training; with `hold`, each run's last eval
    waits until that file exists."""
    from tests.helpers.campaigns import tiny_campaign

    data = tiny_campaign(recipes=["bf16"], seeds=seeds, backend=backend)
    data["trainer"] = {"kind": "command", "metric_key": "eval_accuracy", "unit": "samples",
                       "argv": ["{python}", str(PACED_PROGRAM), str(evals), str(sleep), "{batch_size}", "{seed}",
                                "{benchmark}", *([str(hold)] if hold else [])]}
    data["target"] = {"metric": "eval_accuracy", "mode": "max", "value": 1.0}
    data["budget"] = {"max_tokens": 1_000_000, "eval_every_tokens": 16}
    data["hparams"] = {bs: {} for bs in data["batch_sizes"]}
    return data


def slow_campaign(backend: dict, *, sleep: float, seeds: int = 1, checkpoint_every: int | None = 2) -> dict:
    """The tiny campaign on the slowed-down trainer (tests.helpers.slow)."""
    from tests.helpers.campaigns import tiny_campaign

    data = tiny_campaign(recipes=["bf16"], seeds=seeds, backend=backend)
    data["trainer"] = dict(data["trainer"], kind="tests.helpers.slow:SlowTrainer", sleep_per_eval=sleep,
                           checkpoint_every_evals=checkpoint_every)
    return data


class _Quiet:
    def __init__(self, folder: Path):
        self.output_dir = folder

    def eval_point(self, point) -> None:
        pass


def uninterrupted_tokens(campaign, run, folder: Path) -> int:
    """Tokens-to-target of the same run trained in one go, in this process (the oracle
    for a run that was killed, preempted or requeued)."""
    from rcpforge.sweeps.expand import expand
    from rcpforge.trainers.tinylm.train import TinyLMTrainer

    spec = next(s for s in expand(campaign) if s.run_key == run.data.tags[TAG_RUN_KEY])
    settings = {k: v for k, v in spec.trainer.items() if k not in ("sleep_per_eval", "checkpoint_every_evals")}
    plain = spec.model_copy(update={"trainer": {**settings, "kind": "tinylm"}})
    folder.mkdir(parents=True, exist_ok=True)
    return TinyLMTrainer().train(plain, _Quiet(folder)).tokens_to_target


def starts(campaign, run) -> list[int]:
    """Token counts at which the run's trainer started (more than one: it resumed)."""
    text = (run_folder(campaign, run) / "starts.log").read_text()
    return [int(word.split("=")[1]) for word in text.split() if word.startswith("tokens=")]


DDP_PROGRAM = Path(__file__).resolve().parents[1] / "helpers" / "ddp_program.py"


def ddp_command_campaign(backend: dict, launch: dict, *, per_node: bool = False, evals: int = 3,
                         die_once: Path | None = None) -> dict:
    """A campaign of 2-rank command runs (tests/helpers/ddp_program.py): each converges
    only if every rank joined the process group from the rendezvous variables."""
    data = paced_campaign(backend, evals=evals)
    argv = ["{python}", str(DDP_PROGRAM), str(evals), "{batch_size}"] + (["--spawn"] if per_node else [])
    argv += ["--die-once", str(die_once)] if die_once else []
    data["trainer"] = {"kind": "command", "metric_key": "eval_accuracy", "unit": "samples", "argv": argv,
                       "max_wall_s": 120, **({"start": "per_node"} if per_node else {})}
    data["launch"] = launch
    return data
