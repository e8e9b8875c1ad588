"""`python -m orchestrator.cli`: the `rcpforge` command."""

from orchestrator.cli import main

main()
