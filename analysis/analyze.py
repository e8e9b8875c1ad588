"""Everything `rcpforge analyze` writes for a campaign, from its runs table: the RCP table
(CSV and Parquet), MLCommons RCP files per recipe, derived RCPs per candidate recipe,
`factors.json`, `selection.json` and a markdown summary."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from rcpforge.analysis.display import (
    NOT_MEANINGFUL,
    cell_text,
    fixed,
    gain_text,
    markdown_header,
    outliers_text,
    rcp_row_shown,
    runs_required_text,
)
from rcpforge.analysis.factors import (
    Factor,
    cell_values,
    derived_notes,
    derived_rcps,
    factor_curve,
    factors,
    factors_json,
    interval_text,
    pairwise_factors,
)
from rcpforge.analysis.hardware import mixed_hardware_notes
from rcpforge.analysis.load import write_parquet
from rcpforge.analysis.mixtures import mixtures
from rcpforge.analysis.rcp import trimmed_count
from rcpforge.analysis.rcp_table import rcp_records, rcp_table, write_atomic, write_rcp_file, write_table_csv
from rcpforge.analysis.scale import ScaleResult, has_model_axis, scale_analysis, scale_markdown
from rcpforge.analysis.selection import Selection, SelectionSettings, selection, selection_json


@dataclass(frozen=True)
class AnalysisRequest:
    campaign: str
    benchmark: str
    submission_runs: int
    recipes: list[str]
    hparams: dict
    reference: str = "bf16"
    confidence: float = 0.95
    resamples: int = 10_000
    seed: int = 0
    selection: SelectionSettings = SelectionSettings()
    # MLCommons RCP records to derive the candidates' RCPs from (e.g. the published BF16
    # RCPs); by default the campaign's own reference-recipe RCPs.
    reference_rcps: dict | None = None
    # The MLCommons checker's N for the benchmark (None: it does not know it); where it
    # differs from submission_runs (a campaign's rcp.override_checker_runs) the outputs say so.
    checker_runs: int | None = None
    # An adaptive campaign's looks and stops (orchestrator/adaptive.py `adaptive_record`):
    # where each cell stopped and why, and every look's interval; None for a fixed design.
    adaptive: dict | None = None
    # The parameter count to extrapolate each recipe's factor-against-size trend to
    # (`--extrapolate-to`); None: no prediction. Only runs of more than one model have a trend.
    extrapolate_to: float | None = None
    # Write an RCP record for a cell whose runs are of more than one configuration
    # (`--pool-mixed`; analysis/mixtures.py): by default such a cell gets none.
    pool_mixed: bool = False

    @property
    def checker_differs(self) -> str | None:
        """The note that this analysis' N is not the checker's, or None."""
        if self.checker_runs is None or self.checker_runs == self.submission_runs:
            return None
        return (f"N = {self.submission_runs} (rcp.override_checker_runs), but the MLCommons checker uses "
                f"N = {self.checker_runs} for {self.benchmark}: its minimum acceptable means and max speedups "
                "on these RCP files differ from this table's")


@dataclass
class AnalysisResult:
    table: pa.Table
    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=float) + "\n")


def analyze_runs(runs: pa.Table, req: AnalysisRequest, out: Path) -> AnalysisResult:
    table = rcp_table(runs, req.benchmark, req.submission_runs)
    result = AnalysisResult(table)
    if req.checker_differs:
        result.notes.append(req.checker_differs)
    result.notes += mixed_hardware_notes(runs)
    result.notes += [m.line(req.pool_mixed) for m in mixtures(runs)]
    for recipe in req.recipes:
        records = rcp_records(runs, recipe, req.benchmark, req.hparams, req.submission_runs, req.pool_mixed)
        if records:
            path = out / f"rcps_{req.campaign}_{recipe}.json"
            write_rcp_file(path, records)
            result.written.append(path)
    write_table_csv(out / "rcp_table.csv", table)
    write_parquet(table, out / "rcp_table.parquet")
    result.written += [out / "rcp_table.csv", out / "rcp_table.parquet"]

    found, pairs, selections = comparisons(runs, table, req)
    if req.reference in req.recipes:
        reference_records = req.reference_rcps or rcp_records(runs, req.reference, req.benchmark, req.hparams,
                                                              req.submission_runs, req.pool_mixed)
        for cand in sorted({f.candidate for f in found}):
            curve = factor_curve(found, cand)
            derived = derived_rcps(reference_records, cand, curve)
            result.notes += derived_notes(derived, cand, curve[0])
            if derived:
                path = out / f"rcps_{req.campaign}_{cand}_derived.json"
                write_rcp_file(path, derived)
                result.written.append(path)
    else:
        result.notes.append(f"reference recipe {req.reference!r} is not in the campaign; no factors")
    _json(out / "factors.json", factors_json(found, req.reference, req.confidence, req.resamples, req.seed,
                                             req.adaptive, pairs))

    scale = _write_scale(runs, req, out, result)

    _json(out / "selection.json", selection_json(selections, req.selection))
    write_atomic(out / "summary.md", summary_markdown(req, table, found, selections, result.notes, pairs, scale))
    result.written += [out / "factors.json", out / "selection.json", out / "summary.md"]
    return result


def _write_scale(runs: pa.Table, req: AnalysisRequest, out: Path, result: AnalysisResult) -> ScaleResult | None:
    """scale.json where the runs have more than one model (a caller that analyses one
    model at a time says itself that an asked-for extrapolation has no trend)."""
    scale = scale_of(runs, req)
    if scale is not None:
        _json(out / "scale.json", scale.as_json())
        result.written.append(out / "scale.json")
    return scale


def analyze_across_models(runs: pa.Table, req: AnalysisRequest, out: Path) -> AnalysisResult:
    """For a caller that analyses each model of a campaign apart (each in a folder of its
    own, where `analyze_runs` sees one model): the trend across the models, written beside
    those folders as `scale.json` and a `summary.md` holding its section. `table` is the
    runs' (no RCP table spans models)."""
    result = AnalysisResult(runs)
    scale = _write_scale(runs, req, out, result)
    if scale is not None:
        lines = [f"# Campaign {req.campaign}: the factor across model sizes", "",
                 "Each model's own analysis (RCP table, factors, selection) is in its folder beside this file."]
        write_atomic(out / "summary.md", "\n".join(lines + scale_markdown(scale)) + "\n")
        result.written.append(out / "summary.md")
    return result


