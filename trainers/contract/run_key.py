"""What enters a run key: the one rule that keeps run keys stable as rcpforge grows.

A run key (`RunSpec.run_key`) is a hash of everything that decides a run's result, so a
resumed campaign does each run once. Growing must not move the keys of runs already in a
ledger, so:

- a setting added after the key format existed enters only when off its default
  (`keyed`): a campaign that never sets it keeps the key it had before it existed;
- a numerics revision enters only above its first (`revision_entries`): what was never
  revised keeps its key, what was revised gets a new one, once;
- what entered before stays as it was: a setting that was part of the key from the start
  is never listed as added later, even where it holds a default.

The lists of what was added later, and with which default, stay beside what they
describe (`RunSpec`'s own fields in trainers/contract/run.py, every recipe's options in
trainers/recipes/options.py, a written recipe's in trainers/recipes/written.py, each
trainer's settings); this module applies them. Plain Python: the contract imports it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

# Bump when the meaning of a RunSpec field changes, so old ledgers are not reused.
RUN_KEY_VERSION = 1
# A revision's first number: the numerics as they were when the key format existed.
FIRST_REVISION = 1


def keyed(data: Mapping[str, Any], added_later: Mapping[str, Any]) -> dict[str, Any]:
    """`data` as it enters a run key: less each setting of `added_later` (name -> its
    default) while it holds that default; everything else as it is, in its order."""
    return {k: v for k, v in data.items() if k not in added_later or v != added_later[k]}


def revision_entries(**revisions: int) -> dict[str, int]:
    """The run key's entries `_<what>_revision` of the numerics revisions given (e.g.
    `recipe=2, trainer=1`), each only above its first."""
    return {f"_{what}_revision": revision for what, revision in revisions.items() if revision > FIRST_REVISION}


def digest(decisive: Mapping[str, Any]) -> str:
    """The run key of what decides a run's result (JSON-able, keys sorted): a stable hash
    that carries the key format's version."""
    blob = json.dumps({**decisive, "_version": RUN_KEY_VERSION}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:24]
