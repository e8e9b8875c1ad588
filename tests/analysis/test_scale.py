"""The factor against model size (analysis/scale.py, issue 31) on synthetic runs tables
with the axis' columns: scale.json's keys, the verdicts, the extrapolation's label, the
summary section, the report's plot and the reference points, and the slope's sizing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from rich.console import Console

from rcpforge.analysis import plots
from rcpforge.analysis.analyze import AnalysisRequest, analyze_runs
from rcpforge.analysis.campaign_report import scale_section
from rcpforge.analysis.report import render_html
from rcpforge.analysis.scale import GROWS, NO_TREND, SHRINKS, has_model_axis, scale_analysis, scale_markdown
from rcpforge.analysis.scale_plan import size_slopes
from rcpforge.analysis.scale_points import MLPERF_FP4, PointsError, load_points
from tests.helpers.scale_runs import SCHEMA, power_law_runs

TREND_KEYS = {"recipe", "batch_size", "slope", "slope_low", "slope_high", "verdict"}
PREDICTED_KEYS = {"predicted_factor", "predicted_low", "predicted_high"}
RESAMPLES = 2000


def _request(**more) -> AnalysisRequest:
    return AnalysisRequest(campaign="scale", benchmark="llama31_8b", submission_runs=3,
                           recipes=["bf16", "nvfp4", "mxfp4"], hparams={}, resamples=RESAMPLES, **more)


@pytest.fixture(scope="module")
def runs():
    # nvfp4's factor falls with size, mxfp4's rises (slope multiplier -1), both clearly
    return power_law_runs(np.random.default_rng(7), slope=-0.08, seeds=10, sigma=0.04, fail=0.0,
                          recipes={"nvfp4": 1.0, "mxfp4": -1.0}, batch_sizes=(32, 128))


def test_scale_json_has_the_issues_keys_and_each_models_factor(runs, tmp_path):
    analyze_runs(runs, _request(), tmp_path)
    data = json.loads((tmp_path / "scale.json").read_text())
    assert [(t["recipe"], t["batch_size"]) for t in data["trends"]] == [
        ("mxfp4", 32), ("mxfp4", 128), ("nvfp4", 32), ("nvfp4", 128)]
    for t in data["trends"]:
        assert TREND_KEYS <= set(t) and not PREDICTED_KEYS & set(t)  # no prediction unless asked
        assert t["slope_low"] < t["slope"] < t["slope_high"]
    cells = {(c["model"], c["recipe"], c["batch_size"]): c for c in data["cells"]}
    assert len(cells) == 3 * 2 * 2 and {c["params"] for c in cells.values()} == {200_000, 800_000, 3_200_000}
    for c in cells.values():
        assert c["ci_low"] < c["factor"] < c["ci_high"]
    assert "## Factor against model size" in (tmp_path / "summary.md").read_text()


def test_each_models_factor_is_against_the_reference_of_the_same_model(runs):
    from rcpforge.analysis.factors import factors

    small = runs.filter(runs["model"].to_numpy(zero_copy_only=False) == "w64")
    alone = {(f.candidate, f.batch_size): f.factor for f in factors(small, "bf16", "llama31_8b", resamples=RESAMPLES)}
    found = scale_analysis(runs, "bf16", "llama31_8b", resamples=RESAMPLES)
    assert {(c.recipe, c.batch_size): c.factor for c in found.cells if c.model == "w64"} == alone


def test_verdicts_say_which_way_the_penalty_moves(runs):
    trends = scale_analysis(runs, "bf16", "llama31_8b", resamples=RESAMPLES).trends
    found = {(t.recipe, t.batch_size): t for t in trends}
    for bs in (32, 128):
        assert found[("nvfp4", bs)].verdict == SHRINKS and found[("nvfp4", bs)].slope_high < 0
        assert found[("mxfp4", bs)].verdict == GROWS and found[("mxfp4", bs)].slope_low > 0
    assert "the penalty shrinks" in found[("nvfp4", 32)].verdict_text
    flat = power_law_runs(np.random.default_rng(3), slope=0.0, seeds=8, fail=0.0)
    trend = scale_analysis(flat, "bf16", "llama31_8b", resamples=RESAMPLES).trends[0]
    assert trend.verdict == NO_TREND and trend.slope_low < 0 < trend.slope_high


def test_an_extrapolation_is_labelled_everywhere_it_is_shown(runs, tmp_path):
    analyze_runs(runs, _request(extrapolate_to=8e9), tmp_path)
    data = json.loads((tmp_path / "scale.json").read_text())
    assert data["extrapolate_to"] == 8e9
    for t in data["trends"]:
        assert PREDICTED_KEYS <= set(t) and t["extrapolation"] is True
        assert t["predicted_low"] < t["predicted_factor"] < t["predicted_high"]
        assert t["predicted_label"].startswith("EXTRAPOLATION beyond the measured sizes")
    summary = (tmp_path / "summary.md").read_text()
    assert "(EXTRAPOLATION)" in summary and summary.count("EXTRAPOLATION beyond the measured sizes") == 4
    result = scale_analysis(runs, "bf16", "llama31_8b", resamples=RESAMPLES, extrapolate_to=8e9)
    section = scale_section(result)
    assert all(row["prediction"].startswith("EXTRAPOLATION") for row in section.rows)
    inside = scale_analysis(runs, "bf16", "llama31_8b", resamples=RESAMPLES, extrapolate_to=4e5).trends[0]
    assert inside.predicted["extrapolation"] is False
    assert inside.predicted["predicted_label"].startswith("interpolation")


def test_an_extrapolation_past_factor_1_says_where_the_line_crosses_it(runs):
    # nvfp4's true factor 1.4 * (params / 2e5)^-0.08 reaches 1 at 2e5 * 1.4^(1/0.08), about 1.3e7
    found = {(t.recipe, t.batch_size): t.predicted
             for t in scale_analysis(runs, "bf16", "llama31_8b", resamples=RESAMPLES, extrapolate_to=8e9).trends}
    crossing = 2e5 * 1.4 ** (1 / 0.08)
    for bs in (32, 128):
        assert crossing / 3 < found[("nvfp4", bs)]["crosses_one_at"] < crossing * 3
        assert "the line crosses 1 at" in found[("nvfp4", bs)]["predicted_label"]
        assert found[("mxfp4", bs)]["crosses_one_at"] is None  # grows away from 1: never crosses
        assert "crosses" not in found[("mxfp4", bs)]["predicted_label"]
    near = scale_analysis(runs, "bf16", "llama31_8b", resamples=RESAMPLES, extrapolate_to=4e6).trends
    assert all(t.predicted["crosses_one_at"] is None for t in near)  # the line is still above 1 there


def test_one_model_writes_no_trend(runs, tmp_path):
    one = runs.filter(runs["model"].to_numpy(zero_copy_only=False) == "w64")
    assert not has_model_axis(one) and has_model_axis(runs)
    result = analyze_runs(one, _request(extrapolate_to=8e9), tmp_path)
    assert not (tmp_path / "scale.json").exists() and tmp_path / "factors.json" in result.written
    assert "Factor against model size" not in (tmp_path / "summary.md").read_text()


def test_two_sizes_fit_a_line_and_say_so_and_one_size_is_no_trend():
    two = power_law_runs(np.random.default_rng(5), slope=-0.05, seeds=8, fail=0.0,
                         sizes={"a": 200_000, "b": 3_200_000})
    trend = scale_analysis(two, "bf16", "llama31_8b", resamples=RESAMPLES).trends[0]
    assert trend.slope is not None and "two sizes" in trend.reason
    unknown = two.set_column(two.schema.get_field_index("model_params"), "model_params",
                             [[None if m == "b" else 200_000 for m in two["model"].to_pylist()]])
    trend = scale_analysis(unknown, "bf16", "llama31_8b", resamples=RESAMPLES).trends[0]
    assert trend.slope is None and trend.verdict == "too few sizes"
    assert "a trend needs at least 2" in trend.reason and "without a recorded parameter count: b" in trend.reason


BUDGET = 4_000_000.0


def _never_converged(model: str = "w64") -> list[dict]:
    """Runs in which `model`'s nvfp4 runs all stop at the budget."""
    rows = power_law_runs(np.random.default_rng(3), slope=-0.08, seeds=6, fail=0.0).to_pylist()
    for r in rows:
        if r["model"] == model and r["recipe"] == "nvfp4":
            r |= {"status": "not_converged", "tokens_to_target": None, "samples_to_target": None,
                  "tokens_trained": BUDGET}
    return rows