def scale_of(runs: pa.Table, req: AnalysisRequest) -> ScaleResult | None:
    """The factor against model size, where the runs have more than one model and the
    campaign its reference recipe; None otherwise."""
    if not has_model_axis(runs) or req.reference not in req.recipes:
        return None
    return scale_analysis(runs, req.reference, req.benchmark, confidence=req.confidence, resamples=req.resamples,
                          seed=req.seed, extrapolate_to=req.extrapolate_to)


def comparisons(runs: pa.Table, table: pa.Table,
                req: AnalysisRequest) -> tuple[list[Factor], list[Factor], list[Selection]]:
    """What `analyze` writes and the report shows beside the RCP table: the convergence
    factors against the reference recipe (none when the campaign lacks it), the other
    recipes against each other (an ablation grid's variants, in campaign order) and every
    cell's selection statistics."""
    found = reference_factors(runs, req) if req.reference in req.recipes else []
    candidates = [r for r in req.recipes if r != req.reference]
    pairs = pairwise_factors(runs, candidates, req.benchmark, confidence=req.confidence, resamples=req.resamples,
                             seed=req.seed)
    return found, pairs, cell_selections(runs, table, req)


def reference_factors(runs: pa.Table, req: AnalysisRequest) -> list[Factor]:
    """Every candidate's convergence factors against the request's reference recipe."""
    return factors(runs, req.reference, req.benchmark, confidence=req.confidence, resamples=req.resamples,
                   seed=req.seed)


def cell_selections(runs: pa.Table, table: pa.Table, req: AnalysisRequest) -> list[Selection]:
    """Per cell, tested against the reference recipe's RCP at the same batch size (what
    a submission in the candidate precision would be checked against)."""
    trim = trimmed_count(req.benchmark)
    rcp = {r["batch_size"]: r for r in table.to_pylist() if r["recipe"] == req.reference and r["olympic_mean"] is not None}
    out = []
    for (recipe, bs), values in sorted(cell_values(runs).items()):
        ref = rcp.get(bs, {})
        out.append(selection(recipe, bs, values, req.submission_runs, trim, ref.get("olympic_mean"),
                             ref.get("min_acceptable_mean"), req.selection))
    return out


def _cells(row: dict, columns: list[str]) -> str:
    return " | ".join(cell_text(c, row.get(c)) for c in columns)


RCP_COLUMNS = ["recipe", "batch_size", "runs", "converged", "olympic_mean", "stdev", "min_acceptable_mean",
               "max_speedup", "note"]


