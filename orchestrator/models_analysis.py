"""`rcpforge analyze` on a campaign with a model axis: each model analysed as a campaign of
its own, in `<out>/<model>/`: its RCP table, its RCP files under the model's benchmark
(`<benchmark>_<model>`, with the model's hyperparameters), its factors against the
reference recipe of the same model, its selection statistics and summary. The trend of
the factors across models is analysis/scale*.py's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from analysis.analyze import AnalysisRequest, AnalysisResult, analyze_runs
from sweeps.spec import Campaign


def analyze_models(campaign: Campaign, runs: pa.Table, request: AnalysisRequest,
                   out: Path) -> list[tuple[str, AnalysisResult]]:
    """(model, its analysis) for each model of the campaign, in the campaign's order."""
    assert campaign.models is not None
    done = []
    for model in campaign.models:
        rows = runs.filter(pc.equal(runs["model"], model.name))
        own = replace(request, benchmark=campaign.benchmark_of(model.name), hparams=model.hparams or {},
                      checker_runs=None, adaptive=model_record(request.adaptive, model.name))
        folder = out / model.name
        folder.mkdir(parents=True, exist_ok=True)
        done.append((model.name, analyze_runs(rows, own, folder)))
    return done


def model_record(record: dict | None, model: str) -> dict | None:
    """An adaptive campaign's looks and stops (orchestrator/adaptive.py `adaptive_record`)
    of one model's cells."""
    if record is None:
        return None
    return {**record, "cells": [c for c in record["cells"] if c.get("model") == model],
            "looks": [e for e in record["looks"] if e.get("model") == model]}