def _analysed(rows: list[dict]):
    return scale_analysis(pa.Table.from_pylist(rows, schema=SCHEMA), "bf16", "llama31_8b", resamples=RESAMPLES)


def test_a_model_whose_candidate_never_converged_sits_out_with_a_floor_on_its_factor():
    rows = _never_converged()
    result = _analysed(rows)
    trend = result.trends[0]
    assert trend.sizes == 2 and trend.params_min == 800_000
    ref = sorted(r["tokens_to_target"] for r in rows if r["model"] == "w64" and r["recipe"] == "bf16")
    floor = BUDGET / float(np.mean(ref[1:-1]))
    [out] = trend.excluded
    assert out["model"] == "w64" and out["factor_above"] == pytest.approx(floor)
    assert "did not converge" in out["reason"]
    assert f"outside the fit: w64 (200,000 params): factor above {floor:.2f}" in trend.verdict_text
    assert trend.as_dict()["excluded"] == trend.excluded
    assert f"| w64 | 200,000 | nvfp4 | 32 | above {floor:.4f} |" in "\n".join(scale_markdown(result))
    # a run with no tokens recorded gives no floor, rather than a wrong one
    for r in rows:
        if r["model"] == "w64" and r["recipe"] == "nvfp4" and r["seed"] == 0:
            r["tokens_trained"] = None
    again = _analysed(rows).trends[0]
    assert again.excluded[0]["factor_above"] is None
    assert "w64 (200,000 params): factor undefined" in again.verdict_text


