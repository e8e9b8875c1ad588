"""The `rcp:` section of a campaign: how its runs become MLCommons RCPs. Torch-free.

    rcp: {benchmark: llama31_8b}               # the name written into the RCP files
    rcp: {submission_runs: 5}                  # N, for a benchmark the checker does not know
    rcp: {submission_runs: 5, override_checker_runs: true}   # another N than the checker's, on purpose
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rcpforge.trainers.contract.submission import SUBMISSION_RUNS


class RcpSpec(BaseModel):
    """How runs become MLCommons RCPs: the benchmark name written into the RCP files and
    the number of runs a submission of it has (N; RCPs need 2N runs). For a benchmark the
    MLCommons checker knows, N is the checker's own unless `override_checker_runs` says
    a different one is meant (its statistics then differ from the checker's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    benchmark: str | None = Field(None, pattern=r"^[A-Za-z0-9_]+$")
    submission_runs: int | None = Field(None, ge=3)
    override_checker_runs: bool = False

    def check_against_checker(self, benchmark: str) -> None:
        """A campaign's N for a benchmark the checker knows is the checker's: another one
        changes every minimum acceptable mean, so it needs saying on purpose."""
        checker = SUBMISSION_RUNS.get(benchmark)
        if self.override_checker_runs and not self.submission_runs:
            raise ValueError(
                "rcp.override_checker_runs: there is no rcp.submission_runs to keep; "
                "set rcp.submission_runs or remove rcp.override_checker_runs"
            )
        if self.override_checker_runs and checker is None:
            raise ValueError(
                f"rcp.override_checker_runs: the MLCommons checker does not know benchmark {benchmark}, so "
                "rcp.submission_runs overrides nothing; remove rcp.override_checker_runs"
            )
        runs = self.submission_runs
        if checker is not None and runs and runs != checker and not self.override_checker_runs:
            raise ValueError(
                f"rcp.submission_runs: the MLCommons checker counts {checker} runs per submission of benchmark "
                f"{benchmark}, not {runs}, and with {runs} every minimum acceptable mean "
                f"and max speedup would differ from the checker's; remove rcp.submission_runs (N = {checker} then), "
                f"or set rcp.override_checker_runs: true to keep {runs} on purpose"
            )
