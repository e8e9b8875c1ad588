"""One model of a campaign with a model axis (docs/models.md), analysed as a campaign of
its own: its runs, its analysis request (its benchmark `<benchmark>_<model>`, its
hyperparameters, the reference recipe of the same model) and its adaptive looks.
`rcpforge analyze`, `rcpforge report` and the Python API all cut a model out here, so
they give the same numbers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rcpforge.analysis.analyze import AnalysisRequest


def model_runs(runs: pa.Table, model: str) -> pa.Table:
    """The rows of one model's runs."""
    return runs.filter(pc.equal(runs["model"], model))


def model_request(request: AnalysisRequest, benchmark: str, hparams: Mapping[int, Mapping[str, Any]],
                  model: str) -> AnalysisRequest:
    """The campaign's analysis narrowed to one model: its RCPs under the model's benchmark
    with its hyperparameters. The checker knows no `<benchmark>_<model>`, so its N is
    unknown there (no note that N differs from the checker's)."""
    return replace(request, benchmark=benchmark, hparams=dict(hparams), checker_runs=None,
                   adaptive=model_record(request.adaptive, model))


def model_record(record: dict | None, model: str) -> dict | None:
    """An adaptive campaign's looks and stops (orchestrator/adaptive.py `adaptive_record`)
    of one model's cells."""
    if record is None:
        return None
    return {**record, "cells": [c for c in record["cells"] if c.get("model") == model],
            "looks": [e for e in record["looks"] if e.get("model") == model]}
