"""rcpforge's modules as Python imports them: the card's top-level folders are the
subpackages of the one import package (`analysis/load.py` is `rcpforge.analysis.load`,
through the symlink rcpforge/analysis), and rcpforge/ holds the Python API itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

SUBPACKAGES = ("analysis", "cluster", "orchestrator", "sweeps", "trainers")
FOLDERS = (*SUBPACKAGES, "rcpforge")


def module_name(path: Path, root: Path) -> str:
    """The dotted name `path` is imported as (a file of any other folder keeps its plain
    dotted path)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] in SUBPACKAGES:
        parts.insert(0, "rcpforge")
    return ".".join(parts)


def source_files(root: Path, folders: tuple[str, ...] = FOLDERS) -> Iterator[Path]:
    """Every `.py` file of the given folders once, by its real path (rcpforge/'s symlinks
    into the other folders are not followed)."""
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            if not any(parent.is_symlink() for parent in path.parents if parent.is_relative_to(root)):
                yield path


def package_of(module: str) -> str:
    """Which of the six the module belongs to: a subpackage's name, or "rcpforge" for the
    Python API (rcpforge's own modules); "" for a module not of rcpforge."""
    parts = module.split(".")
    if parts[0] != "rcpforge":
        return ""
    return parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES else "rcpforge"
