"""The wheel holds rcpforge's own packages and nothing else (no `tests`), and from an
installed wheel `import rcpforge` works. Built offline from a copy of the checkout (the
build writes build/ and *.egg-info beside the sources), with the setuptools that is
installed (no build isolation: nothing is downloaded)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"rcpforge", "analysis", "cluster", "orchestrator", "sweeps", "trainers"}


def _build(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".pytest_cache", "*.egg-info", "build")
    for name in (*PACKAGES, "tests", "benchmarks", "docs"):  # tests and the rest too: the build must leave them out
        shutil.copytree(ROOT / name, source / name, ignore=skip)
    out = tmp_path / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "-q", "-w", str(out), str(source)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = out.glob("rcpforge-*.whl")
    return wheel


def test_the_wheel_holds_only_rcpforges_packages_and_imports(tmp_path):
    wheel = _build(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(tmp_path / "site")
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == PACKAGES
    assert "rcpforge/py.typed" in names and "sweeps/examples/adaptive.yaml" in names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "rcpforge = orchestrator.cli:main" in (tmp_path / "site" / entry_points).read_text()

    # An installed wheel: its folder on the path, run from elsewhere than the checkout.
    code = ("import sys, rcpforge\nprint(rcpforge.__file__)\nprint(sorted(rcpforge.__all__))\n"
            "print('torch' in sys.modules)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    where, public, torch = proc.stdout.splitlines()
    assert Path(where).is_relative_to(tmp_path / "site")
    assert "'load'" in public and "'check'" in public and "'round'" in public
    assert torch == "False"