def test_the_plot_draws_a_floor_as_a_hollow_triangle(monkeypatch):
    from matplotlib.axes import Axes

    drawn = []
    scatter = Axes.scatter
    monkeypatch.setattr(Axes, "scatter", lambda self, x, y, **kw: drawn.append((list(x), list(y), kw))
                        or scatter(self, x, y, **kw))
    result = _analysed(_never_converged())
    assert plots.scale_trends(result)[:4] == b"\x89PNG"
    [(xs, ys, kw)] = drawn
    assert xs == [200_000] and ys == [pytest.approx(result.trends[0].excluded[0]["factor_above"])]
    assert kw["marker"] == "^" and kw["facecolors"] == "none"


def test_the_weighted_fit_agrees_with_the_bootstrap_on_the_slope(runs):
    boot = scale_analysis(runs, "bf16", "llama31_8b", resamples=RESAMPLES).trends
    weighted = scale_analysis(runs, "bf16", "llama31_8b", resamples=RESAMPLES, method="weighted").trends
    for b, w in zip(boot, weighted, strict=True):
        assert w.slope_low < b.slope < w.slope_high and w.verdict == b.verdict


def test_the_shipped_reference_points_are_the_mlperf_fp4_figures():
    points = {p.recipe: p for p in load_points(MLPERF_FP4)}
    assert set(points) == {"nvfp4", "mxfp4"}
    assert (points["nvfp4"].params, points["nvfp4"].low, points["nvfp4"].high) == (8.0e9, 1.077, 1.106)
    assert (points["mxfp4"].params, points["mxfp4"].low, points["mxfp4"].high) == (8.0e9, 1.039, 1.056)
    assert all("v5.1" in points["nvfp4"].source and "v6.0" in points["mxfp4"].source for _ in points)


POINT = {"name": "x", "recipe": "nvfp4", "params": 8e9, "factor": 1.1, "source": "s"}


@pytest.mark.parametrize("entry, named", [
    (POINT | {"params": "big"}, "points[0].params"),
    ({k: v for k, v in POINT.items() if k != "source"}, "points[0].source"),
    (POINT | {"url": "u"}, "unknown field(s) url"),
    (POINT | {"low": 1.2}, "low <= factor <= high"),
])
def test_a_wrong_reference_point_is_one_line_naming_the_field(tmp_path, entry, named):
    path = tmp_path / "points.json"
    path.write_text(json.dumps({"points": [entry]}))
    with pytest.raises(PointsError) as err:
        load_points(path)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_the_report_section_plots_factor_against_size_with_the_reference_points(runs):
    result = scale_analysis(runs, "bf16", "llama31_8b", resamples=RESAMPLES)
    section = scale_section(result, load_points(MLPERF_FP4))
    assert section.figure is not None and section.figure[:8] == b"\x89PNG\r\n\x1a\n" and len(section.figure) > 10_000
    assert "MLPerf Training v5.1" in section.text and "the penalty shrinks" in section.text
    page = render_html("t", [section])
    assert 'id="scale"' in page and 'id="fig-scale"' in page and 'id="table-scale"' in page
    # the points are drawn, never fitted: the trends are the same without them
    assert [t.slope for t in scale_analysis(runs, "bf16", "llama31_8b", resamples=RESAMPLES).trends] == \
        [t.slope for t in result.trends]


