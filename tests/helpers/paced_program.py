"""An instant command trainer for orchestration and fault tests: `EVALS` evals of
eval_accuracy i/EVALS, `SLEEP` seconds apart, the last reaching the target 1.0; then
run_stop success. Deterministic, torch-free, seconds per run. With HOLD, the last eval
waits until the file HOLD exists (a run a test preempts, then lets finish).

    python paced_program.py EVALS SLEEP BATCH_SIZE SEED BENCHMARK [HOLD]
"""

import json
import sys
import time
from pathlib import Path


def log(key, value=None, **metadata):
    event = {"namespace": "", "time_ms": int(time.time() * 1000), "event_type": "POINT_IN_TIME", "key": key,
             "value": value, "metadata": metadata}
    print(":::MLLOG " + json.dumps(event), flush=True)


def main() -> None:
    evals, sleep, bs, seed = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    benchmark = sys.argv[5]
    log("submission_benchmark", benchmark)
    log("global_batch_size", bs)
    log("seed", seed)
    log("run_start")
    hold = Path(sys.argv[6]) if len(sys.argv) > 6 else None
    for i in range(1, evals + 1):
        time.sleep(sleep)
        while hold is not None and i == evals and not hold.exists():
            time.sleep(0.2)
        log("eval_accuracy", i / evals, epoch_num=i * bs, samples_count=i * bs)
    log("run_stop", status="success")


if __name__ == "__main__":
    main()
