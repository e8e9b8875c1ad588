"""The sections of a campaign report, from the campaign's runs, table and curves."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from rcpforge.analysis import plots
from rcpforge.analysis.analyze import AnalysisRequest
from rcpforge.analysis.display import NOT_MEANINGFUL, Shown, gain_text, outliers_text, rcp_row_shown, runs_required_text
from rcpforge.analysis.hardware import mixed_hardware_notes
from rcpforge.analysis.layer_map import layer_map_sections
from rcpforge.analysis.rcp_table import TABLE_SCHEMA
from rcpforge.analysis.report import Section
from rcpforge.analysis.selection import SelectionSettings

TABLE_COLUMNS = TABLE_SCHEMA.names


@dataclass(frozen=True)
class CampaignFacts:
    """What a report says of its campaign besides the runs, handed over as plain values
    (the analysis reads no campaign file)."""

    request: AnalysisRequest
    settings: dict  # the campaign's settings as a person may see them (passwords masked)
    target_metric: str
    target_value: float
    batch_sizes: list[int]
    # Per cell: recipe, batch_size, runs, gpu_hours, core_hours, run_wall_hours, eta_s
    # (what `rcpforge status --json` reports; cost_usd too with prices), and the
    # campaign's totals; None: left out.
    cost_rows: list[dict] | None = None
    cost_totals: dict | None = None


@dataclass(frozen=True)
class ModelPart:
    """One model of a campaign with a model axis, analysed as a campaign of its own
    (analysis/per_model.py): its request (its benchmark, its hyperparameters), runs, RCP
    table, factors against the same model's reference, pairs, selections and precision maps."""

    name: str
    request: AnalysisRequest
    runs: pa.Table
    table: pa.Table
    found: list | None = None
    selections: list | None = None
    pairs: list | None = None
    layer_maps: dict = field(default_factory=dict)


def settings_section(settings: dict) -> Section:
    # Last and folded: a reader comes for the results, and the dump is some 75 lines.
    return Section("settings", "Campaign settings", preformatted=yaml.safe_dump(settings, sort_keys=False),
                   collapsed=True)


def _kept_batch_sizes(runs: pa.Table, req: AnalysisRequest) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
    """Per recipe, the batch sizes each pruning mode keeps (mlperf, envelope)."""
    from rcpforge.analysis.rcp_set import RcpSet
    from rcpforge.analysis.rcp_table import rcp_records

    mlperf, envelope = {}, {}
    for recipe in req.recipes:
        records = rcp_records(runs, recipe, req.benchmark, req.hparams, req.submission_runs)
        if not records:
            continue
        for mode, into in (("mlperf", mlperf), ("envelope", envelope)):
            rcps = RcpSet(records, req.benchmark, req.submission_runs, prune=mode)
            into[recipe] = {int(r.bs) for r in rcps.pruned.values()}
    return mlperf, envelope


def _bound(value: float | None, unbounded: bool) -> float | Shown | None:
    return Shown(None, "unbounded") if unbounded else value


def _factor_rows(found: list, against: bool = False) -> list[dict]:
    return [{"candidate": f.candidate, **({"against": f.reference} if against else {}), "batch_size": f.batch_size,
             "factor": f.factor, "ci_low": _bound(f.ci_low, f.ci_low_unbounded),
             "ci_high": _bound(f.ci_high, f.ci_high_unbounded), "p_candidate_faster": f.prob_candidate_faster,
             "mann_whitney_p": f.mann_whitney_p, "verdict": f.verdict, "reason": f.reason} for f in found]


def factor_section(found: list, reference: str) -> Section:
    rows = _factor_rows(found)
    return Section(
        "factors", f"Convergence factors against {reference}",
        text="Olympic mean of the candidate over that of the reference at each batch size, with a 95% "
             "stratified bootstrap interval, the probability that a candidate run is faster, and the verdict. "
             "Runs that did not converge are censored: a bound that resamples with an infinite olympic mean "
             "decide is unbounded.",
        columns=list(rows[0]) if rows else ["candidate"], rows=rows,
        figure=plots.factor_curves(found) if rows else None, figure_caption="dashed line: parity",
    )


