"""The suite's `rcpforge` commands fork from one process that has already imported the
libraries every command imports (MLflow, SQLAlchemy, pandas, scipy, pyarrow, typer...).

A command in a fresh interpreter spends about 2 s of CPU importing them before it does
anything; the suite runs some 150 commands, on 2 cores. Here a server, one per test
process, imports those libraries once, single-threaded, and forks a child per command;
the child takes the command's environment, folder, arguments and output files, puts the
folder first on sys.path as `python -m` does, and runs `rcpforge.orchestrator.cli` as
`__main__`. rcpforge's own modules are not preloaded: each command imports them afresh,
reading its environment, as a real one does. The exit status is the child's, as
`subprocess.run` reports it.

The local backend's workers fork from multiprocessing's fork server, which each real
command starts for itself and which spends some 3 s of CPU importing MLflow before its
first worker (about 50 commands of the suite run local campaigns). This server starts one
such fork server, with the same third-party preload and no rcpforge module, and its
children use it as a command's own; each worker still takes the command's folder,
sys.path and environment, and imports rcpforge's modules afresh, as with its own server.

What a fork cannot show stays with a real process: the tests that signal a command
(`start_cli`), the installed wheel's console script (tests/test_wheel.py), and any
`run_cli(..., fresh=True)`; RCPF_TEST_CLI_FORK=0 runs every command as a fresh process.

The protocol, one Unix-socket connection per command: the client sends one JSON line
(argv, env, cwd, stdout and stderr paths); the server answers `pid <n>` when the child
has started and `exit <code>` when it ended (negative: the signal that killed it)."""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# What every command imports before doing anything (measured with python -X importtime):
# third-party only, imported in the order the CLI does.
PRELOAD = (
    "numpy", "pandas", "pyarrow", "pydantic", "typer", "rich", "yaml", "sqlalchemy", "alembic",
    "scipy.stats", "mlflow", "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store",
)
MODULE = "rcpforge.orchestrator.cli"
# What the local backend's fork server imports for every run (rcpforge's
# `_start_local_workers_server`), third-party only: MLflow, and the tiny LM's torch.
WORKER_PRELOAD = ("mlflow", "mlflow.store.tracking.sqlalchemy_store", "torch")


def _start_worker_server() -> None:
    """The fork server every command's local workers come from (see the module's doc)."""
    import multiprocessing
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(list(WORKER_PRELOAD))
    forkserver.ensure_running()


def _share_worker_server() -> None:
    """In a command: use this server's fork server as the command's own. multiprocessing
    checks that its fork server lives with waitpid, which only its parent may call: here
    its liveness shows instead as the refusal of a connection, as for any other user."""
    from multiprocessing import forkserver, resource_tracker

    def ensure_running() -> None:
        resource_tracker.ensure_running()

    forkserver._forkserver.ensure_running = ensure_running  # type: ignore[method-assign]  # noqa: SLF001
    forkserver.ensure_running = ensure_running


def _run_command(request: dict) -> None:
    """In the forked child: become the command, then end as it ends."""
    code = 1
    try:
        _share_worker_server()
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.path[0] = os.getcwd()  # as `python -m` sets it: the user's folder first
        importlib.invalidate_caches()  # folders may have changed since the server started
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, fd)
            os.close(out)
        import numpy

        # A fresh process draws fresh seeds; a fork would repeat the server's numpy draws
        # (Python's `random` reseeds itself in a forked child).
        numpy.random.seed()
        import runpy

        sys.argv = ["rcpforge", *request["args"]]
        runpy.run_module(request.get("module", MODULE), run_name="__main__", alter_sys=True)  # the CLI ends in os._exit
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for flush in (sys.stdout.flush, sys.stderr.flush):
            with contextlib.suppress(OSError, ValueError):  # a stream already closed
                flush()
        os._exit(code)


def serve(socket_path: str) -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    _start_worker_server()
    # forking is only safe while this process has one thread
    assert threading.active_count() == 1, threading.enumerate()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(16)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    waiting: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([listener, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            while waiting:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                conn = waiting.pop(pid, None)
                if conn is not None:
                    _answer(conn, f"exit {os.waitstatus_to_exitcode(status)}")
                    conn.close()
        if listener in ready:
            conn, _ = listener.accept()
            request = json.loads(conn.makefile("r").readline())
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for held in (listener, conn, *waiting.values()):
                    held.close()
                os.close(wake_r)
                os.close(wake_w)
                _run_command(request)
            waiting[pid] = conn
            _answer(conn, f"pid {pid}")


def _answer(conn: socket.socket, line: str) -> None:
    try:
        conn.sendall((line + "\n").encode())
    except OSError:
        pass  # the client gave up on it (its timeout)


class CliServer:
    """The client side, in a test process: starts the server on first use."""

    def __init__(self, root: Path) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="rcpf-cli-"))
        self.socket_path = str(self.folder / "cli.sock")
        env = {**os.environ, "PYTHONPATH": str(root)}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.cli_server", self.socket_path], cwd=root,
                                     env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        first = self.proc.stdout.readline()
        if first.strip() != "ready":
            raise RuntimeError(f"the CLI fork server did not start (exit {self.proc.wait()})")
        self.count = 0
        atexit.register(self.stop)

    def run(self, args: tuple[str, ...], env: dict[str, str], cwd: Path, timeout: float,
            module: str = MODULE) -> subprocess.CompletedProcess:
        """`python -m module *args`, forked; `module` other than the CLI: for this
        server's own tests."""
        self.count += 1
        out, err = self.folder / f"{self.count}.out", self.folder / f"{self.count}.err"
        request = {"args": list(args), "env": env, "cwd": str(cwd), "stdout": str(out), "stderr": str(err),
                   "module": module}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.socket_path)
            conn.sendall((json.dumps(request) + "\n").encode())
            answers = conn.makefile("r")
            pid = int(answers.readline().split()[1])
            conn.settimeout(timeout)
            try:
                line = answers.readline()
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(["rcpforge", *args], timeout) from None
        if not line.startswith("exit "):
            raise RuntimeError(f"the CLI fork server ended during `rcpforge {' '.join(args)}`")
        try:
            stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
        finally:
            out.unlink(missing_ok=True)
            err.unlink(missing_ok=True)
        return subprocess.CompletedProcess(["rcpforge", *args], int(line.split()[1]), stdout, stderr)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        subprocess.run(["rm", "-rf", str(self.folder)], check=False)


if __name__ == "__main__":
    serve(sys.argv[1])
