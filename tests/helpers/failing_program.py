"""An instant command trainer that fails as a test asks (stdlib only):

    python failing_program.py MODE BATCH_SIZE SEED BENCHMARK OUTPUT_DIR

MODE `epochs`: three evals with epoch_num only (the samples so far), then run_stop
success: a run of a benchmark the checker counts in samples_count breaks the unit rule.
`late`: seed 0 as `epochs`; any other seed first waits 30 s (a run still going, holding
its slot, when seed 0's error stops the campaign).
`first`: as `epochs`; the campaign's first run to start (it makes the marker `first`
beside OUTPUT_DIR) goes on at once, every later one first waits 30 s (a run a scheduler
started the moment the first ended is still going when that one's error stops the campaign).
`early`: one line on stderr naming its pid and folder, exit 3 before any MLLOG line.
`crash`: MLLOG lines, then exit 1 mid-run on its first attempt (no marker in OUTPUT_DIR)
and, for seed 0, on every attempt; the next attempt of any other seed converges.
`stall`: MLLOG lines and an eval with epoch_num only (for llama31_8b the unit rule stops
it there: it waits), then, the first time in the campaign (no marker `stalled` beside
OUTPUT_DIR, among the campaign's run folders), writes the marker and waits until its
parent is gone (a test kills the orchestrator); every later attempt of any run exits 1
mid-run (a transient crash)."""

import json
import os
import sys
import time
from pathlib import Path


def log(key, value=None, **metadata):
    event = {"namespace": "", "time_ms": int(time.time() * 1000), "event_type": "POINT_IN_TIME", "key": key,
             "value": value, "metadata": metadata}
    print(":::MLLOG " + json.dumps(event), flush=True)


def main() -> None:
    mode, bs, seed, benchmark, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], Path(sys.argv[5])
    if mode == "early":
        print(f"error: cannot read the dataset index (pid {os.getpid()}, in {out})", file=sys.stderr, flush=True)
        sys.exit(3)
    if mode == "late" and seed != 0:
        time.sleep(30)
    if mode == "first":
        try:
            os.close(os.open(out.parent / "first", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            time.sleep(30)
    log("submission_benchmark", benchmark)
    log("global_batch_size", bs)
    log("seed", seed)
    log("run_start")
    if mode == "stall":
        log("eval_accuracy", 0.1, epoch_num=bs)
        marker = out.parent / "stalled"
        if benchmark == "llama31_8b" or not marker.exists():
            parent = os.getppid()
            if benchmark != "llama31_8b":
                marker.write_text("waiting")
            while os.getppid() == parent:
                time.sleep(0.1)
            sys.exit(1)
        print("worker lost: CUDA error (a transient crash)", file=sys.stderr, flush=True)
        sys.exit(1)
    for i in range(1, 4):
        log("eval_accuracy", i / 3, epoch_num=i * bs)
        if mode == "crash" and i == 2 and (seed == 0 or not (out / "crashed").exists()):
            (out / "crashed").write_text("once")
            print("worker lost: CUDA error (a transient crash)", file=sys.stderr, flush=True)
            sys.exit(1)
    log("run_stop", status="success")


if __name__ == "__main__":
    main()
