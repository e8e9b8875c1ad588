"""Every import and every module path in the repository names rcpforge's modules by their
installed names (`rcpforge.analysis.load`, not `analysis.load`): in a checkout the bare
names still import (the folders are on the path when Python runs from the repository's
root), so a missed one would pass here and fail for every user of the wheel, or load a
second copy of a module beside the first."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers.modules import SUBPACKAGES

ROOT = Path(__file__).resolve().parents[1]
SKIP = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "build", "rcpforge-runs"}
TEXT_SUFFIXES = {".py", ".md", ".sh", ".toml", ".yaml", ".yml", ".txt"}
# `analysis.load` (a module path in prose, a string or `python -m`), not `x.analysis.load`,
# `docs/analysis.md` or `tests/analysis/...`
# files that write short names on purpose, and why
SHORT_NAMES_ON_PURPOSE = {
    "tests/test_boundaries.py": "made-up import graphs, written in short names that _graph() prefixes",
    "tests/test_one_package.py": "the examples of what these checks find",
}
DOTTED = re.compile(rf"(?<![\w./\-])({'|'.join(SUBPACKAGES)})((?:\.[A-Za-z_]\w*)+)")


def _files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if SKIP & set(rel.parts) or any(part.endswith(".egg-info") for part in rel.parts):
            continue
        if rel.parts[0] == "rcpforge" and len(rel.parts) > 1 and rel.parts[1] in SUBPACKAGES:
            continue  # the same files again, through rcpforge/'s symlinks
        if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name == "Makefile"):
            found.append(path)
    return found


def bare_imports(source: str) -> list[str]:
    """The import statements that name one of the folders as a top-level package."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        found += [f"line {node.lineno}: {name}" for name in names if name.split(".")[0] in SUBPACKAGES]
    return found


def bare_module_paths(text: str, root: Path = ROOT) -> list[str]:
    """Dotted paths that name an existing module or package of rcpforge without its
    `rcpforge.` prefix (`analysis.py` or `sweeps.examples` as a folder path are not)."""
    found = []
    for match in DOTTED.finditer(text):
        parts = [match[1], *match[2].lstrip(".").split(".")]
        # the longest prefix that is a file or folder of ours decides
        for n in range(len(parts), 1, -1):
            where = root.joinpath(*parts[:n])
            if where.with_suffix(".py").is_file() or (where / "__init__.py").is_file():
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"line {line}: {match[0]}")
                break
    return found


def test_no_code_imports_the_folders_by_their_bare_names():
    offenders = {}
    for path in _files():
        if path.suffix == ".py" and (found := bare_imports(path.read_text())):
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


def test_no_text_names_a_module_by_its_bare_path():
    offenders = {}
    for path in _files():
        if str(path.relative_to(ROOT)) in SHORT_NAMES_ON_PURPOSE:
            continue
        if found := bare_module_paths(path.read_text(errors="replace")):
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


def test_the_checks_find_what_they_look_for():
    assert bare_imports("import os\nfrom analysis.load import x\nimport rcpforge.analysis\n") == [
        "line 2: analysis.load"]
    assert bare_imports("from sweeps import spec\n") == ["line 1: sweeps"]
    text = ("python -m orchestrator.cli run\nsee `analysis.load.RUN_SCHEMA` and rcpforge.analysis.load\n"
            "docs/analysis.md, analysis.py, sweeps/examples/x.yaml, self.cluster.local, cluster.temp_dir\n")
    assert bare_module_paths(text) == ["line 1: orchestrator.cli", "line 2: analysis.load.RUN_SCHEMA"]