def test_plan_sizes_the_slope_from_the_runs_spread(runs):
    rows = {(r.recipe, r.batch_size): r for r in size_slopes(runs, "bf16", "llama31_8b", (0.01, 0.02, 0.05))}
    row = rows[("nvfp4", 32)]
    assert row.models == 3 and row.runs_so_far["w64"] == [10, 10] and row.reason is None
    assert row.runs["0.01"] > row.runs["0.02"] >= row.runs["0.05"] >= 4
    assert row.total_runs["0.02"] == 2 * 3 * row.runs["0.02"]
    # the goal at the half-width predicted for the runs so far needs no more runs than those
    assert _needs(runs, row.half_width_now * 1.0001) <= 10
    # (n - 1) / (h (h - 1)), h = n - 2: four times less variance than at 10 runs at 29
    assert _needs(runs, row.half_width_now / 2) == 29


def _needs(runs, goal: float) -> int:
    rows = size_slopes(runs, "bf16", "llama31_8b", (goal,))
    return next(r for r in rows if (r.recipe, r.batch_size) == ("nvfp4", 32)).runs[f"{goal:g}"]


def test_plan_prints_the_runs_per_model_for_each_slope_precision(runs):
    from rcpforge.orchestrator.cli.render import slope_sizes_table

    rows = size_slopes(runs, "bf16", "llama31_8b", (0.01, 0.05))
    buffer = io.StringIO()
    Console(file=buffer, width=200).print(slope_sizes_table(rows, ["0.01", "0.05"], "bf16"))
    text = buffer.getvalue()
    assert "runs per model and recipe to reach each precision of the slope" in text
    assert "+-0.01" in text and "w64 10, 10" in text
    nvfp4 = next(r for r in rows if (r.recipe, r.batch_size) == ("nvfp4", 32))
    assert f"{nvfp4.runs['0.01']} ({nvfp4.total_runs['0.01']} runs)" in text


def test_plan_says_what_a_slope_needs_before_two_sizes_have_runs(runs):
    one = runs.filter(runs["model"].to_numpy(zero_copy_only=False) != "w256")
    one = one.filter(one["model"].to_numpy(zero_copy_only=False) != "w128")
    rows = size_slopes(one, "bf16", "llama31_8b")
    assert rows and all(r.runs == {} and "needs at least 2 model sizes" in r.reason for r in rows)


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_a_wrong_extrapolation_size_is_one_line(cli, tmp_path, command):
    out = ["--out", str(tmp_path / ("r.html" if command == "report" else "o"))]
    bad = cli(command, str(tmp_path / "missing.yaml"), *out, "--extrapolate-to", "-5")
    assert bad.returncode == 2 and "--extrapolate-to" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_a_missing_reference_points_file_is_one_line(cli, tmp_path):
    bad = cli("report", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "r.html"),
              "--reference-points", str(tmp_path / "none.yaml"))
    assert bad.returncode == 2 and "--reference-points" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert Path(MLPERF_FP4).is_file()


def test_a_caller_analysing_each_model_apart_gets_the_trend_beside_their_folders(runs, tmp_path):
    from rcpforge.analysis.analyze import analyze_across_models

    result = analyze_across_models(runs, _request(extrapolate_to=8e9), tmp_path)
    assert result.written == [tmp_path / "scale.json", tmp_path / "summary.md"]
    data = json.loads((tmp_path / "scale.json").read_text())
    assert len(data["trends"]) == 4 and all(t["extrapolation"] for t in data["trends"])
    summary = (tmp_path / "summary.md").read_text()
    assert "## Factor against model size" in summary and "EXTRAPOLATION beyond the measured sizes" in summary


def test_the_scale_table_shows_every_column_within_a_printed_pages_width(runs, tmp_path):
    width = 700  # about a printed A4 page's width, the narrowest the report is laid out for
    from rcpforge.analysis.report import write_report
    from tests.helpers.browser import layout_problems

    result = scale_analysis(runs, "bf16", "llama31_8b", resamples=RESAMPLES, extrapolate_to=8e9)
    page = write_report(tmp_path / "report.html", "scale", [scale_section(result, load_points(MLPERF_FP4))], "html")
    layout = layout_problems(page, width, tmp_path)
    assert layout["tables"] == 1 and layout["problems"] == []
