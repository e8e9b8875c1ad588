"""The backend tests' clusters (`slurm`, `ray_address`) are session fixtures of
`tests/conftest.py`, shared with the conformance suites."""
