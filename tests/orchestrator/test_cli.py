from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

HEAVY = ("torch", "mlflow", "ray", "optuna", "submitit", "scipy", "matplotlib")


def test_the_command_line_loads_without_heavy_imports():
    # `rcpforge --help` and every command's argument parsing stay fast: the heavy
    # libraries are imported inside the commands that need them
    code = f"import sys, rcpforge.orchestrator.cli; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == ""


def test_help_lists_every_command(cli):
    proc = cli("--help")
    assert proc.returncode == 0
    for command in ("run", "analyze", "export", "check", "rcp-stats", "import", "report", "recipes", "tune"):
        assert f" {command} " in proc.stdout


def test_the_synopses_of_docs_commands_list_every_command_and_flag():
    """The Synopsis block of docs/commands.md: each command's synopsis (its line and the
    indented lines after it) names every flag the command takes."""
    from typer.main import get_command

    from rcpforge.orchestrator.cli import app

    block = (ROOT / "docs" / "commands.md").read_text().split("## Synopsis", 1)[1].split("```", 2)[1]
    synopses: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        if line.startswith("rcpforge "):
            current = line.split()[1]
        if current:
            synopses[current] = synopses.get(current, "") + line.split("#")[0] + "\n"
    for name, command in get_command(app).commands.items():
        assert name in synopses, f"docs/commands.md Synopsis lacks `rcpforge {name}`"
        flags = [opt for param in command.params for opt in param.opts if opt.startswith("--") and opt != "--help"]
        missing = [flag for flag in flags if flag not in synopses[name]]
        assert not missing, f"docs/commands.md synopsis of `rcpforge {name}` lacks {missing}"


_ENDING = """
import atexit, sys, threading, time
from rcpforge.orchestrator.cli import main

class _Teardown:
    def __del__(self):
        print("module teardown", flush=True)

kept = _Teardown()  # freed only by the interpreter's teardown of this module
atexit.register(lambda: print("atexit ran", flush=True))
threading.Thread(target=lambda: (time.sleep(0.5), print("thread joined", flush=True))).start()
sys.argv = ["rcpforge", *sys.argv[1:]]
main()
"""


def test_a_command_ends_as_python_would_but_without_the_teardown_of_its_modules(tmp_path):
    """The command line skips only the interpreter's teardown of the loaded modules (a
    second of CPU a command): threads are joined, atexit handlers run (Ray's shutdown is
    one), the output is flushed and the exit code kept."""
    def ending(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _ENDING, *args], cwd=tmp_path, capture_output=True, text=True,
                              env={"PYTHONPATH": str(ROOT)}, timeout=120)

    helped = ending("--help")
    assert helped.returncode == 0 and "Usage: rcpforge" in helped.stdout
    assert helped.stdout.rstrip().endswith("thread joined\natexit ran"), helped.stdout[-200:]
    assert "module teardown" not in helped.stdout
    refused = ending("status", "missing.yaml")
    assert refused.returncode == 2 and "missing.yaml" in refused.stderr and "atexit ran" in refused.stdout
