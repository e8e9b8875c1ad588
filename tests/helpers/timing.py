"""Where the suite's time goes: with RCPF_TEST_TIMING=PATH set, every test process (the
controller and each pytest-xdist worker) appends one JSON line per test to PATH.<worker>:
its wall time (setup, call and teardown), the CPU time its process and reaped children
spent in it, the whole machine's busy CPU seconds while it ran (in a serial run, `-n 0`,
its whole cost: its servers, Slurm jobs, Ray workers and CLI processes too), the services
it used (fixtures) and its worker; and the machine's busy CPU seconds over the session
(from /proc/stat). benchmarks/suite_timing.py sums them per
file and per kind of time. Off unless set: a plain `make test` writes nothing."""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import pytest

SERVICES = ("slurm", "two_node_slurm", "ray_address", "two_node_ray", "mlflow_server", "finished")


def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine since boot (all cores; idle and iowait out)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _out(config: pytest.Config) -> Path | None:
    base = os.environ.get("RCPF_TEST_TIMING")
    if not base:
        return None
    worker = getattr(config, "workerinput", {}).get("workerid", "main")
    return Path(f"{base}.{worker}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    out = _out(item.config)
    if out is None:
        yield
        return
    start, cpu, busy = time.time(), _cpu_s(), machine_busy_s()
    yield
    record = {"test": item.nodeid, "file": item.nodeid.split("::")[0], "start": start,
              "wall_s": time.time() - start, "cpu_s": _cpu_s() - cpu, "machine_busy_s": machine_busy_s() - busy,
              "services": [s for s in SERVICES if s in getattr(item, "fixturenames", ())],
              "group": next((m.args[0] for m in item.iter_markers("xdist_group") if m.args), None),
              "worker": out.suffix.lstrip(".")}
    with open(out, "a") as fh:
        fh.write(json.dumps(record) + "\n")


def pytest_sessionstart(session: pytest.Session) -> None:
    if _out(session.config) is not None:
        session.config._rcpf_session_start = (time.time(), machine_busy_s())  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = _out(session.config)
    started = getattr(session.config, "_rcpf_session_start", None)
    if out is None or started is None or hasattr(session.config, "workerinput"):
        return  # the machine's figures once, from the controller (or the one process)
    wall, busy = time.time() - started[0], machine_busy_s() - started[1]
    Path(f"{os.environ['RCPF_TEST_TIMING']}.session").write_text(json.dumps(
        {"wall_s": wall, "machine_busy_s": busy, "cores": os.cpu_count()}) + "\n")
