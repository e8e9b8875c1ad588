"""`make test` runs side by side, and what must not overlap does not: a real pytest-xdist
session over made-up test files shows a file's tests in one worker, every test of the
Slurm clusters in one worker, and the rest spread (tests/helpers/xdist_groups.py). It
also fails where the installed pytest and pytest-xdist stop honouring the groups (pytest
9.2's node ids did that to `--dist loadgroup` in silence)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = textwrap.dedent("""
    import os, pytest

    @pytest.fixture(scope="session")
    def slurm():
        return None

    @pytest.fixture
    def where(request):
        yield
        with open(os.environ["WHERE"], "a") as fh:
            fh.write(f"{request.node.path.name} {os.environ['PYTEST_XDIST_WORKER']}\\n")
""")
PLAIN = "import time\n" + "".join(f"def test_{i}(where):\n    time.sleep(0.05)\n" for i in range(6))
USES_SLURM = "".join(f"def test_{i}(where, slurm):\n    pass\n" for i in range(3))


def test_a_files_tests_and_the_slurm_tests_each_share_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name in ("a", "b", "c", "d"):
        (tmp_path / f"test_plain_{name}.py").write_text(PLAIN)
    for name in ("x", "y"):
        (tmp_path / f"test_slurm_{name}.py").write_text(USES_SLURM)
    where = tmp_path / "where.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WHERE": str(where)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.helpers.xdist_groups", "-n", "3",
                           "--dist", "loadgroup", "--no-loadscope-reorder", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers: dict[str, set[str]] = {}
    for line in where.read_text().split("\n"):
        if line:
            name, worker = line.split()
            workers.setdefault(name, set()).add(worker)
    assert len(workers) == 6 and all(len(w) == 1 for w in workers.values())  # each file in one worker
    assert workers["test_slurm_x.py"] == workers["test_slurm_y.py"]  # the Slurm tests together
    assert len(set().union(*workers.values())) > 1  # and the run did spread


def test_only_the_slurm_cases_of_a_case_by_case_file_join_the_slurm_group():
    from types import SimpleNamespace

    from tests.helpers.xdist_groups import CASE_BY_CASE, group_of_item

    path = CASE_BY_CASE[0]

    def case(kind: str | None, file: str = path) -> SimpleNamespace:
        callspec = None if kind is None else SimpleNamespace(params={"fault_backend": kind})
        return SimpleNamespace(nodeid=f"{file}::test_x" + (f"[{kind}]" if kind else ""), callspec=callspec)

    assert group_of_item(case("slurm"), "slurm") == "slurm"
    assert group_of_item(case("local"), "slurm") == path
    assert group_of_item(case("ray"), "slurm") == path
    assert group_of_item(case(None), "slurm") == path  # a test of the file that takes no backend
    # a file not listed keeps every case in its group: its module fixtures may start Slurm jobs
    other = "tests/cluster/test_tracking_server.py"
    assert group_of_item(case("ray", other), "slurm") == "slurm"