def scale_section(result, points: list | None = None) -> Section:
    """The factor against model size (analysis/scale.py): each trend's slope, interval and
    verdict, the prediction only where asked (labelled), and the plot with the public
    reference points (drawn, not fitted)."""
    rows = []
    for t in result.trends:
        row = {"recipe": t.recipe, "batch_size": t.batch_size, "sizes": t.sizes, "params_min": t.params_min,
               "params_max": t.params_max, "slope": t.slope, "slope_low": t.slope_low, "slope_high": t.slope_high,
               "verdict": t.verdict}
        if result.extrapolate_to is not None:
            p = t.predicted or {}
            row |= {"predicted_factor": p.get("predicted_factor"), "predicted_low": p.get("predicted_low"),
                    "predicted_high": p.get("predicted_high"), "prediction": p.get("predicted_label")}
        rows.append(row | {"reason": t.reason})
    lines = [f"{t.verdict_text}." for t in result.trends]
    shown = [p for p in points or [] if p.recipe in {c.recipe for c in result.cells}]
    sources = " ".join(f"Reference point {p.name}: {p.source}." for p in shown)
    return Section(
        "scale", f"Factor against model size (against {result.reference})",
        text=(f"Per recipe and batch size, the line log factor = a + slope * log(parameters) through each model's "
              f"factor against {result.reference} of the same model, with a {result.confidence:.0%} interval on the "
              f"slope from a {result.method} over runs within cells. Shrinks: the factor moves toward 1 as models "
              f"grow. {' '.join(lines)} {sources}").strip(),
        columns=list(rows[0]) if rows else ["recipe"], rows=rows,
        figure=plots.scale_trends(result, shown) if result.cells else None,
        figure_caption="log-log; lines: the fit over the measured sizes, dashed: an extrapolation beyond them; "
                       "hollow triangles: models outside the fit (runs not converged), at the floor on the factor; "
                       "black stars: public results, drawn, not fitted",
    )


def pairwise_section(pairs: list) -> Section:
    """The candidates against each other: which part of a recipe (an ablation grid's
    option) buys its convergence."""
    rows = _factor_rows(pairs, against=True)
    return Section(
        "pairwise", "Candidates against each other",
        text="Every pair of candidate recipes once, in campaign order: the later recipe's olympic mean over the "
             "earlier one's at each batch size, with the same interval and verdict as against the reference "
             "(the other direction's factor is the reciprocal, and so is its interval up to the bootstrap's noise).",
        columns=list(rows[0]), rows=rows,
    )


def adaptive_section(record: dict) -> Section:
    """Where each cell of an adaptive campaign stopped and why, and its intervals look by look."""
    rows = [{"recipe": c["recipe"], "batch_size": c["batch_size"], "runs": c["seeds"],
             "stopped_at_look": c["stopped_at_look"], "stop_reason": c["stop_reason"] or "goes on",
             "stop_detail": c["stop_detail"]} for c in record["cells"]]
    settings = record["settings"]
    return Section(
        "adaptive", "Adaptive stopping",
        text=(f"Seeds were added step by step ({settings['step']} at a time, {settings['min_seeds']} to "
              f"{record['max_seeds']} per cell) until each comparison with {record['reference']} answered the "
              f"campaign's question. Every interval holds over all looks together at "
              f"{settings['confidence']:.0%} ({settings['spending']} error spending), so stopping on it is valid."),
        columns=list(rows[0]) if rows else ["recipe"], rows=rows,
        figure=plots.look_intervals(record) if record["looks"] else None,
        figure_caption="each comparison's interval at every look; dotted: the margin, dashed: parity",
    )


def selection_section(selections: list, settings: SelectionSettings) -> Section:
    rows = []
    for s in selections:
        best = {b["k"]: b["gain"] for b in s.best_of_k}
        rows.append({"recipe": s.recipe, "batch_size": s.batch_size, "runs": s.runs, "n": s.n,
                     "honest_mean": s.honest.get("mean"), "honest_stdev": s.honest.get("stdev"),
                     "pass_prob": s.honest.get("pass_prob"),
                     **{f"gain_best_of_{k}": Shown(v, gain_text(v)) for k, v in sorted(best.items())},
                     "runs_required": Shown(s.runs_required, runs_required_text(s.runs_required, s.n,
                                                                                settings.max_m_factor)),
                     "outlier_sets": outliers_text(s.outlier_sets)})
    columns = list(rows[0]) if rows else ["recipe"]
    return Section(
        "selection", "Selection risk (M-of-N)",
        text="What a submitter gains by keeping the best of K sets of N runs (relative drop of the expected "
             "olympic mean), and the runs per submission that keep that gain under the tolerance.",
        columns=columns, rows=rows,
    )


COST_COLUMNS = ["recipe", "batch_size", "runs", "gpu_hours", "core_hours", "run_wall_hours", "eta_s"]


