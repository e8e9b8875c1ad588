"""Every ```python block of docs/analysts.md runs, in order, in one namespace, in a fresh
interpreter whose current folder holds the demo campaign (its file, its store, its
export), as a notebook would; what the blocks computed is then checked."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "analysts.md"

# Runs the blocks (argv: the page), then prints what they left, as JSON.
RUNNER = r"""
import json, re, sys
blocks = re.findall(r"^```python\n(.*?)^```", open(sys.argv[1]).read(), re.S | re.M)
ns = {}
for i, block in enumerate(blocks, 1):
    exec(compile(block, f"docs/analysts.md, python block {i}", "exec"), ns)
print(json.dumps({
    "blocks": len(blocks),
    "runs": len(ns["runs"]),
    "same_table": ns["same"].rcp_table().equals(ns["campaign"].rcp_table()),
    "candidates": sorted(set(ns["factors"]["candidate"])),
    "verdicts": sorted(set(ns["factors"]["verdict"])),
    "risk_cells": len(ns["risk"]),
    "written": sorted(p.name for p in ns["result"].written),
    "checked": [ns["verdict"].benchmark, ns["verdict"].batch_size],
    "submissions": len(ns["found"].submissions),
    "bf16_runs": sorted(ns["bf16"]["tags.rcpforge.recipe"]),
    "curve": len(ns["curve"]),
    "curves": [len(ns["curves"]), sorted(set(ns["curves"]["metric"])), ns["curves"]["seed"].nunique()],
    "bands": __import__("os").path.getsize("seed-bands.png"),
    "torch": "torch" in sys.modules,
}))
"""


def test_every_python_block_of_the_analysts_page_runs(demo, tmp_path):
    folder = tmp_path / "notebook"
    shutil.copytree(demo.folder, folder)  # the blocks write analysis-out/ here, not into the shared demo
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(PAGE)], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["blocks"] == len(re.findall(r"^```python$", PAGE.read_text(), re.M)) >= 12
    assert facts["runs"] == 16 and facts["same_table"] and facts["risk_cells"] == 4
    assert facts["candidates"] == ["fp8_like"] and facts["verdicts"] == ["slower"]
    assert {"factors.json", "selection.json", "rcp_table.parquet", "rcps_demo_bf16.json"} <= set(facts["written"])
    assert facts["checked"] == ["rcpforge_demo", 16] and facts["submissions"] == 4
    assert facts["bf16_runs"] == ["bf16"] * 8 and facts["curve"] > 0
    rows, metrics, seeds = facts["curves"]  # the seed bands' points: every run's eval points
    assert rows > 16 and metrics == ["eval_accuracy"] and seeds == 4 and facts["bands"] > 1000
    assert facts["torch"] is False  # the API and MLflow's reads leave torch unloaded
