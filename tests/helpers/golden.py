"""Golden files: text a test produces, compared byte for byte with a committed file.

On a mismatch the test fails with the diff. When the change is meant, run the test again
with RCPF_REGENERATE_GOLDEN=1: it rewrites the file and still fails, saying so, so a
rewrite is never a silent pass; review the file's `git diff` and commit it.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

REGENERATE = "RCPF_REGENERATE_GOLDEN"


def assert_matches_golden(path: Path, text: str, test_file: str) -> None:
    """`text` is `path`'s content, byte for byte; `test_file` names the test to run again."""
    wanted = path.read_bytes() if path.exists() else None
    got = text.encode()
    if got == wanted:
        return
    if os.environ.get(REGENERATE) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(got)
        pytest.fail(f"rewrote {path} ({REGENERATE}=1): review `git diff {path}`, commit it, and run "
                    f"the test again without {REGENERATE}")
    how = f"if the change is meant: {REGENERATE}=1 python -m pytest {test_file}, then review and commit the file"
    if wanted is None:
        pytest.fail(f"no golden file {path}; {how}")
    diff = difflib.unified_diff(wanted.decode(errors="replace").splitlines(keepends=True),
                                text.splitlines(keepends=True), f"{path} (golden)", "produced now")
    pytest.fail(f"{path} differs from what the test produced:\n{''.join(diff)}\n{how}")
