"""How fast the `command` trainer follows a program's output, against just draining the
pipe; and how fast `rcpforge.trainers.contract.mllog.read` reads a result file (the live per-line API and the
file API of `check`), against the RCP checker's own
`read_submission_file`. Prints lines per second and the ratios.

    PYTHONPATH=. python benchmarks/mllog_follow.py [--lines 200000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mlperf_logging.rcp_checker import rcp_checker

from rcpforge.trainers.command.trainer import CommandTrainer
from rcpforge.trainers.contract import Budget, EvalPoint, Reporter, RunSpec, Target
from rcpforge.trainers.contract.mllog.read import follow_file, read_result_file
from rcpforge.trainers.registry import validate_trainer_settings

PROGRAM = '''
import json, sys
n = int(sys.argv[1])
w = sys.stdout.write
w(':::MLLOG {"key": "submission_benchmark", "value": "bench", "metadata": {}}\\n')
w(':::MLLOG {"key": "global_batch_size", "value": 64, "metadata": {}}\\n')
for i in range(1, n):
    if i % 2:
        w("[rank0]: step %d loss 1.234 some ordinary training output\\n" % i)
    else:
        w('[rank0]: :::MLLOG {"namespace": "", "time_ms": 0, "event_type": "POINT_IN_TIME", "key": "eval_accuracy", '
          '"value": 0.5, "metadata": {"epoch_num": %d, "samples_count": %d}}\\n' % (i, i))
w(':::MLLOG {"key": "run_stop", "value": null, "metadata": {"status": "success"}}\\n')
'''


@dataclass
class NullReporter(Reporter):
    output_dir: Path
    campaign_dir: Path
    points: int = 0
    seen: list = field(default_factory=list)

    def eval_point(self, point: EvalPoint) -> None:
        self.points += 1


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lines", type=int, default=200_000)
    n = p.parse_args().lines
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "prog.py").write_text(PROGRAM)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "prog.py", str(n)], cwd=tmp, stdout=subprocess.PIPE, check=True)
        drain = time.perf_counter() - t0

        trainer = validate_trainer_settings({"kind": "command", "argv": ["{python}", "prog.py", str(n)]})
        spec = RunSpec(campaign="b", recipe="bf16", batch_size=64, seed=0, hparams={},
                       target=Target(metric="eval_accuracy", mode="max", value=0.9),
                       budget=Budget(max_tokens=10**12, eval_every_tokens=1), trainer=trainer)
        reporter = NullReporter(tmp / "run", tmp)
        t0 = time.perf_counter()
        result = CommandTrainer().train(spec, reporter)
        follow = time.perf_counter() - t0
        assert result.samples_to_target == (n - 1) // 2 * 2, result

        path = tmp / "run" / "result.txt"
        t0 = time.perf_counter()
        mine = follow_file(path)
        read_mine = time.perf_counter() - t0
        t0 = time.perf_counter()
        theirs = rcp_checker.read_submission_file(str(path), "6.0.0", False)
        read_checker = time.perf_counter() - t0
        assert theirs[1] == mine.value_to_converge
        t0 = time.perf_counter()
        checked = read_result_file(str(path), "6.0.0")
        read_check = time.perf_counter() - t0
        assert (checked.not_converged, checked.epochs, checked.bs, checked.benchmark) == theirs

    print(f"program output: {n} lines ({n // 2} MLLOG eval lines), {reporter.points} eval points reported")
    print(f"drain the pipe only (baseline): {drain:.2f} s, {n / drain:,.0f} lines/s")
    print(f"command trainer following:      {follow:.2f} s, {n / follow:,.0f} lines/s, ratio {follow / drain:.2f}x the baseline")
    print(f"rcp_checker.read_submission_file (baseline): {read_checker:.3f} s")
    print(f"rcpforge.trainers.contract.mllog.read.follow_file (live API):   {read_mine:.3f} s, ratio {read_mine / read_checker:.2f}x the checker")
    print(f"rcpforge.trainers.contract.mllog.read.read_result_file (check): {read_check:.3f} s, ratio {read_check / read_checker:.2f}x the checker")


if __name__ == "__main__":
    main()
