"""The sections of a campaign report, from the campaign's runs, table and curves."""

from __future__ import annotations

import pyarrow as pa
import yaml

from analysis import plots
from analysis.report import Section
from sweeps.spec import Campaign, redact_uri

TABLE_COLUMNS = ["recipe", "batch_size", "runs", "converged", "not_converged", "diverged", "pending_or_failed",
                 "olympic_mean", "stdev", "min_acceptable_mean", "max_speedup"]


def settings_section(campaign: Campaign) -> Section:
    settings = campaign.model_dump(mode="json", exclude={"base_dir"})
    settings["tracking"] = {"uri": redact_uri(campaign.tracking_uri)}
    return Section("settings", "Campaign settings", preformatted=yaml.safe_dump(settings, sort_keys=False))


def build_sections(campaign: Campaign, runs: pa.Table, table: pa.Table, curves: pa.Table,
                   telemetry_names: list[str]) -> list[Section]:
    sections = [settings_section(campaign)]
    sections.append(Section(
        "rcp-table", "RCP table",
        text=(f"Samples to converge per (recipe, batch size), benchmark {campaign.benchmark}, "
              f"N = {campaign.submission_runs} submission runs; statistics exactly as the MLCommons checker."),
        columns=TABLE_COLUMNS, rows=table.to_pylist(),
    ))
    metric = campaign.target.metric
    sections.append(Section(
        "curves", "Eval curves",
        text=f"Every seed's {metric} against tokens; the dashed line is the target ({campaign.target.value}).",
        figure=plots.eval_curves(runs, curves, metric, campaign.target.value),
        figure_caption="one panel per recipe (rows) and batch size (columns)",
    ))
    edges = [campaign.batch_sizes[0], campaign.batch_sizes[-1]]
    sections.append(Section(
        "distribution", "Tokens to target at the minimum and maximum batch size",
        figure=plots.tokens_distribution(runs, edges), figure_caption="box: quartiles; dots: runs",
    ))
    sections.append(Section(
        "rcp-curve", "RCP curve", text="Olympic mean of samples to converge against batch size.",
        figure=plots.rcp_curve(table), figure_caption="log2 batch size",
    ))
    if telemetry_names:
        sections.append(Section(
            "telemetry", "Numeric telemetry",
            text="Per recipe, the mean over runs of each telemetry fraction at the last eval.",
            figure=plots.telemetry(runs, curves, telemetry_names),
        ))
    return sections
