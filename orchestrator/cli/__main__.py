"""`python -m rcpforge.orchestrator.cli`: the `rcpforge` command."""

from rcpforge.orchestrator.cli import main

main()