def _cost_columns(rows: list[dict]) -> list[str]:
    # a model column only on a model axis (the rows of a campaign without one have model "")
    return (["model"] if any(r.get("model") for r in rows) else []) + COST_COLUMNS


def cost_section(rows: list[dict], totals: dict) -> Section:
    spent = (f"{totals.get('gpu_hours', 0.0):.4g} GPU-hours and {totals.get('core_hours', 0.0):.4g} CPU core-hours "
             f"over {totals.get('run_wall_hours', 0.0):.4g} run wall-hours")
    eta = totals.get("eta_s")
    left = f"; {totals.get('runs_to_do', 0)} runs to do, ETA {eta:.0f} s" if eta else ""
    # with the campaign's prices (its cost: section), the money beside the hours; without, as before
    priced = "cost_usd" in totals
    money = f" That compute cost {totals['cost_usd']:,.2f} US dollars at the campaign's prices." if priced else ""
    columns = _cost_columns(rows) + (["cost_usd"] if priced else [])
    return Section("cost", "Compute spent", text=f"The campaign's finished runs spent {spent}{left}. "
                   f"A run's cost is its wall time x its processes (x GPUs per process).{money}",
                   columns=columns, rows=[{k: r.get(k) for k in columns} for r in rows])


def rcp_table_section(req: AnalysisRequest, table: pa.Table, runs: pa.Table) -> Section:
    notes = [req.checker_differs] if req.checker_differs else []
    differs = "".join(f" Note: {n}." for n in notes + mixed_hardware_notes(runs))
    return Section(
        "rcp-table", "RCP table",
        text=(f"Samples to converge per (recipe, batch size), benchmark {req.benchmark}, "
              f"N = {req.submission_runs} submission runs; statistics exactly as the MLCommons checker. "
              f"An RCP needs 2N = {2 * req.submission_runs} runs: a cell with fewer still gets its record, "
              f"marked in the note; {NOT_MEANINGFUL}: the checker's number, not meaningful for these runs."
              f"{differs}"),
        columns=TABLE_COLUMNS, rows=[rcp_row_shown(r) for r in table.to_pylist()],
    )


def rcp_health_section(req: AnalysisRequest, runs: pa.Table) -> Section:
    """Per RCP of the campaign, today's honest rejection rate and the eval grid's mark
    (analysis/policy/health.py, as `rcp-stats` shows for shipped RCPs)."""
    from rcpforge.analysis.policy.health import REPORT_SIMS, campaign_health

    found = campaign_health(runs, req.recipes, req.benchmark, req.hparams, req.submission_runs, REPORT_SIMS, req.seed)
    rows = [{"recipe": h["recipe"], "batch_size": h["batch_size"], "runs": h["runs"],
             "honest_rejected": _share(h["honest_rejected"]), "honest_rejected_se": _share(h["honest_rejected_se"]),
             "eval_grid": h["coarse"] or "-"} for h in found]
    return Section(
        "rcp-health", "Today's check on honest submissions",
        text=(f"Per RCP record (each recipe's complete cells), the share of honest N = {req.submission_runs}-run "
              f"submissions drawn from its own runs that today's checker rejects at its batch size (its pruned "
              f"pass), from {REPORT_SIMS:,} seeded simulated submissions (seed {req.seed}), with the Monte Carlo "
              "standard error; eval grid: marked where the runs take 3 or fewer distinct values or have zero "
              "spread, so the RCP's statistics rest on a few evals. rcpforge policy simulates more "
              "(docs/policy.md)."),
        columns=["recipe", "batch_size", "runs", "honest_rejected", "honest_rejected_se", "eval_grid"], rows=rows,
    )


def _share(value: float | None) -> Shown | None:
    return None if value is None else Shown(value, f"{value:.1%}")


def build_sections(facts: CampaignFacts, runs: pa.Table, table: pa.Table, curves: pa.Table,
                   telemetry_names: list[str], found: list | None = None,
                   selections: list | None = None, layer_maps: dict | None = None,
                   pairs: list | None = None, scale=None, points: list | None = None) -> list[Section]:
    """`layer_maps`: (recipe, batch size) -> the runs' precision map (analysis/layer_map.py);
    `pairs`: the candidates against each other (analysis/analyze.py `comparisons`);
    `scale`: the factor against model size (analysis/scale.py), with public `points`."""
    part = ModelPart("", facts.request, runs, table, found, selections, pairs, layer_maps or {})
    return _body(facts, part, curves, telemetry_names, scale, points) + _closing(facts)


