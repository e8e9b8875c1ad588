"""How the suite runs side by side (`make test TEST_WORKERS=N`: pytest-xdist, `--dist loadgroup`).

Every test gets an `xdist_group`, and pytest-xdist runs a group's tests in one worker, one
after another:
- the tests of one file form one group, so a module's fixtures (a campaign run once for
  the whole file) are set up once, as in a plain run;
- the tests that use the one-node or the two-node dev Slurm form one group, `slurm`:
  those clusters are shared by the whole machine, and their tests count the queue, fill
  the node, preempt and requeue jobs, which no other test's jobs may be in the way of;
- the tests of the limits cluster (its own controller and node, limits enforced) form
  `slurm-limits`;
- the tests of the two-node Ray cluster (two `ray start` processes on this machine) go
  with `slurm`: a file there uses it too, and a session-wide cluster started in two
  workers would cost twice its start and idle CPU.
Each worker has its own temporary folders (pytest's per-worker base), its own one-node
Ray (`ray_address`), its own PostgreSQL-backed MLflow server (`mlflow_server`), on ports
held until used (`rcpforge.cluster.gang.free_port`).

The groups then go out longest first (pytest-xdist hands out groups in the order their
first test was collected, with `--no-loadscope-reorder`): tests/durations.json holds each
file's seconds as measured (benchmarks/suite_timing.py writes it, from a serial run or a
side-by-side one) and a group's are its files', so the long Slurm group does not start
last and hold the run up alone. A file it does not know (a new one) counts as DEFAULT_S."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
DEFAULT_S = 5.0
SLURM_FIXTURES = {"slurm", "two_node_slurm", "two_node_slurm_conf"}
# The limits cluster has its own controller and node: its tests run beside the others.
# The two-node Ray goes with the Slurm tests: a file of the Slurm group uses it too
# (test_gangs_across_backends), and one worker then starts one such cluster, not two.
SERVICE_GROUPS = (("slurm-limits", {"limits_slurm", "limits_slurm_conf"}), ("slurm", SLURM_FIXTURES | {"two_node_ray"}))


# A test can reach a cluster without naming its fixture: `request.getfixturevalue`, the
# conformance suites' `with_service`, a campaign of `kind: slurm` run through the CLI.
# The file's source says so.
SLURM_SOURCE = re.compile(r"""["']kind["']:\s*["']slurm["']|getfixturevalue\(["']slurm["']\)"""
                          r"""|with_service\(|slurm_ready\(""")


def group_of_files(items: list[pytest.Item]) -> dict[str, str]:
    """Each test file's group: a service's group where any of its tests uses the service
    (by fixture, or for Slurm by the file's source), else the file itself."""
    used: dict[str, set[str]] = {}
    sources: dict[str, Path] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        used.setdefault(path, set()).update(getattr(item, "fixturenames", ()))
        sources[path] = Path(item.path)
    groups = {}
    for path, fixtures in used.items():
        if sources[path].suffix == ".py" and SLURM_SOURCE.search(sources[path].read_text()):
            fixtures = fixtures | {"slurm"}
        groups[path] = next((name for name, wanted in SERVICE_GROUPS if fixtures & wanted), path)
    return groups


# Files whose backend comes from a function-scoped parameter (local, ray, slurm) and that
# start no cluster in a module or session fixture: only their `slurm` cases need the one
# dev Slurm; their other cases run as the file's own group, beside the Slurm group.
CASE_BY_CASE = ("tests/conformance/test_backend_faults.py", "tests/conformance/test_backends.py",
                "tests/orchestrator/test_secrets.py")


def group_of_item(item: pytest.Item, file_group: str) -> str:
    """The test's group: its file's, but for a non-Slurm case of a CASE_BY_CASE file."""
    path = item.nodeid.split("::")[0]
    if file_group != "slurm" or path not in CASE_BY_CASE:
        return file_group
    callspec = getattr(item, "callspec", None)
    return "slurm" if callspec is not None and "slurm" in callspec.params.values() else path


def expected_seconds(path: Path = DURATIONS) -> dict[str, float]:
    return json.loads(path.read_text()) if path.exists() else {}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):
        return  # set in a worker of `--dist loadgroup`; a plain run keeps pytest's order
    groups = group_of_files(items)
    seconds = expected_seconds()
    of_item = {item.nodeid: group_of_item(item, groups[item.nodeid.split("::")[0]]) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(of_item[item.nodeid]))
    # longest group first (a file split case by case counts whole in each of its groups);
    # a group's tests keep their order (a stable sort)
    order: dict[str, float] = {}
    for path, group in {(item.nodeid.split("::")[0], of_item[item.nodeid]) for item in items}:
        order[group] = order.get(group, 0.0) - seconds.get(path, DEFAULT_S)
    items.sort(key=lambda item: order[of_item[item.nodeid]])
