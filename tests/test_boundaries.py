"""The package rules of `docs/design.md`, read from every import statement of every
module (those inside functions included: a lazy import is still a dependency)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.modules import FOLDERS, module_name, package_of, source_files

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = FOLDERS
API = "rcpforge"  # the Python API: above sweeps and analysis; of the rest, only the command line imports it
VOCABULARY = "rcpforge.trainers.contract"

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


def _imports(path: Path) -> set[str]:
    """Every module this file imports, absolute, relative imports resolved."""
    module = module_name(path, ROOT)
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
    return {module_name(path, ROOT): _imports(path) for path in source_files(ROOT)}


def _package(name: str) -> str:
    """The package a module name belongs to: one of PACKAGES for rcpforge's own, else the
    third-party root (torch, mlflow, ...)."""
    return package_of(name) or name.split(".")[0]


def _ours(name: str, graph: dict[str, set[str]]) -> bool:
    return name in graph


def package_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles among the top-level packages (a -> b when a module of a imports one of b)."""
    edges = {p: set() for p in PACKAGES}
    for module, imported in graph.items():
        for name in imported:
            top = _package(name)
            if top in edges and top != _package(module) and _ours(name, graph):
                edges[_package(module)].add(top)
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
        top = _package(module)
        in_vocabulary = module == VOCABULARY or module.startswith(VOCABULARY + ".")
        for name in sorted(imported):
            root = _package(name)
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
            if root == API and top == "orchestrator" and not module.startswith("rcpforge.orchestrator.cli"):
                found.append(f"{module} imports {name}: of orchestrator, only the command line "
                             "(rcpforge.orchestrator.cli) may use the API")
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
    modules = sorted(m for m in import_graph() if _package(m) == "analysis")
    code = (f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
            "print('\\n'.join(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stdout.split()
    # `rcpforge` itself is loaded as every subpackage's parent: its __init__ is the lazy door
    # and loads nothing (test_importing_a_subpackage_runs_no_api_module)
    bad = [m for m in loaded if m != API and _package(m) in FORBIDDEN["analysis"] or (
        m.startswith("rcpforge.trainers.") and not (m == VOCABULARY or m.startswith(VOCABULARY + ".")))]
    assert len(modules) >= 10 and set(modules) <= set(loaded)  # every analysis module was imported
    assert bad == []


def test_importing_the_api_loads_no_torch_and_no_orchestrator():
    """`import rcpforge` and its public names in a fresh interpreter: the names are there,
    and neither torch nor anything of the orchestrator or the clusters was loaded (the API
    is for notebooks on machines without a GPU stack)."""
    code = ("import sys, rcpforge\nprint(' '.join(rcpforge.__all__))\n"
            "rcpforge.load, rcpforge.check, rcpforge.round, rcpforge.Campaign\n"
            "print('\\n'.join(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    names, *loaded = proc.stdout.splitlines()
    assert {"load", "check", "round", "Campaign"} <= set(names.split())
    assert "rcpforge.campaign" in loaded
    assert [m for m in loaded if _package(m) in FORBIDDEN[API] | {"mlflow"}] == []


def test_importing_a_subpackage_runs_no_api_module():
    """rcpforge/__init__ runs before every internal import, so it loads nothing itself:
    `import rcpforge` loads no other module of rcpforge, and the tiny LM's trainer loads
    no analysis, no API module and no MLflow."""
    code = ("import sys, importlib\nimportlib.import_module(sys.argv[1])\n"
            "print('\\n'.join(sorted(m for m in sys.modules if m.startswith(('rcpforge', 'mlflow')))))\n")
    loaded = {}
    for module in ("rcpforge", "rcpforge.trainers.tinylm.train"):
        proc = subprocess.run([sys.executable, "-c", code, module], cwd=ROOT, capture_output=True, text=True,
                              env={"PYTHONPATH": str(ROOT)})
        assert proc.returncode == 0, proc.stderr
        loaded[module] = proc.stdout.split()
    assert loaded["rcpforge"] == ["rcpforge"]
    trainer = loaded["rcpforge.trainers.tinylm.train"]
    assert "rcpforge.trainers.tinylm.train" in trainer
    assert [m for m in trainer if _package(m) not in ("trainers", "rcpforge") or m.startswith("rcpforge.")
            and _package(m) == "rcpforge"] == []


def _graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """A made-up import graph in short names ("analysis.x" is rcpforge.analysis.x), each
    imported module of rcpforge present as a node."""
    def full(name: str) -> str:
        return name if name in ("mlflow",) or name.startswith("rcpforge") else f"rcpforge.{name}"

    graph = {full(m): {full(n) for n in imported} for m, imported in edges.items()}
    for imported in list(graph.values()):
        graph.update({n: set() for n in imported if n.startswith("rcpforge") and n not in graph})
    return graph


@pytest.mark.parametrize("edges, expected", [
    # each rule catches its own breach
    ({"analysis.x": {"sweeps.spec"}}, "rcpforge.analysis.x imports rcpforge.sweeps.spec"),
    ({"analysis.x": {"trainers.tinylm.train"}}, "may import only rcpforge.trainers.contract"),
    ({"trainers.contract.run": {"trainers.recipes"}}, "imports nothing else"),
    ({"trainers.contract.run": {"mlflow"}}, "free of heavy dependencies"),
    ({"cluster.local": {"orchestrator.execute"}}, "rcpforge.cluster.local imports rcpforge.orchestrator"),
    ({"analysis.x": {"rcpforge.campaign"}}, "rcpforge.analysis.x imports rcpforge.campaign"),
    ({"rcpforge.campaign": {"orchestrator.adaptive"}}, "rcpforge.campaign imports rcpforge.orchestrator"),
    ({"orchestrator.status": {"rcpforge"}}, "only the command line"),
])
def test_the_rules_catch_a_breach(edges, expected):
    assert any(expected in v for v in violations(_graph(edges)))


def test_a_package_cycle_is_found():
    graph = _graph({"sweeps.tune": {"orchestrator.campaign"}, "orchestrator.campaign": {"sweeps.spec"}})
    assert package_cycles(graph) == [["orchestrator", "sweeps", "orchestrator"]] or package_cycles(graph) == [
        ["sweeps", "orchestrator", "sweeps"]]
