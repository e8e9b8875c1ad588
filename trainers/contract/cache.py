"""Where rcpforge keeps what it makes once per user and reuses: $XDG_CACHE_HOME/rcpforge,
else ~/.cache/rcpforge (the CPU quantizer's builds, the blank tracking store)."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache(part: str) -> Path:
    """The cache folder of one kind of thing (not made here)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rcpforge" / part
