"""An instant training program for adaptive campaigns (stdlib only): a run needs
`evals x slowdown x exp(spread z)` evals to reach the target, z drawn from its seed, batch
size and recipe label, and logs MLLOG as a real run does. `slowdown` is the recipe's
option (`{recipe_slowdown}`), so a campaign's true factors are known. On a model axis
an optional POWER (a model's setting, `{model_power}`) makes the model's factor
SLOWDOWN ** POWER, so each model's factors differ and are known too.

    python factor_program.py BATCH_SIZE SEED SLOWDOWN MAX_TOKENS TOKENS_PER_SAMPLE BENCHMARK [POWER]
"""

import json
import math
import random
import sys
import time

bs, seed, slowdown = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
max_tokens, per_sample, benchmark = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
power = float(sys.argv[7]) if len(sys.argv) > 7 else 1.0
EVALS, SPREAD = 40, 0.05


def log(key, value=None, **metadata):
    event = {"namespace": "", "time_ms": int(time.time() * 1000), "event_type": "POINT_IN_TIME", "key": key,
             "value": value, "metadata": metadata}
    print(":::MLLOG " + json.dumps(event), flush=True)


rng = random.Random(f"{seed}-{bs}-{slowdown}")  # a str seed is hashed the same on every run
needed = math.ceil(EVALS * slowdown**power * math.exp(SPREAD * rng.gauss(0, 1)))
log("submission_benchmark", benchmark)
log("global_batch_size", bs)
log("seed", seed)
log("run_start")
status, evals = "aborted", 0
# one eval every 4 batches, until the target or the budget
while (evals + 1) * 4 * bs * per_sample <= max_tokens:
    evals += 1
    samples = evals * 4 * bs
    if evals < needed and evals % 10:
        continue  # the curve's points between, thinned: only the crossing matters here
    log("eval_accuracy", 0.95 if evals >= needed else 0.5, epoch_num=samples, samples_count=samples)
    if evals >= needed:
        status = "success"
        break
log("run_stop", status=status)