def _factor_lines(found: list[Factor], against: bool = False) -> list[str]:
    """A markdown table of factors (`against`: with the recipe each is against)."""
    first = ["candidate", "against"] if against else ["candidate"]
    lines = markdown_header([*first, "batch_size", "factor", "interval", "p_candidate_faster", "mann_whitney_p",
                             "verdict", "reason"], "l" * len(first) + "rrlrrll")
    for f in found:
        values = {"factor": f.factor, "p_candidate_faster": f.prob_candidate_faster, "mann_whitney_p": f.mann_whitney_p,
                  "verdict": f.verdict, "reason": f.reason}
        names = f"{f.candidate} | {f.reference}" if against else f.candidate
        lines.append(f"| {names} | {f.batch_size} | {_cells(values, ['factor'])} | {interval_text(f)} | "
                     f"{_cells(values, ['p_candidate_faster', 'mann_whitney_p', 'verdict', 'reason'])} |")
    return lines


def summary_markdown(req: AnalysisRequest, table: pa.Table, found: list, selections: list[Selection], notes: list[str],
                     pairs: list[Factor] | None = None, scale: ScaleResult | None = None) -> str:
    lines = [f"# Campaign {req.campaign}: analysis", "",
             f"Benchmark `{req.benchmark}`, N = {req.submission_runs} runs per submission, samples to converge.", "",
             "## RCP table", "",
             f"An RCP needs 2N = {2 * req.submission_runs} runs; a cell with fewer still gets its record, marked. "
             f"{NOT_MEANINGFUL}: the checker computes this number, but for these runs it is not meaningful (see the note).", "",
             *markdown_header(RCP_COLUMNS, "lrrrrrrrl")]
    for r in table.to_pylist():
        lines.append(f"| {_cells(rcp_row_shown(r), RCP_COLUMNS)} |")
    lines += ["", f"## Convergence factors against `{req.reference}` ({req.confidence:.0%} stratified bootstrap)", ""]
    lines += _factor_lines(found) if found else ["No candidate shares a batch size with the reference."]
    if scale is not None:
        lines += scale_markdown(scale)
    if pairs:
        lines += ["", f"## Candidates against each other ({req.confidence:.0%} stratified bootstrap)", "",
                  "Each pair once, in campaign order: the later recipe's factor against the earlier one's (the "
                  "other direction is the reciprocal).", ""]
        lines += _factor_lines(pairs, against=True)
    k = req.selection.k_required
    lines += ["", "## Selection (M-of-N)", "",
              f"Gains are the relative drop of the expected olympic mean; runs required keeps the gain of the best of {k} "
              f"repeats under {req.selection.tolerance:.1%} with median-window scoring.", "",
              *markdown_header(["recipe", "batch_size", "runs", "honest_mean", "honest_stdev", "pass_prob", "best_of_k",
                        "runs_required", "outlier_sets"], "lrrrrrlrl")]
    for s in selections:
        honest = {"honest_mean": s.honest["mean"], "honest_stdev": s.honest["stdev"], "pass_prob": s.honest["pass_prob"]}
        gains = ", ".join(f"{r['k']}: {gain_text(r['gain'])}" for r in s.best_of_k)
        lines.append(f"| {s.recipe} | {s.batch_size} | {s.runs} | {_cells(honest, list(honest))} | {gains} | "
                     f"{runs_required_text(s.runs_required, s.n, req.selection.max_m_factor)} | "
                     f"{outliers_text(s.outlier_sets)} |")
    if req.adaptive:
        lines += adaptive_markdown(req.adaptive)
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def adaptive_markdown(record: dict) -> list[str]:
    """Where each cell of an adaptive campaign stopped and why, and every look."""
    lines = ["", "## Adaptive stopping", "",
             f"Cells against `{record['reference']}`, looked at step by step; each interval holds over all looks "
             f"together at {record['settings']['confidence']:.0%} ({record['settings']['spending']} error spending).",
             "", "| recipe | batch size | runs | stopped at look | reason | detail |", "|---|---:|---:|---:|---|---|"]
    for c in record["cells"]:
        lines.append(f"| {c['recipe']} | {c['batch_size']} | {c['seeds']} | {c['stopped_at_look'] or '-'} | "
                     f"{c['stop_reason'] or 'goes on'} | {c['stop_detail'] or ''} |")
    lines += ["", "| look | candidate | batch size | runs (candidate, reference) | factor | interval | look level | answer |",
              "|---:|---|---:|---|---:|---|---:|---|"]
    for e in record["looks"]:
        interval = f"{fixed(e['low'])} .. {fixed(e['high'])}" if e["low"] is not None or e["high"] is not None else "-"
        lines.append(f"| {e['look']} | {e['candidate']} | {e['batch_size']} | {e['runs_candidate']}, "
                     f"{e['runs_reference']} | {fixed(e['factor'])} | {interval} | {e['level']:.2%} | "
                     f"{e['decision'] or ''} |")
    return lines
