"""The `adaptive:` section of a campaign file: the question a campaign asks instead of a
seed count. The orchestrator (`orchestrator/adaptive.py`) runs seeds step by step and
stops each cell once the question is answered for it.

    adaptive:
      reference: bf16          # what every other recipe is compared with (default: the first)
      min_seeds: 5             # runs per cell before the first look
      step: 3                  # runs a cell gets at a look that extends it
      max_seeds: 20            # per cell (default: 2N, the runs of an RCP)
      confidence: 0.95         # of every reported interval, over all looks together
      margin: 1.02             # a verdict: is the factor above or below 1.02?
      half_width: 0.03         # a precision: the factor to within +-3%
      equivalence: 0.03        # an equivalence: the factor within [1/1.03, 1.03] ("as fast, within 3%")
      futility: true           # stop a comparison no goal can be reached for within max_seeds
      require: first           # with both goals: stop at the first met (first) or at both (all)
      spending: calibrated     # how the error is spent over the looks (or obrien_fleming, pocock)
      cost_cap: {tokens: 2.0e12, gpu_hours: 5000}   # the whole campaign's; either or both

`seeds:` keeps its meaning, a fixed design; a campaign has one or the other.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CostCap(_Strict):
    """Spent by every run with an outcome, in tokens trained times ranks (reproducible:
    the same outcomes give the same cost) or in GPU-hours as recorded."""

    tokens: float | None = Field(default=None, gt=0)
    gpu_hours: float | None = Field(default=None, gt=0)


class AdaptiveSpec(_Strict):
    reference: str | None = None
    min_seeds: int = Field(5, ge=3)
    step: int = Field(3, ge=1)
    max_seeds: int | None = Field(None, ge=3)
    confidence: float = Field(0.95, gt=0.5, lt=1)
    margin: float | None = Field(None, gt=0)
    half_width: float | None = Field(None, gt=0, lt=1)
    equivalence: float | None = Field(None, gt=0, lt=1)
    futility: bool = False
    require: Literal["first", "all"] = "first"
    spending: Literal["obrien_fleming", "pocock", "calibrated"] = "obrien_fleming"
    cost_cap: CostCap = CostCap()  # frozen: one shared default is safe

    @model_validator(mode="after")
    def _consistent(self) -> AdaptiveSpec:
        if self.margin is None and self.half_width is None and self.equivalence is None:
            raise ValueError(
                "the question is missing; set margin (a verdict: is the factor above or below it, "
                "e.g. 1.02), half_width (a precision, e.g. 0.03 for +-3%), equivalence (within the "
                "reference's +-3%: 0.03), or several")
        if self.max_seeds is not None and self.max_seeds < self.min_seeds:
            raise ValueError(f"max_seeds {self.max_seeds} is below min_seeds {self.min_seeds}; "
                             f"raise max_seeds or lower min_seeds")
        if self.require == "all" and (self.margin is None or self.half_width is None):
            raise ValueError("require: all needs both goals, margin and half_width; set both or remove require")
        if self.require == "all" and self.equivalence is not None:
            raise ValueError("require: all asks for a verdict and a precision; equivalence is an answer of its "
                             "own, so remove require or equivalence")
        return self

    def seeds_cap(self, submission_runs: int) -> int:
        return self.max_seeds if self.max_seeds is not None else max(self.min_seeds, 2 * submission_runs)
