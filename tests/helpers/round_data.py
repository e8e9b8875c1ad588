"""The public MLPerf Training v5.0 round (`../shared/data/`, trimmed to its MLLOG lines):
unpacked into a temporary folder, whole or in part, never into the source tree."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

_SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
ROUND_TAR = Path(os.environ.get("RCPFORGE_ROUND_TAR", _SHARED / "training_results_v5.0_mllog.tar.xz"))
TOP = "training_results_v5.0"
# A subset with a system file per results directory, two benchmarks, a BERT in epochs,
# a retinanet with a file cut off before its run_stop (tinycorp/tinybox_green/retinanet/result_4.txt)
SUBSET = ("tinycorp", "Dell/results/1xXE9680x8MI300X", "Dell/systems/1xXE9680x8MI300X.json")


def unpack_round(into: Path, members: tuple[str, ...] = ()) -> Path:
    """The round's root (`<into>/training_results_v5.0`), with only `members` (paths under
    it) where given."""
    if not ROUND_TAR.is_file():
        pytest.skip(f"the shared round {ROUND_TAR} is not here (set RCPFORGE_ROUND_TAR)")
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "xJf", str(ROUND_TAR), "-C", str(into), *(f"{TOP}/{m}" for m in members)], check=True)
    return into / TOP
