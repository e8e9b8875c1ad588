"""Numeric telemetry of one run, summarized per eval: for each GEMM operand class (x, w,
dy) the fraction of values saturated and flushed to zero, and for `mor` the fraction of
tensors (or blocks) kept in FP8, overall and per layer. Counting costs a few elementwise
passes, so it runs only on the steps the trainer marks `active`."""

from __future__ import annotations

from collections import defaultdict

import torch

from rcpforge.trainers.precision.quantized import Counts

PREFIX = "telemetry."


class Telemetry:
    def __init__(self) -> None:
        self.active = False
        self._reset()

    def _reset(self) -> None:
        self._sat: dict[str, torch.Tensor | int] = defaultdict(int)
        self._flush: dict[str, torch.Tensor | int] = defaultdict(int)
        self._total: dict[str, int] = defaultdict(int)
        self._mor: dict[str, list] = defaultdict(lambda: [0, 0])

    def add(self, operand: str, counts: Counts | None) -> None:
        if counts is None:
            return
        self._sat[operand] = self._sat[operand] + counts.saturated
        self._flush[operand] = self._flush[operand] + counts.flushed
        self._total[operand] += counts.total

    def add_mor(self, layer: str, kept: torch.Tensor | int, units: int) -> None:
        entry = self._mor[layer]
        entry[0] = entry[0] + kept
        entry[1] += units

    def summary(self) -> dict[str, float]:
        """The metrics since the last summary (then starts over)."""
        out: dict[str, float] = {}
        for op, total in sorted(self._total.items()):
            out[f"{PREFIX}{op}.saturated_frac"] = float(self._sat[op]) / total
            out[f"{PREFIX}{op}.flushed_frac"] = float(self._flush[op]) / total
        if self._mor:
            kept = sum(float(k) for k, _ in self._mor.values())
            units = sum(u for _, u in self._mor.values())
            out[f"{PREFIX}mor.fp8_frac"] = kept / units
            for layer, (k, u) in sorted(self._mor.items()):
                out[f"{PREFIX}mor.fp8_frac.{layer}"] = float(k) / u
        self._reset()
        return out
