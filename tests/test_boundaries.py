"""The package rules of `docs/design.md`, read from every import statement of every
module (those inside functions included: a lazy import is still a dependency)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("analysis", "cluster", "orchestrator", "sweeps", "trainers", "rcpforge")
API = "rcpforge"  # the Python API: above sweeps and analysis; of the rest, only the command line imports it
VOCABULARY = "trainers.contract"

# package -> the packages (or third-party roots) it must never import
FORBIDDEN = {
    "analysis": {"cluster", "orchestrator", "sweeps", "torch"},
    "sweeps": {"orchestrator", "cluster", "analysis"},
    "trainers": {"orchestrator", "analysis", "sweeps", "cluster"},
    "cluster": {"analysis", "sweeps", "orchestrator", "rcpforge"},
    "rcpforge": {"orchestrator", "cluster", "torch"},
}
for _below in ("analysis", "sweeps", "trainers"):
    FORBIDDEN[_below] = FORBIDDEN[_below] | {API}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every module this file imports, absolute, relative imports resolved."""
    module = _module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
            # `from pkg import module` imports pkg.module
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            graph[_module_name(path)] = _imports(path)
    return graph


def _ours(name: str, graph: dict[str, set[str]]) -> bool:
    return name in graph


def package_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles among the top-level packages (a -> b when a module of a imports one of b)."""
    edges = {p: set() for p in PACKAGES}
    for module, imported in graph.items():
        for name in imported:
            top = name.split(".")[0]
            if top in edges and top != module.split(".")[0] and _ours(name, graph):
                edges[module.split(".")[0]].add(top)
    cycles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for package in PACKAGES:
        if package not in state:
            visit(package, [package])
    return cycles


def violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, imported in sorted(graph.items()):
        top = module.split(".")[0]
        in_vocabulary = module == VOCABULARY or module.startswith(VOCABULARY + ".")
        for name in sorted(imported):
            root = name.split(".")[0]
            if root in FORBIDDEN.get(top, ()):
                found.append(f"{module} imports {name}")
            if top == "analysis" and root == "trainers" and _ours(name, graph) and not (
                name == VOCABULARY or name.startswith(VOCABULARY + ".")
            ):
                found.append(f"{module} imports {name}: of trainers, analysis may import only {VOCABULARY}")
            if in_vocabulary and root in PACKAGES and _ours(name, graph) and not (
                name == VOCABULARY or name.startswith(VOCABULARY + ".")
            ):
                found.append(f"{module} imports {name}: the vocabulary imports nothing else of rcpforge")
            if root == API and top == "orchestrator" and not module.startswith("orchestrator.cli"):
                found.append(f"{module} imports {name}: of orchestrator, only the command line (orchestrator.cli) "
                             "may use the API")
            if in_vocabulary and root in ("torch", "mlflow", "ray", "submitit", "optuna"):
                found.append(f"{module} imports {name}: the vocabulary stays free of heavy dependencies")
    return found


def test_every_module_keeps_the_package_rules():
    graph = import_graph()
    assert len(graph) > 60  # every package was read
    assert violations(graph) == []


def test_no_package_imports_one_that_imports_it_back():
    assert package_cycles(import_graph()) == []


def test_importing_analysis_loads_nothing_it_must_not_import():
    """The analysis rules at run time, where reading the imports cannot see (a library
    that imports torch, an import by name): every analysis module, imported in a fresh
    interpreter, leaves no module of a forbidden package in sys.modules, and of trainers
    only the vocabulary."""
    modules = sorted(m for m in import_graph() if m.split(".")[0] == "analysis")
    code = (f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
            "print('\\n'.join(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stdout.split()
    bad = [m for m in loaded if m.split(".")[0] in FORBIDDEN["analysis"] or (
        m.startswith("trainers.") and not (m == VOCABULARY or m.startswith(VOCABULARY + ".")))]
    assert len(modules) >= 10 and set(modules) <= set(loaded)  # every analysis module was imported
    assert bad == []


def test_importing_the_api_loads_no_torch_and_no_orchestrator():
    """`import rcpforge` in a fresh interpreter: the public names are there, and neither
    torch nor anything of the orchestrator or the clusters was loaded (the API is for
    notebooks on machines without a GPU stack)."""
    code = "import sys, rcpforge\nprint(' '.join(rcpforge.__all__))\nprint('\\n'.join(sorted(sys.modules)))\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    names, *loaded = proc.stdout.splitlines()
    assert {"load", "check", "round", "Campaign"} <= set(names.split())
    assert "rcpforge.campaign" in loaded
    assert [m for m in loaded if m.split(".")[0] in FORBIDDEN[API] | {"mlflow"}] == []


@pytest.mark.parametrize("source, expected", [
    # each rule catches its own breach
    ({"analysis.x": {"sweeps.spec"}, "sweeps.spec": set()}, "analysis.x imports sweeps.spec"),
    ({"analysis.x": {"trainers.tinylm.train"}, "trainers.tinylm.train": set()}, "may import only trainers.contract"),
    ({"trainers.contract.run": {"trainers.recipes"}, "trainers.recipes": set()}, "imports nothing else"),
    ({"trainers.contract.run": {"mlflow"}}, "free of heavy dependencies"),
    ({"cluster.local": {"orchestrator.execute"}, "orchestrator.execute": set()}, "cluster.local imports orchestrator"),
    ({"analysis.x": {"rcpforge.campaign"}, "rcpforge.campaign": set()}, "analysis.x imports rcpforge"),
    ({"rcpforge.campaign": {"orchestrator.adaptive"}, "orchestrator.adaptive": set()},
     "rcpforge.campaign imports orchestrator"),
    ({"orchestrator.status": {"rcpforge"}, "rcpforge": set()}, "only the command line"),
])
def test_the_rules_catch_a_breach(source, expected):
    assert any(expected in v for v in violations(source))


def test_a_package_cycle_is_found():
    graph = {"sweeps.tune": {"orchestrator.campaign"}, "orchestrator.campaign": {"sweeps.spec"}, "sweeps.spec": set()}
    assert package_cycles(graph) == [["orchestrator", "sweeps", "orchestrator"]] or package_cycles(graph) == [
        ["sweeps", "orchestrator", "sweeps"]]