def build_axis_sections(facts: CampaignFacts, parts: list[ModelPart], curves: pa.Table, telemetry_names: list[str],
                        scale=None, points: list | None = None) -> list[Section]:
    """A campaign with a model axis: the factor against model size first (the question
    the axis asks), then under a heading per model that model's report (its factors
    against its own reference, RCP table under its benchmark, selection, honest
    rejection, curves), then the campaign's cost and settings."""
    sections = [scale_section(scale, points)] if scale is not None else []
    for part in parts:
        sections.append(model_heading(part))
        if part.runs.num_rows == 0:
            continue  # a model not run yet: its heading says so
        own = curves.filter(pc.is_in(curves["run_id"], value_set=part.runs["run_id"]))  # the model's runs' curves
        for s in _body(facts, part, own, telemetry_names):
            # keys stay unique in the page and in the markdown's figure files
            sections.append(replace(s, key=f"{part.name}-{s.key}", title=f"{s.title} ({part.name})", level=3))
    return sections + _closing(facts)


def model_heading(part: ModelPart) -> Section:
    if part.runs.num_rows == 0:
        return Section(f"model-{part.name}", f"Model {part.name}",
                       text=f"Model {part.name} has no runs yet (benchmark {part.request.benchmark}).")
    params = next((p for p in part.runs["model_params"].to_pylist() if p is not None), None)
    flops = next((f for f in part.runs["model_flops_per_token"].to_pylist() if f is not None), None)
    size = (f"{params:,} parameters" if params is not None else "parameter count not recorded") + (
        f", {flops:.4g} training FLOPs per token" if flops is not None else "")
    return Section(
        f"model-{part.name}", f"Model {part.name}",
        text=(f"Model {part.name} ({size}): {part.runs.num_rows} runs, RCPs under the benchmark "
              f"{part.request.benchmark}, factors against {part.request.reference} of the same model."))


def _body(facts: CampaignFacts, part: ModelPart, curves: pa.Table, telemetry_names: list[str],
          scale=None, points: list | None = None) -> list[Section]:
    """The sections of one model's runs (a campaign's, without the axis): the headline
    first (the factors and their verdicts, the RCP table), then what backs it up."""
    req, runs, table = part.request, part.runs, part.table
    sections = []
    if part.found is not None:
        sections.append(factor_section(part.found, req.reference))
    if scale is not None:
        sections.append(scale_section(scale, points))
    if part.pairs:
        sections.append(pairwise_section(part.pairs))
    if req.adaptive:
        sections.append(adaptive_section(req.adaptive))
    sections.append(rcp_table_section(req, table, runs))
    if part.selections is not None:
        sections.append(selection_section(part.selections, req.selection))
    sections.append(rcp_health_section(req, runs))
    metric = facts.target_metric
    sections.append(Section(
        "curves", "Eval curves",
        text=f"Every seed's {metric} against tokens; the dashed line is the target ({facts.target_value}).",
        figure=plots.eval_curves(runs, curves, metric, facts.target_value),
        figure_caption="one panel per recipe (rows) and batch size (columns); one colour per seed",
    ))
    edges = [facts.batch_sizes[0], facts.batch_sizes[-1]]
    sections.append(Section(
        "distribution", "Tokens to target at the minimum and maximum batch size",
        figure=plots.tokens_distribution(runs, edges), figure_caption="box: quartiles; dots: runs",
    ))
    mlperf, envelope = _kept_batch_sizes(runs, req)
    sections.append(Section(
        "rcp-curve", "RCP curve and pruning",
        text="Olympic mean of samples to converge against batch size. Hollow: removed by the checker's pruning "
             "(mlperf mode); cross: removed by the true lower convex envelope (envelope mode).",
        figure=plots.rcp_curve(table, mlperf, envelope), figure_caption="log2 batch size",
    ))
    if telemetry_names:
        sections.append(Section(
            "telemetry", "Numeric telemetry",
            text="Per recipe, the mean over runs of each telemetry fraction at the last eval.",
            figure=plots.telemetry(runs, curves, telemetry_names),
        ))
    if part.layer_maps:
        sections += layer_map_sections(part.layer_maps)
    return sections


def _closing(facts: CampaignFacts) -> list[Section]:
    """The campaign's cost and its settings, last."""
    sections = []
    if facts.cost_rows is not None:
        sections.append(cost_section(facts.cost_rows, facts.cost_totals or {}))
    sections.append(settings_section(facts.settings))
    return sections
