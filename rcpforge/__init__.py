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

from typing import TYPE_CHECKING, Any

from rcpforge.campaign import Campaign, load
from rcpforge.errors import RcpforgeError
from rcpforge.submissions import Round, check, round

if TYPE_CHECKING:
    from analysis.check import CheckResult

__all__ = ["Campaign", "CheckResult", "RcpforgeError", "Round", "check", "load", "round"]


def __getattr__(name: str) -> Any:
    # CheckResult on first use: its module loads scipy (a second), which `import rcpforge` should not wait for
    if name == "CheckResult":
        from analysis.check import CheckResult

        return CheckResult
    raise AttributeError(f"module 'rcpforge' has no attribute {name!r}")
