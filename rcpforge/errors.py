"""The one error the API raises for bad input."""

from __future__ import annotations


class RcpforgeError(ValueError):
    """Bad input to the API (a campaign file that does not validate, a store without the
    campaign, an RCP source that is neither a file nor a ruleset): one line that names
    the setting, as the command line spells it, and the fix. `rcpforge`'s commands print
    the same line and exit 2."""
