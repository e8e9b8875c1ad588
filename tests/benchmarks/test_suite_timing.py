"""benchmarks/suite_timing.py reads what tests/helpers/timing.py writes: per worker file,
the session's figures, sums per file and kind, and each file's seconds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "suite_timing.py"


def _record(test: str, wall: float, cpu: float, services=(), group=None, worker="gw0") -> str:
    return json.dumps({"test": test, "file": test.split("::")[0], "start": 0.0, "wall_s": wall, "cpu_s": cpu,
                       "services": list(services), "group": group, "worker": worker}) + "\n"


def test_sums_per_file_kind_and_group(tmp_path):
    base = tmp_path / "t.jsonl"
    Path(f"{base}.gw0").write_text(_record("tests/a.py::x", 10, 9, group="tests/a.py")
                                   + _record("tests/a.py::y", 2, 0.1, group="tests/a.py"))
    Path(f"{base}.gw1").write_text(_record("tests/s.py::z", 30, 1, services=["slurm"], group="slurm", worker="gw1"))
    Path(f"{base}.session").write_text(json.dumps({"wall_s": 40, "machine_busy_s": 60, "cores": 2}))
    durations = tmp_path / "durations.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(base), "--write-durations", str(durations)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "3 tests, 42 s of test wall time" in proc.stdout
    assert "busy 60 s of 80 s (75%)" in proc.stdout
    assert "computing 10 s wall" in proc.stdout and "services 30 s wall" in proc.stdout
    assert "waiting 2 s wall" in proc.stdout
    assert json.loads(durations.read_text()) == {"tests/s.py": 30.0, "tests/a.py": 12.0}


def test_no_records_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "none")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"error: no timing records at {tmp_path / 'none'}.*: run the tests with RCPF_TEST_TIMING={tmp_path / 'none'}"]


def test_a_serial_runs_files_are_listed_by_what_they_kept_the_machine_busy_with(tmp_path):
    base = tmp_path / "t.jsonl"
    lines = [json.loads(_record("tests/a.py::x", 10, 1)), json.loads(_record("tests/b.py::y", 5, 1))]
    lines[0]["machine_busy_s"], lines[1]["machine_busy_s"] = 4.0, 12.0  # b's subprocesses did the work
    Path(f"{base}.main").write_text("".join(json.dumps(r) + "\n" for r in lines))
    proc = subprocess.run([sys.executable, str(SCRIPT), str(base)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    listing = proc.stdout.split("kept the machine busiest (16 s in all; busy CPU s, share):\n")[1].splitlines()
    assert listing == ["     12.0 75.0%  tests/b.py", "      4.0 25.0%  tests/a.py"]
