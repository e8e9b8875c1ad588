"""The hyperparameter table that `rcpforge tune` writes and a campaign reads back
(`hparams_from: hparams.<recipe>.yaml`).

    campaign: tiny
    recipe: bf16
    objective: mean tokens-to-target over the tune seeds; ...
    hparams:                    # what a campaign uses, per batch size
      16: {lr: 0.0071, warmup_tokens: 8192}
    evidence:                   # how each entry was found
      16: {study: ..., best_trial: 7, best_value: 28672.0, converged: true, trials: {...}, top: [...]}

Tuning one batch size updates its entries and keeps the others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

OBJECTIVE_NOTE = (
    "mean tokens-to-target over the tune seeds when every seed converged; otherwise "
    "censored: 2 * max_tokens * (1 + mean distance to the target), behind every converged trial"
)


def table_path(base_dir: Path, recipe: str) -> Path:
    return base_dir / f"hparams.{recipe}.yaml"


def _batch_size(key: Any, source: str) -> int:
    try:
        return int(key)
    except (TypeError, ValueError):
        raise ValueError(f"hparams_from: {source}: batch size {key!r} is not an integer") from None


def load_hparams_table(base_dir: Path, name: str) -> dict[int, dict[str, Any]]:
    """The per-batch-size hyperparameters of a table file (relative to the campaign)."""
    path = Path(name) if Path(name).is_absolute() else base_dir / name
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ValueError(f"hparams_from: cannot read {path} ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise ValueError(f"hparams_from: {path} is not valid YAML ({getattr(err, 'problem', err)})") from None
    hparams = data.get("hparams") if isinstance(data, dict) else None
    if not isinstance(hparams, dict) or not all(isinstance(v, dict) for v in hparams.values()):
        raise ValueError(
            f"hparams_from: {path} has no `hparams:` mapping of batch size -> {{name: value}}; "
            "write it with `rcpforge tune`"
        )
    return {_batch_size(bs, str(path)): dict(hp) for bs, hp in hparams.items()}


def write_hparams_table(
    path: Path, campaign: str, recipe: str, entries: dict[int, tuple[dict[str, Any], dict[str, Any]]]
) -> None:
    """Write (or update) the table: `entries` maps batch size -> (best hparams, evidence)."""
    data: dict[str, Any] = {}
    if path.exists():
        loaded = yaml.safe_load(path.read_text())
        data = loaded if isinstance(loaded, dict) else {}
    hparams = {int(k): v for k, v in (data.get("hparams") or {}).items()}
    evidence = {int(k): v for k, v in (data.get("evidence") or {}).items()}
    for bs, (best, proof) in entries.items():
        hparams[bs] = best
        evidence[bs] = proof
    out = {
        "campaign": campaign,
        "recipe": recipe,
        "objective": OBJECTIVE_NOTE,
        "hparams": dict(sorted(hparams.items())),
        "evidence": dict(sorted(evidence.items())),
    }
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text("# written by `rcpforge tune`; use it with `hparams_from:` in a campaign\n"
                   + yaml.safe_dump(out, sort_keys=False))
    tmp.replace(path)  # a reader never sees half a file
