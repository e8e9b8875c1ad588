"""The size of the rooms (`docs/design.md`, "Rules between the packages"): in the six
packages no `.py` file over 400 lines, no function or method over 60, and no import
circle between modules. Imports inside functions count (deferring an import hides a
circle, it does not break it); imports under `if TYPE_CHECKING:` do not (they never run).

The baseline below lists each offender as it is today (none now: the code meets the
limits). The test fails when an offender appears that is not listed, when a listed one
grows, and when a listed one is no longer an offender: then remove its entry, so the
baseline only shrinks. A listed offender may shrink and stay listed."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.modules import FOLDERS, module_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = FOLDERS
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60

# The baseline: today's offenders. Remove an entry once it is fixed; add one only for an
# offender moved or renamed as it is (its old entry goes), at no more than its old size.
LONG_FILES: dict[str, int] = {}
LONG_FUNCTIONS: dict[str, int] = {}
# each circle: the modules that reach one another through imports (a strongly connected set)
CIRCLES: list[list[str]] = []


@dataclass
class House:
    files: dict[str, int] = field(default_factory=dict)  # path -> lines
    functions: dict[str, int] = field(default_factory=dict)  # "path::Class.function" -> lines
    imports: dict[str, dict[str, str]] = field(default_factory=dict)  # module -> {module it imports: where}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Reader(ast.NodeVisitor):
    """One file's functions with their sizes, and the names it imports where they run."""

    def __init__(self, package: list[str]):
        self.package = package  # the package a relative import starts from
        self.scope: list[str] = []
        self.functions: dict[str, int] = {}
        self.imported: list[tuple[str, tuple[str, ...], int]] = []  # (module, names from it, line)

    def _inside(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_ClassDef = _inside

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        name = ".".join([*self.scope, node.name])
        size = (node.end_lineno or node.lineno) - node.lineno + 1  # from `def` (decorators aside) to its end
        self.functions[name] = max(size, self.functions.get(name, 0))  # a property's setter shares its name
        self._inside(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for statement in node.orelse:  # only the branch that runs
                self.visit(statement)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.imported.extend((alias.name, (), node.lineno) for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package[: len(self.package) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        self.imported.append((module, tuple(alias.name for alias in node.names), node.lineno))


def survey(root: Path, packages: tuple[str, ...] = PACKAGES) -> House:
    house = House()
    read: dict[str, tuple[str, _Reader]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel, text = path.relative_to(root).as_posix(), path.read_text()
            module = module_name(path, root)
            reader = _Reader(module.split(".") if path.name == "__init__.py" else module.split(".")[:-1])
            reader.visit(ast.parse(text, rel))
            house.files[rel] = len(text.splitlines())
            house.functions.update({f"{rel}::{name}": size for name, size in reader.functions.items()})
            read[module] = (rel, reader)
    for module, (rel, reader) in read.items():
        edges: dict[str, str] = {}
        for name, names, line in reader.imported:
            # `from pkg import mod` imports the module pkg.mod; `from mod import thing`, mod
            targets = [f"{name}.{n}" if f"{name}.{n}" in read else name for n in names] or [name]
            for target in targets:
                if target in read and target != module:
                    edges.setdefault(target, f"{rel}:{line}")
        house.imports[module] = edges
    return house


def circles(imports: dict[str, dict[str, str]]) -> list[list[str]]:
    """The import circles: each set of modules that reach one another (Tarjan's strongly
    connected components of two or more modules), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(imports.get(node, {})):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for node in sorted(imports):
        if node not in index:
            visit(node)
    return sorted(found)


def one_round(members: list[str], imports: dict[str, dict[str, str]], start: str | None = None) -> str:
    """A shortest way round a circle from `start` (its first module by default), with the
    import line of each step: what a reader needs to see how the circle closes."""
    start, inside = start or members[0], set(members)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in came_from:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(imports.get(node, {})):
                if nxt in inside and nxt not in came_from:
                    came_from[nxt] = node
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    steps, node = [], start
    while True:
        prev = came_from[node]
        steps.append(f"{prev} -> {node} ({imports[prev][node]})")
        node = prev
        if node == start:
            return "; ".join(reversed(steps))


def size_problems(found: dict[str, int], baseline: dict[str, int], limit: int) -> list[str]:
    problems = []
    for name, size in sorted(found.items()):
        if size <= limit:
            continue
        if name not in baseline:
            problems.append(f"{name}: {size} lines, over the limit of {limit}: split it")
        elif size > baseline[name]:
            problems.append(f"{name}: {size} lines, more than its baseline {baseline[name]} (limit {limit}): "
                            "split it rather than grow it")
    for name in sorted(baseline):
        if found.get(name, 0) <= limit:
            now = f"{found[name]} lines now" if name in found else "gone"
            problems.append(f"{name}: no longer over {limit} lines ({now}): remove its baseline entry")
    return problems


def circle_problems(imports: dict[str, dict[str, str]], baseline: list[list[str]]) -> list[str]:
    problems = []
    found = circles(imports)
    listed = [set(members) for members in baseline]
    for members in found:
        if any(set(members) <= allowed for allowed in listed):
            continue  # a listed circle, or part of one that lost modules
        grown = [allowed for allowed in listed if allowed & set(members)]
        if grown:  # shown round a module it gained
            joined = sorted(set(members) - set().union(*grown))[0]
            what = f"import circle grew past its baseline {[sorted(allowed) for allowed in grown]}"
            problems.append(f"{what}: {members}, round {one_round(members, imports, joined)}")
        else:
            problems.append(f"new import circle: {members}, round {one_round(members, imports)}")
    for allowed in listed:
        if not any(allowed & set(members) for members in found):
            problems.append(f"no longer an import circle: {sorted(allowed)}: remove its baseline entry")
    return problems


@pytest.fixture(scope="module")
def house() -> House:
    return survey(ROOT)


def _check(problems: list[str]) -> None:
    if problems:
        pytest.fail("\n".join(problems) + "\n(the baseline is at the top of tests/test_house_size.py)",
                    pytrace=False)


def test_every_package_was_read(house):
    assert len(house.files) > 100 and {path.split("/")[0] for path in house.files} == set(PACKAGES)


def test_no_file_over_the_limit_beyond_the_baseline(house):
    _check(size_problems(house.files, LONG_FILES, MAX_FILE_LINES))


def test_no_function_over_the_limit_beyond_the_baseline(house):
    _check(size_problems(house.functions, LONG_FUNCTIONS, MAX_FUNCTION_LINES))


def test_no_import_circle_beyond_the_baseline(house):
    _check(circle_problems(house.imports, CIRCLES))


# The checks themselves, on small package trees of their own.

def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _function(name: str, lines: int, indent: str = "") -> str:
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}():\n{body}{indent}    return 0\n"


def test_a_function_or_method_over_the_limit_is_a_new_offender(tmp_path):
    source = _function("fits", 60) + "class Box:\n" + _function("too_long", 61, "    ")
    house = survey(_tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": source}), ("pkg",))
    assert house.functions["pkg/a.py::fits"] == 60
    assert size_problems(house.functions, {}, 60) == [
        "pkg/a.py::Box.too_long: 61 lines, over the limit of 60: split it"]


def test_a_nested_function_counts_on_its_own(tmp_path):
    source = "def outer():\n" + _function("inner", 61, "    ") + "    return inner\n"
    house = survey(_tree(tmp_path, {"pkg/a.py": source}), ("pkg",))
    assert house.functions["pkg/a.py::outer.inner"] == 61 and house.functions["pkg/a.py::outer"] == 63


def test_a_py_file_over_the_limit_is_a_new_offender_and_c_files_do_not_count(tmp_path):
    files = {"pkg/big.py": "x = 1\n" * 401, "pkg/fits.py": "x = 1\n" * 400, "pkg/kernel.c": "int x;\n" * 900}
    house = survey(_tree(tmp_path, files), ("pkg",))
    assert size_problems(house.files, {}, 400) == ["pkg/big.py: 401 lines, over the limit of 400: split it"]


def test_a_baselined_offender_may_shrink_but_not_grow():
    assert size_problems({"a.py::f": 70}, {"a.py::f": 70}, 60) == []
    assert size_problems({"a.py::f": 65}, {"a.py::f": 70}, 60) == []
    assert size_problems({"a.py::f": 71}, {"a.py::f": 70}, 60) == [
        "a.py::f: 71 lines, more than its baseline 70 (limit 60): split it rather than grow it"]


def test_a_baselined_offender_that_is_fixed_or_gone_must_leave_the_baseline():
    assert size_problems({"a.py::f": 60}, {"a.py::f": 70, "b.py::g": 80}, 60) == [
        "a.py::f: no longer over 60 lines (60 lines now): remove its baseline entry",
        "b.py::g: no longer over 60 lines (gone): remove its baseline entry",
    ]


CIRCLE = {
    "pkg/__init__.py": "",
    "pkg/a.py": "from pkg.b import helper\n",
    "pkg/b.py": "def helper():\n    from pkg import a\n    return a\n",  # hidden in a function
    "pkg/c.py": "from . import a\n",  # imports into the circle, not part of it
}


def test_a_circle_hidden_in_a_function_is_found(tmp_path):
    house = survey(_tree(tmp_path, CIRCLE), ("pkg",))
    assert circles(house.imports) == [["pkg.a", "pkg.b"]]
    assert house.imports["pkg.c"] == {"pkg.a": "pkg/c.py:1"}
    assert circle_problems(house.imports, []) == [
        "new import circle: ['pkg.a', 'pkg.b'], round pkg.a -> pkg.b (pkg/a.py:1); pkg.b -> pkg.a (pkg/b.py:2)"]


@pytest.mark.parametrize("guard", ["if TYPE_CHECKING:", "if typing.TYPE_CHECKING:"])
def test_an_import_under_type_checking_is_no_circle(tmp_path, guard):
    files = {**CIRCLE, "pkg/b.py": f"import typing\nfrom typing import TYPE_CHECKING\n{guard}\n    from pkg import a\n"}
    assert circles(survey(_tree(tmp_path, files), ("pkg",)).imports) == []
    files["pkg/b.py"] += "else:\n    from pkg import a\n"  # the branch that runs counts
    assert circles(survey(_tree(tmp_path, files), ("pkg",)).imports) == [["pkg.a", "pkg.b"]]


def test_a_circle_through_a_package_init_and_a_relative_import(tmp_path):
    files = {"pkg/__init__.py": "from pkg.sub.x import X\n", "pkg/sub/__init__.py": "",
             "pkg/sub/x.py": "from .. import helper\nX = 1\n", "pkg/helper.py": ""}
    assert circles(survey(_tree(tmp_path, files), ("pkg",)).imports) == []  # `from .. import helper`: pkg.helper
    files["pkg/sub/x.py"] = "from .. import other\nX = 1\n"  # not a module: the name comes from pkg itself
    assert circles(survey(_tree(tmp_path, files), ("pkg",)).imports) == [["pkg", "pkg.sub.x"]]


def test_a_baselined_circle_may_lose_modules_but_not_gain_them():
    imports = {"a": {"b": "a.py:1"}, "b": {"a": "b.py:1"}, "c": {}}
    assert circle_problems(imports, [["a", "b"]]) == []
    assert circle_problems(imports, [["a", "b", "c"]]) == []
    imports["c"], imports["b"] = {"a": "c.py:3"}, {"a": "b.py:1", "c": "b.py:2"}
    assert circle_problems(imports, [["a", "b"]]) == [
        "import circle grew past its baseline [['a', 'b']]: ['a', 'b', 'c'], "
        "round c -> a (c.py:3); a -> b (a.py:1); b -> c (b.py:2)"]


def test_a_baselined_circle_that_is_broken_must_leave_the_baseline():
    imports = {"a": {"b": "a.py:1"}, "b": {}}
    assert circle_problems(imports, [["a", "b"]]) == [
        "no longer an import circle: ['a', 'b']: remove its baseline entry"]
