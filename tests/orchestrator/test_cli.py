from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

HEAVY = ("torch", "mlflow", "ray", "optuna", "submitit", "scipy", "matplotlib")


def test_the_command_line_loads_without_heavy_imports():
    # `rcpforge --help` and every command's argument parsing stay fast: the heavy
    # libraries are imported inside the commands that need them
    code = f"import sys, orchestrator.cli; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == ""


def test_help_lists_every_command(cli):
    proc = cli("--help")
    assert proc.returncode == 0
    for command in ("run", "analyze", "export", "check", "rcp-stats", "import", "report", "recipes", "tune"):
        assert f" {command} " in proc.stdout
