"""The `cost:` section of a campaign: what its compute costs in money. Torch-free.

    cost: {usd_per_gpu_hour: {h100: 2.5, default: 2.0}, usd_per_core_hour: 0.05}
    cost: {usd_per_gpu_hour: 2.0}             # one price for every GPU type

A run with GPUs (launch.gpus_per_process > 0) is priced per GPU-hour at the price of
launch.gpu_type (matched without regard to case), else at `default`; a run without GPUs
per CPU core-hour. Prices change no run (they are not in the run key): `status`,
`report` and `plan` show dollars beside the hours they already count. Without a `cost:`
section nothing shows dollars.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator

DEFAULT = "default"


class CostSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    # GPU type (as launch.gpu_type names it) -> US dollars per GPU-hour; `default` for any other
    usd_per_gpu_hour: dict[str, float] | None = None
    usd_per_core_hour: float | None = None

    @field_validator("usd_per_gpu_hour", mode="before")
    @classmethod
    def _one_price(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return {DEFAULT: value}
        return value

    @field_validator("usd_per_gpu_hour")
    @classmethod
    def _gpu_prices(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for gpu, price in (value or {}).items():
            _not_negative(price, f"cost.usd_per_gpu_hour.{gpu}", "GPU-hour")
        return {gpu.lower(): price for gpu, price in value.items()} if value else value

    @field_validator("usd_per_core_hour")
    @classmethod
    def _core_price(cls, value: float | None) -> float | None:
        if value is not None:
            _not_negative(value, "", "CPU core-hour")  # pydantic names this field itself
        return value

    def price(self, gpus_per_process: int, gpu_type: str | None) -> float:
        """US dollars per hour of the campaign's compute unit (GPU- or core-hours)."""
        if not gpus_per_process:
            assert self.usd_per_core_hour is not None  # by `check_cost`
            return self.usd_per_core_hour
        prices = self.usd_per_gpu_hour or {}
        return prices.get((gpu_type or "").lower(), prices[DEFAULT])


def _not_negative(price: float, field: str, unit: str) -> None:
    if price < 0:
        raise ValueError(f"{field + ': ' if field else ''}a price is 0 or more, got {price:g}; "
                         f"write the US dollars per {unit}")


def check_cost(cost: CostSpec | None, info: ValidationInfo) -> CostSpec | None:
    """A price for the campaign's runs: per GPU-hour for its GPU type (or a default) when
    its runs hold GPUs, per core-hour when they do not."""
    launch = info.data.get("launch")
    if cost is None or launch is None:  # no launch: its own error says why
        return cost
    if not launch.gpus_per_process:
        if cost.usd_per_core_hour is None:
            raise ValueError("cost.usd_per_core_hour: the campaign's runs hold no GPUs (launch.gpus_per_process "
                             "is 0), so they are priced per CPU core-hour; add usd_per_core_hour, e.g. 0.05")
        return cost
    prices = cost.usd_per_gpu_hour
    if prices is None:
        raise ValueError("cost.usd_per_gpu_hour: the campaign's runs hold GPUs (launch.gpus_per_process), so they "
                         "are priced per GPU-hour; add usd_per_gpu_hour, e.g. {h100: 2.5, default: 2.0}")
    gpu = launch.gpu_type
    if DEFAULT not in prices and (gpu is None or gpu.lower() not in prices):
        which, add = (f"GPU type {gpu} (launch.gpu_type)", f"{gpu}: <price> or ") if gpu else (
            "runs with no launch.gpu_type", "")
        raise ValueError(f"cost.usd_per_gpu_hour: no price for {which} and no default among {sorted(prices)}; "
                         f"add {add}default: <price>, in US dollars per GPU-hour")
    return cost


# The campaign's field: checked against its `launch:` (declared before it).
PricedCost = Annotated[CostSpec | None, AfterValidator(check_cost)]
