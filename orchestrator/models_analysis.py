"""`rcpforge analyze` and `rcpforge report` on a campaign with a model axis: each model
analysed as a campaign of its own (analyze: in `<out>/<model>/`; report: under a heading
per model): its RCP table, its RCP files under the model's benchmark
(`<benchmark>_<model>`, with the model's hyperparameters), its factors against the
reference recipe of the same model, its selection statistics and summary. The trend of
the factors across models is analysis/scale*.py's."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from rcpforge.analysis.analyze import AnalysisRequest, AnalysisResult, analyze_runs
from rcpforge.analysis.per_model import model_request, model_runs
from rcpforge.sweeps.spec import Campaign


def analyze_models(campaign: Campaign, runs: pa.Table, request: AnalysisRequest,
                   out: Path) -> list[tuple[str, AnalysisResult]]:
    """(model, its analysis) for each model of the campaign, in the campaign's order."""
    assert campaign.models is not None
    done = []
    for model in campaign.models:
        own = model_request(request, campaign.benchmark_of(model.name), model.hparams or {}, model.name)
        folder = out / model.name
        folder.mkdir(parents=True, exist_ok=True)
        done.append((model.name, analyze_runs(model_runs(runs, model.name), own, folder)))
    return done



def model_parts(campaign: Campaign, runs: pa.Table, request: AnalysisRequest) -> list:
    """Each model's part of `rcpforge report` (analysis/campaign_report.py `ModelPart`), in
    the campaign's order: the numbers `analyze_models` writes, and the model's precision maps."""
    from rcpforge.analysis.analyze import comparisons
    from rcpforge.analysis.campaign_report import ModelPart
    from rcpforge.analysis.layer_map import load_layer_maps
    from rcpforge.analysis.rcp_table import rcp_table

    assert campaign.models is not None
    parts = []
    for model in campaign.models:
        own = model_request(request, campaign.benchmark_of(model.name), model.hparams or {}, model.name)
        rows = model_runs(runs, model.name)
        table = rcp_table(rows, own.benchmark, own.submission_runs)
        found = pairs = selections = None
        if own.reference in own.recipes:
            found, pairs, selections = comparisons(rows, table, own)
        parts.append(ModelPart(model.name, own, rows, table, found, selections, pairs,
                               load_layer_maps(campaign.tracking_uri, rows)))
    return parts
