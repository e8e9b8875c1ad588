"""`rcpforge status --watch` on a campaign that runs: the real CLI in a pseudo-terminal
(the live table) and through a pipe (plain lines), the local backend, a real SQLite
store, and an instant command trainer whose runs hold at their last eval until the test
lets them finish (tests/helpers/paced_program.py), so what is seen before and after is
fixed by events, not by timing. The campaign's `cost:` prices its core-hours."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest
import yaml

from tests.cluster.helpers import paced_campaign
from tests.conftest import ROOT
from tests.helpers.campaigns import write_campaign
from tests.helpers.cli import invoke, one_line_usage_error
from tests.helpers.store import run_statuses

PRICE = 0.05  # US dollars per core-hour
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\r")
PLAIN = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ campaign=tiny runs=(\d+) pending=(\d+) running=(\d+) "
                   r"converged=(\d+) not_converged=0 diverged=0 failed=0 core_hours=(\S+) cost_usd=(\S+) "
                   r"runs_to_do=(\d+) eta_s=(\S+)$")


def _cli(*args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250", "TERM": "xterm"}
    return subprocess.Popen([sys.executable, "-m", "rcpforge.orchestrator.cli", *args], cwd=ROOT, env=env, **popen)


class Terminal:
    """A command in a pseudo-terminal 250 columns wide; what it drew, escapes removed."""

    def __init__(self, *args: str):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 250, 0, 0))
        self.proc = _cli(*args, stdin=slave, stdout=slave, stderr=slave)
        os.close(slave)
        self.seen = ""

    def read_until(self, pattern: str, limit_s: float = 120) -> int:
        """Read until `pattern` appears after what was read before; its position."""
        start, deadline = len(self.seen), time.monotonic() + limit_s  # a safety limit, not a measurement
        while (found := re.search(pattern, self.seen[start:])) is None:
            assert time.monotonic() < deadline and self._read(), f"no {pattern!r} in:\n{self.seen[-3000:]}"
        return start + found.start()

    def _read(self) -> bool:
        if not select.select([self.master], [], [], 1.0)[0]:
            return self.proc.poll() is None
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # the command ended and closed its side
            return False
        self.seen += ANSI.sub("", chunk.decode(errors="replace"))
        return bool(chunk)

    def finish(self) -> int:
        while self._read():
            pass
        os.close(self.master)
        return self.proc.wait(timeout=60)


def _row(counts: str) -> str:
    """A table row of bf16 at some batch size: runs, pending, running, converged."""
    return r"│ bf16\s+│ \d+\s+│ " + r"\s+│ ".join(counts.split()) + r"\s+│"


@pytest.fixture
def held(tmp_path):
    """A two-run campaign launched in the background whose runs hold at their last eval
    until the file `hold` exists; the campaign file, the hold file and the launcher."""
    hold = tmp_path / "hold"
    data = paced_campaign({"kind": "local", "workers": 2}, evals=3, sleep=0.05)
    data["trainer"]["argv"].append(str(hold))
    data["cost"] = {"usd_per_core_hour": PRICE}
    path = write_campaign(tmp_path, data)
    runner = _cli("run", str(path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not run_statuses(tmp_path / "rcpforge-mlflow.db"):  # until the store holds the campaign
        assert runner.poll() is None and time.monotonic() < deadline, "the campaign did not start"
        time.sleep(0.2)
    yield path, hold, runner
    if runner.poll() is None:
        runner.kill()
    runner.wait()


def test_watch_shows_runs_go_from_running_to_converged_then_exits(held):
    """On a terminal, the live table until the campaign is done, exit 0. Through a pipe,
    plain lines; the piped watcher reads a file asking for a second seed that nothing
    runs, so its runs to do never end and only Ctrl-C (SIGINT) stops it, with exit 0."""
    path, hold, runner = held
    more = yaml.safe_load(path.read_text())
    more["seeds"] = 2
    wider = write_campaign(path.parent, more, filename="wider.yaml")
    live = Terminal("status", str(path), "--watch", "--interval", "0.5")
    piped = _cli("status", str(wider), "--watch", "--interval", "0.5", stdout=subprocess.PIPE, text=True)
    # the live table: both runs running, each at its latest eval (2 of 3: 0.6667)
    running = live.read_until(_row("1 0 1 0"))
    for bs in (16, 64):
        live.read_until(rf"bf16-bs{bs}-s0: eval_accuracy 0\.6667 at [\d,]+ tokens")
    lines = [piped.stdout.readline()]  # the piped watcher too has seen both runs running
    while " running=2 " not in lines[-1]:
        lines.append(piped.stdout.readline())
        assert lines[-1], lines
    hold.touch()  # let the runs finish
    converged = live.read_until(_row("1 0 0 1"))
    done = live.read_until("campaign tiny: no run left to do")
    assert live.finish() == 0
    assert running < converged < done
    final = live.seen[[m.start() for m in re.finditer(r" campaign tiny\s*\n┏", live.seen)][-1]:]
    assert len(re.findall(_row("1 0 0 1"), final)) == 2 and "0 runs to do" in final
    assert runner.wait(timeout=120) == 0

    while " converged=2 " not in lines[-1]:
        lines.append(piped.stdout.readline())
        assert lines[-1], lines
    piped.send_signal(signal.SIGINT)
    lines += piped.stdout.read().splitlines()
    assert piped.wait(timeout=60) == 0
    assert lines[-1] == "stopped watching; 2 runs still to do", lines
    fields = [PLAIN.match(line.rstrip("\n")) for line in lines[:-1]]
    assert all(fields), lines  # one plain line per refresh, in one format
    running_line = next(f for f in fields if f.group(3) == "2")
    last = fields[-1]
    # runs, pending, running, converged, runs to do: the two running, then done
    assert [running_line.group(i) for i in (1, 2, 3, 4, 7)] == ["4", "2", "2", "0", "4"], lines
    assert [last.group(i) for i in (1, 2, 3, 4, 7)] == ["4", "2", "0", "2", "2"], lines[-2]
    # what the runs cost: their core-hours at the price
    assert float(last.group(6)) == pytest.approx(float(last.group(5)) * PRICE, rel=1e-5)


def test_watch_answers_bad_input_in_one_line(tmp_path):
    data = paced_campaign({"kind": "local", "workers": 1})
    path = write_campaign(tmp_path, data)
    one_line_usage_error(invoke("status", str(path), "--watch"), "no runs of campaign tiny at",
                         "(no such store yet)", f"`rcpforge run {path}` first")
    assert not (tmp_path / "rcpforge-mlflow.db").exists()
    one_line_usage_error(invoke("status", str(path), "--watch", "--interval", "0"), "--interval", "more than 0")
    one_line_usage_error(invoke("status", str(path), "--watch", "--json"), "--watch and --json")
