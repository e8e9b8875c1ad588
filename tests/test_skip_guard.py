"""In CI a skip whose reason is not on tests/allowed_skips.txt fails the session
(tests/helpers/skip_guard.py): shown on a deliberately skipping test run by a real pytest
in a subprocess, with the guard loaded as the suite loads it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT
from tests.helpers.skip_guard import ALLOWLIST, allowed_patterns

TESTS = '''
import pytest

def test_runs():
    pass

@pytest.mark.skipif(True, reason="needs a CUDA device of compute capability 9.0 or more")
def test_on_a_gpu():
    pass

def test_without_its_data():
    pytest.skip("the round data is not here")
'''


def _pytest(folder, *, ci: bool, keep: str | None = None) -> subprocess.CompletedProcess:
    text = TESTS if keep is None else TESTS.split("\ndef test_without_its_data")[0]
    (folder / "test_sample.py").write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PYTHONPATH=str(ROOT), **({"CI": "1"} if ci else {}))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                           "tests.helpers.skip_guard", "test_sample.py"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def test_in_ci_a_skip_not_on_the_allowlist_fails_the_session_and_is_named(tmp_path):
    proc = _pytest(tmp_path, ci=True)
    assert proc.returncode == 1, proc.stdout
    assert "test_sample.py::test_without_its_data: the round data is not here" in proc.stdout
    assert "test_on_a_gpu" not in proc.stdout.split("skips that CI does not allow")[1]  # allowed
    assert "1 passed, 2 skipped" in proc.stdout


def test_allowed_skips_pass_in_ci_and_any_skip_passes_outside_ci(tmp_path):
    allowed_only = _pytest(tmp_path, ci=True, keep="allowed")
    assert allowed_only.returncode == 0, allowed_only.stdout
    outside = _pytest(tmp_path, ci=False)
    assert outside.returncode == 0, outside.stdout
    assert "does not allow" not in outside.stdout


def test_the_allowlist_lets_through_only_reasons_that_hold_on_every_ci_machine():
    patterns = allowed_patterns(ALLOWLIST)
    allowed = ["needs a CUDA device of compute capability 9.0 or more",
               "about a minute; its parts run in smaller tests; set RCPFORGE_SLOW_SLURM=1 to run it"]
    refused = ["no Slurm here (sbatch not on PATH): start it with `make slurm-two-node-up`",
               "the shared round v5.0.tar is not here (set RCPFORGE_ROUND_TAR)",
               "torch._scaled_mm unavailable on this CPU build: boom",
               "chromium is not installed (apt-get install chromium)"]
    assert all(any(p.search(r) for p in patterns) for r in allowed)
    assert not any(p.search(r) for r in refused for p in patterns)
