"""An instant command trainer that writes down how it was started (stdlib only):

    python recording_program.py OUTPUT_DIR [ANY...]

Writes OUTPUT_DIR/started.json (its argv, working folder and environment), then, as task
0 of its gang, converges at its first eval; any other task just exits."""

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
    out = Path(sys.argv[1])
    started = {"argv": [sys.executable, *sys.argv],
               "cwd": os.getcwd(), "env": dict(os.environ)}
    (out / "started.json").write_text(json.dumps(started))
    if os.environ.get("RCPFORGE_GANG_TASK", "0") != "0":
        return
    converge()


def converge() -> None:
    """The MLLOG of a run that converges at its first eval (other instant programs' too)."""
    log("submission_benchmark", os.environ["RCPFORGE_BENCHMARK"])
    log("run_start")
    log("eval_accuracy", 1.0, epoch_num=1)
    log("run_stop", status="success")


if __name__ == "__main__":
    main()
