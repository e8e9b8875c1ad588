"""rcpforge installs one import package, `rcpforge`, and nothing under the card's generic
folder names: the built wheel holds `rcpforge/` (with analysis, cluster, orchestrator,
sweeps and trainers as its subpackages) and its dist-info only, and an analyst's folder
full of modules named like those folders breaks nothing, in a fresh venv holding only the
wheel and from the editable install alike.

The wheel is built offline from a copy of the checkout (the build writes build/ and
*.egg-info beside the sources), with the setuptools that is installed (no build isolation:
nothing is downloaded). The fresh venv gets the wheel alone; its dependencies come from
this venv's site-packages through a .pth line (a folder named by a .pth line is put on the
path, but its own .pth files, the editable install's finder among them, are not run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.helpers.adaptive_campaigns import factor_program
from tests.helpers.modules import SUBPACKAGES

ROOT = Path(__file__).resolve().parents[1]

# A notebook folder's own modules, each named like one of rcpforge's folders: the
# failures issue 49 reproduced (a package with a load.py, an analysis.py, a sweeps.py).
USER_FOLDERS = {
    "package": {
        "analysis/__init__.py": "WHO = 'user'\n",
        "analysis/load.py": "def my_loader():\n    return 'user'\n",
        "sweeps.py": "WHO = 'user'  # a W&B sweep script\n",
        "cluster.py": "WHO = 'user'\n",
        "trainers/__init__.py": "WHO = 'user'\n",
        "orchestrator.py": "WHO = 'user'\n",
    },
    "modules": {"analysis.py": "WHO = 'user'\n", "sweeps.py": "WHO = 'user'\n"},
}

# In the user's folder: the API reads the campaign, nothing of the user's was imported by
# rcpforge, and then the user's own `import analysis` gets the user's.
ANALYST = textwrap.dedent("""
    import sys, rcpforge
    runs = rcpforge.load(sys.argv[1]).runs()
    print(len(runs), sorted(set(runs["status"])))
    print(rcpforge.load(sys.argv[1]).rcp_table().shape[0])
    ours = [m for m in sys.modules if m.split(".")[0] in {names!r}]
    print("user modules rcpforge imported:", ours)
    import analysis, sweeps
    print(analysis.WHO, sweeps.WHO, rcpforge.__file__)
""").format(names=set(SUBPACKAGES))


def _build(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".pytest_cache", "*.egg-info", "build")
    # tests and the rest too: the build must leave them out; rcpforge/'s symlinks stay symlinks
    for name in (*SUBPACKAGES, "rcpforge", "tests", "benchmarks", "docs"):
        shutil.copytree(ROOT / name, source / name, ignore=skip, symlinks=True)
    out = tmp_path / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "-q", "-w", str(out), str(source)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = out.glob("rcpforge-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory, wheel) -> Path:
    """A new venv with only the wheel installed (its console script included)."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return venv


def test_the_wheel_installs_one_package(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(tmp_path / "site")
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"rcpforge"}
    for sub in SUBPACKAGES:
        assert f"rcpforge/{sub}/__init__.py" in names and f"rcpforge/{sub}/py.typed" in names
    assert "rcpforge/py.typed" in names and "rcpforge/sweeps/examples/adaptive.yaml" in names
    assert "rcpforge/analysis/reference_points/mlperf_fp4.yaml" in names
    assert "rcpforge/trainers/precision/qkernel.c" in names
    assert not [n for n in names if n.startswith(("tests/", "rcpforge/tests/", "benchmarks/"))]
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "rcpforge = rcpforge.orchestrator.cli:main" in (tmp_path / "site" / entry_points).read_text()
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    assert (tmp_path / "site" / top_level).read_text().split() == ["rcpforge"]

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


def _user_folder(root: Path, kind: str) -> Path:
    for rel, text in USER_FOLDERS[kind].items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    data = {"name": "notebook", **factor_program(), "recipes": [{"bf16": {"slowdown": 1.0}}],
            "batch_sizes": [16, 64], "seeds": 2, "hparams": {16: {}, 64: {}},
            "backend": {"kind": "local", "workers": 2},
            "rcp": {"benchmark": "rcpforge_notebook", "submission_runs": 3}}
    (root / "camp").mkdir()
    (root / "camp" / "campaign.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def _as_a_user(python: Path, rcpforge_cmd: list[str], folder: Path) -> None:
    """`rcpforge run` and `analyze` and the Python API from the user's folder, with the
    environment of a user's shell (no PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["COLUMNS"] = "200"
    for args in (["run", "camp/campaign.yaml"], ["analyze", "camp/campaign.yaml", "--out", "out"]):
        proc = subprocess.run([*rcpforge_cmd, *args], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (folder / "out" / "rcp_table.csv").exists()
    proc = subprocess.run([str(python), "-c", ANALYST, "camp/campaign.yaml"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    counts, rows, ours, user = proc.stdout.splitlines()
    assert counts == "4 ['converged']" and rows == "2"
    assert ours == "user modules rcpforge imported: []"
    who_analysis, who_sweeps, where = user.split()
    assert (who_analysis, who_sweeps) == ("user", "user")
    assert not Path(where).is_relative_to(folder)


@pytest.mark.parametrize("kind", sorted(USER_FOLDERS))
def test_an_analysts_folder_breaks_nothing_from_the_wheel(fresh_venv, tmp_path, kind):
    folder = _user_folder(tmp_path, kind)
    _as_a_user(fresh_venv / "bin" / "python", [str(fresh_venv / "bin" / "rcpforge")], folder)


def test_an_analysts_folder_breaks_nothing_from_the_editable_install(tmp_path):
    # the user's `analysis/` package: the case the editable finder once hid by grafting
    # rcpforge's modules into it
    folder = _user_folder(tmp_path, "package")
    python = Path(sys.executable)
    _as_a_user(python, [str(python.parent / "rcpforge")], folder)
