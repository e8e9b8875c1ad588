"""The public MLPerf Training v5.0 round (trimmed to its MLLOG lines) and a small part of
it, both carried in tests/data/ so every clone has them: unpacked into a temporary
folder, never into the source tree."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

_DATA = Path(__file__).resolve().parents[1] / "data"
ROUND_TAR = Path(os.environ.get("RCPFORGE_ROUND_TAR", _DATA / "training_results_v5.0_mllog.tar.xz"))
TOP = "training_results_v5.0"
# A subset with a system file per results directory, two benchmarks, a BERT in epochs,
# a retinanet with a file cut off before its run_stop (tinycorp/tinybox_green/retinanet/result_4.txt):
# these members of the round, carried in the repository so its tests run in every clone
SUBSET = ("tinycorp", "Dell/results/1xXE9680x8MI300X", "Dell/systems/1xXE9680x8MI300X.json")
SUBSET_TAR = _DATA / "training_results_v5.0_subset.tar.xz"


def unpack_round(into: Path, tar: Path = ROUND_TAR) -> Path:
    """The round's root (`<into>/training_results_v5.0`): the whole round, or the subset
    (`tar=SUBSET_TAR`). RCPFORGE_ROUND_TAR names another copy of the whole round."""
    if not tar.is_file():
        raise FileNotFoundError(f"the round {tar} is not here: RCPFORGE_ROUND_TAR names a missing file, "
                                "or tests/data/ lost it (git checkout tests/data)")
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "xJf", str(tar), "-C", str(into)], check=True)
    return into / TOP


def write_submission(folder: Path, benchmark: str, bs: int, values: list[float | None],
                     logged: dict[str, object] | None = None) -> Path:
    """A results directory (`tests/analysis/mllog_dirs.write_results`'s files) whose
    every file also logs `logged` (MLLOG key -> value: submission_org, _platform, a
    precision disclosure...) after its first line."""
    from tests.analysis.mllog_dirs import mllog, result_lines

    folder.mkdir(parents=True, exist_ok=True)
    extra = [mllog(k, v) for k, v in (logged or {}).items()]
    for i, v in enumerate(values):
        lines = result_lines(benchmark, bs, v)
        (folder / f"result_{i}.txt").write_text("\n".join(lines[:1] + extra + lines[1:]) + "\n")
    return folder


def write_system(root: Path, submitter: str, system: str, framework: str, accelerator: str) -> None:
    """`<root>/<submitter>/systems/<system>.json` with the fields a round groups by."""
    path = root / submitter / "systems" / f"{system}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"submitter": submitter, "division": "closed", "framework": framework,
                                 "accelerator_model_name": accelerator, "accelerators_per_node": "8",
                                 "number_of_nodes": "1"}))


def lognormal_runs(rng, mean: float, stdev: float, size: int):
    """Draws of a lognormal with this mean and stdev (the round analysis's honest model)."""
    sigma2 = math.log1p((stdev / mean) ** 2)
    return rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), size)


CHERRY_BENCH, CHERRY_BS, CHERRY_N = "bert", 256, 10  # the checker's N for BERT
_MEAN, _STDEV = 40.0, 4.0


def cherry_pick_round(tmp_path: Path, systems: bool = True) -> tuple[Path, Path]:
    """(round root, RCP file): six honest submissions of N runs each and one (lab6) made
    of the fastest N of 200 seeds, all on one system type (one group); the RCP is 2N
    honest runs. Without `systems`, plain folders whose MLLOG lines name org and platform."""
    import numpy as np

    from tests.analysis.mllog_dirs import rcp_file

    rng = np.random.default_rng(2024)
    root, bench, bs, n = tmp_path / "round", CHERRY_BENCH, CHERRY_BS, CHERRY_N
    rcps = rcp_file(tmp_path / "rcps.json", bench, {bs: [float(v) for v in lognormal_runs(rng, _MEAN, _STDEV, 2 * n)]})
    honest = [list(lognormal_runs(rng, _MEAN, _STDEV, n)) for _ in range(6)]
    picked = sorted(lognormal_runs(rng, _MEAN, _STDEV, 200))[:n]
    for i, values in enumerate([*honest, picked]):
        name = f"lab{i}"
        folder = root / name / "results" / "sys" / bench if systems else root / name
        logged = {"submission_org": name, "submission_platform": "1xsys"}
        write_submission(folder, bench, bs, [float(v) for v in values], logged)
        if systems:
            write_system(root, name, "sys", "PyTorch 25.04", "Acc X")
    return root, rcps
