"""rcpforge's Python API: the analysis of campaigns, submissions and rounds, the numbers
`rcpforge analyze`, `check` and `round` print and write, from the same code.

    import rcpforge

    campaign = rcpforge.load("campaign.yaml")      # or load(tracking_uri=..., campaign=...)
    campaign.runs()                                # pandas DataFrame, one row per run
    campaign.rcp_table()                           # the RCP table
    campaign.factors(reference="bf16")             # convergence factors with intervals
    campaign.selection_risk()                      # what M-of-N selection is worth
    rcpforge.check("results/bf16/bs16", rcps="rcps.json")
    rcpforge.round("round-root", rcps="5.0.0")

The names in `__all__` are the public API; every other module of rcpforge is internal.
Importing rcpforge loads neither torch nor MLflow: they load, where needed, on first use.
docs/analysts.md walks through it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rcpforge.analysis.check import CheckResult
    from rcpforge.campaign import Campaign, load
    from rcpforge.errors import RcpforgeError
    from rcpforge.submissions import Round, check, round

__all__ = ["Campaign", "CheckResult", "RcpforgeError", "Round", "check", "load", "round"]

# Every public name loads on first use: this module runs before every internal import
# (`import rcpforge.trainers.tinylm` runs it first), so it must load nothing itself; and
# CheckResult's module loads scipy (a second), which `import rcpforge` should not wait for.
_HOMES = {
    "Campaign": "rcpforge.campaign",
    "load": "rcpforge.campaign",
    "RcpforgeError": "rcpforge.errors",
    "Round": "rcpforge.submissions",
    "check": "rcpforge.submissions",
    "round": "rcpforge.submissions",
    "CheckResult": "rcpforge.analysis.check",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rcpforge' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup finds it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
