"""The target, budget and learning rates of sweeps/examples/scale_text.yaml, from the BF16
curves of benchmarks/campaigns/text_lr_grid.yaml (issue 50), by this rule, written here
before the grid's curves were read (docs/scale-text-workload.md):

- the target is the lowest eval loss, on a 0.05 nat grid, that every width reaches at
  both batch sizes within a quarter of the budget, each at its best learning rate (so a
  recipe needing up to 4x BF16's tokens still converges within the budget);
- each width's learning rate at each batch size is the one with the fewest tokens to that
  target; on a tie, the larger (it must be inside the grid: widen the grid where it is not).

    rcpforge run benchmarks/campaigns/text_lr_grid.yaml          # in a folder of its own
    PYTHONPATH=. python benchmarks/text_lr_grid.py benchmarks/campaigns/text_lr_grid.yaml

Prints each run's eval loss at a few token counts, the target the rule gives, each
run's tokens to it, and the chosen learning rates.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import pandas as pd
import yaml

import rcpforge

CHECKPOINTS = (262_144, 524_288, 1_048_576, 2_097_152)
STEP = 0.05  # the target's grid, in nats per byte


def tokens_to(curve: pd.DataFrame, target: float) -> int | None:
    """The first eval's tokens at or below `target` (None: never)."""
    reached = curve[curve["value"] <= target]
    return int(reached["tokens"].iloc[0]) if len(reached) else None


def loss_at(curve: pd.DataFrame, tokens: int) -> float:
    """The eval loss of the last eval at or before `tokens`."""
    return float(curve[curve["tokens"] <= tokens]["value"].iloc[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("campaign", type=Path, help="the grid's campaign file (its store beside it)")
    args = parser.parse_args()
    try:
        curves = rcpforge.load(args.campaign).curves("eval_loss")
    except rcpforge.RcpforgeError as err:
        parser.error(f"campaign: {err}")
    if curves.empty:
        parser.error(f"campaign: no eval_loss points in its store yet: run `rcpforge run {args.campaign}`")
    budget = yaml.safe_load(args.campaign.read_text())["budget"]["max_tokens"]
    quarter = budget // 4
    name = re.compile(r"w(\d+)_lr([0-9.]+)")
    runs = {}
    for (model, batch), curve in curves.groupby(["model", "batch_size"]):
        if not (named := name.fullmatch(model)):
            parser.error(f"campaign: model {model!r} is not named w<d_model>_lr<rate>, as the grid's models are")
        width, lr = named.groups()
        runs[(int(width), int(batch), float(lr))] = curve.sort_values("tokens")
    print(f"{len(runs)} runs, budget {budget:,} tokens; eval loss (nats per byte) at")
    print(f"{'width':>5} {'batch':>5} {'lr':>7} " + " ".join(f"{c:>10,}" for c in CHECKPOINTS) + f" {'best':>7}")
    for (width, batch, lr), curve in sorted(runs.items()):
        print(f"{width:5d} {batch:5d} {lr:7.4f} " + " ".join(f"{loss_at(curve, c):10.3f}" for c in CHECKPOINTS)
              + f" {curve['value'].min():7.3f}")
    # Each cell's best loss within a quarter of the budget, over its learning rates.
    cells = sorted({(w, b) for w, b, _ in runs})
    best = {cell: min(c[c["tokens"] <= quarter]["value"].min() for (w, b, _), c in runs.items() if (w, b) == cell)
            for cell in cells}
    target = math.ceil(max(best.values()) / STEP - 1e-9) * STEP
    print(f"\nlowest loss each cell reaches within {quarter:,} tokens: "
          + ", ".join(f"w{w}/bs{b} {v:.3f}" for (w, b), v in best.items()))
    print(f"target: {target:.2f} (the highest of those, rounded up to {STEP})\n")
    rates = sorted({k[2] for k in runs})
    print(f"tokens to {target:.2f} (nc: not within the budget; blank: not run)")
    print(f"{'width':>5} {'batch':>5} " + " ".join(f"{'lr ' + str(lr):>12}" for lr in rates) + f" {'chosen':>8}")
    for width, batch in cells:
        reached = {lr: tokens_to(c, target) for (w, b, lr), c in runs.items() if (w, b) == (width, batch)}
        finite = {lr: t for lr, t in reached.items() if t is not None}
        chosen = min(finite, key=lambda lr: (finite[lr], -lr)) if finite else None
        shown = ["" if lr not in reached else "nc" if reached[lr] is None else f"{reached[lr]:,}" for lr in rates]
        print(f"{width:5d} {batch:5d} " + " ".join(f"{text:>12}" for text in shown) + f" {chosen!s:>8}")


if __name__ == "__main__":
    main()
