"""`analysis` never imports cluster, orchestrator, the tiny LM or torch (docs/design.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_analysis_imports_stay_inside_their_boundary():
    modules = sorted(p.stem for p in (ROOT / "analysis").glob("*.py") if p.stem != "__init__")
    code = (
        "import sys\n"
        + "".join(f"import analysis.{m}\n" for m in modules)
        + "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'cluster', 'orchestrator') or m.startswith('trainers.tinylm')]\n"
        "print(','.join(sorted(bad)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert len(modules) >= 10 and proc.stdout.strip() == ""
