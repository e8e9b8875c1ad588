"""What pruning saves when tuning: the same grid of learning rates on the tiny LM tuned
twice through the real machinery (local workers, MLflow and Optuna on SQLite), once with
no pruner and once with the `hopeless` pruner; prints tokens trained, wall time and the
best lr of each, and the ratios (pruned / unpruned).

    python benchmarks/tune_pruning.py [--workers 2] [--max-tokens 120000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rcpforge.analysis.load import StoreReader  # noqa: E402
from rcpforge.sweeps.spec import load_campaign  # noqa: E402
from rcpforge.orchestrator.tune.launcher import select_cells, tune_campaign  # noqa: E402
from tests.helpers.campaigns import tiny_campaign, write_campaign  # noqa: E402

GRID = [1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1]


def tokens_trained(campaign) -> int:
    """Sum over the tune runs of the last eval's tokens (pruned runs stop early)."""
    store = StoreReader(campaign.tracking_uri)
    total = 0
    for run in store.runs(store.experiment_id(campaign.name), "tune"):
        history = store.history(run.info.run_id, campaign.target.metric)
        total += max((m.step for m in history), default=0)
    return total


def outcomes(campaign) -> dict[float, tuple[str, float | None]]:
    """lr -> (converged / censored / pruned, objective), from the study."""
    import optuna

    from rcpforge.sweeps.tune_study import storage_url

    study = optuna.load_study(study_name=f"{campaign.name}.bf16.bs16", storage=storage_url(campaign))
    return {t.params["lr"]: ("pruned" if t.state.name == "PRUNED" else
                             "converged" if t.user_attrs.get("converged") else "censored", t.value)
            for t in study.trials}


def one(folder: Path, pruner: str, workers: int, max_tokens: int) -> tuple[int, float, dict, int, dict]:
    data = tiny_campaign(recipes=["bf16"], budget={"max_tokens": max_tokens, "eval_every_tokens": 4096},
                         tune={"space": {"lr": {"choices": GRID}}, "sampler": {"kind": "grid"},
                               "pruner": {"kind": pruner}, "trials": len(GRID)})
    campaign = load_campaign(write_campaign(folder, data))
    start = time.perf_counter()
    [summary] = tune_campaign(campaign, select_cells(campaign, None, [16]), workers=workers)
    wall = time.perf_counter() - start
    return tokens_trained(campaign), wall, summary.best_params, summary.pruned, outcomes(campaign)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=120_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = one(Path(tmp) / "none", "none", args.workers, args.max_tokens)
        pruned = one(Path(tmp) / "hopeless", "hopeless", args.workers, args.max_tokens)
    print(f"grid of {len(GRID)} lrs, budget {args.max_tokens:,} tokens per trial, {args.workers} workers")
    for name, (tokens, wall, best, n_pruned, _) in (("no pruner", base), ("hopeless", pruned)):
        print(f"{name:>10}: {tokens:>9,} tokens trained, {wall:6.1f} s wall, {n_pruned} pruned, best {best}")
    print(f"ratio hopeless / none: tokens {pruned[0] / base[0]:.3f}, wall {pruned[1] / base[1]:.3f}; "
          f"same best: {pruned[2] == base[2]}")
    best_unpruned = min(v for o, v in base[4].values() if o == "converged")
    lost = sorted(lr for lr, (o, _) in pruned[4].items() if o == "pruned" and base[4][lr][0] == "converged")
    beaten = [lr for lr in lost if base[4][lr][1] <= best_unpruned]
    print(f"pruned trials that converge when not pruned: {len(lost)} {lost}, their tokens-to-target unpruned "
          f"{[base[4][lr][1] for lr in lost]} against the best {best_unpruned:,.0f}; "
          f"as good as the best: {len(beaten)}")
    print("per lr (none / hopeless): " + ", ".join(f"{lr:g} {base[4][lr][0]}/{pruned[4][lr][0]}" for lr in GRID))


if __name__ == "__main__":
    main()
