"""`rcpforge policy` through the command line: its JSON rows, the brief, the HTML report
in headless Chromium, the campaign form on a real MLflow store, and one line with exit 2
for each kind of wrong input."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from rcpforge.analysis.policy.simulate import ROW_KEYS
from rcpforge.sweeps.spec import load_campaign
from tests.analysis.stores import file_runs
from tests.helpers.browser import layout_problems
from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.cli import invoke, one_line_usage_error

SEEDS = 3  # the fewest a complete cell can have: more runs than the olympic trim drops


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """bf16 and a candidate 10% slower, 3 converged runs each at two batch sizes, on an
    eval grid of 128 samples."""
    folder = tmp_path_factory.mktemp("policy-camp")
    path = write_campaign(folder, tiny_campaign(seeds=SEEDS))
    spec = load_campaign(path)
    rng = np.random.default_rng(0)
    runs = [{"recipe": recipe, "batch_size": bs, "seed": seed, "status": "converged",
             "samples": 128 * round(base * scale * rng.normal(1, 0.04) / 128)}
            for recipe, scale in (("bf16", 1.0), ("fp8_tensorwise", 1.1)) for bs, base in ((16, 4000), (64, 9000))
            for seed in range(SEEDS)]
    file_runs(spec.tracking_uri, spec.name, (folder / "art").as_uri(), runs)
    return path


def test_json_rows_have_exactly_the_issues_keys_one_per_cell(tmp_path):
    result = invoke("policy", "--rcps", "5.1.0", "--benchmark", "llama31_8b", "--batch-size", "32",
                    "--batch-size", "96", "--pick", "1", "--pick", "3", "--pick-mode", "sets", "--pick-mode", "runs",
                    "--sims", "500", "--json", "--brief", str(tmp_path / "brief.md"))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = doc["rows"]
    assert all(tuple(r) == ROW_KEYS for r in rows)
    cells = {(r["batch_size"], r["policy"], r["factor"], r["pick"], r["pick_mode"]) for r in rows}
    assert len(cells) == len(rows) == 2 * 5 * 2 * 2 * 2  # batch sizes, policies, factors, picks, modes
    assert {r["policy"] for r in rows} == {"today", "precision_rcp", "factor", "group", "m_of_n"}
    assert {r["factor"] for r in rows} == {1.0, 1.08} and all(r["sims"] == 500 for r in rows)
    extra = {r["policy"]: r["extra_runs"] for r in rows}
    assert extra == {"today": 0, "precision_rcp": 20, "factor": 20, "group": 0, "m_of_n": 10}
    brief = (tmp_path / "brief.md").read_text()
    assert brief.startswith("# llama31_8b: what each countermeasure catches and costs")
    assert "| today's rule | 1.08 |" in brief and "caught k=3 (sets / runs)" in brief
    # the advantage kept with its standard error, in the rows and where the brief shows it
    assert ROW_KEYS[-4:] == ("advantage_kept_pct_se", "advantage_kept_evals_se", "ruleset", "coarse")
    assert all(r["advantage_kept_pct_se"] is None for r in rows if r["advantage_kept_pct"] is None)
    assert any(r["advantage_kept_pct_se"] > 0 for r in rows if r["advantage_kept_pct_se"] is not None)
    assert re.search(r"\| [+-]\d+\.\d\d ± [\d.e-]+ / [+-]\d+\.\d\d ± ", brief)


def test_html_report_is_self_contained_and_lays_out_in_headless_chromium(tmp_path):
    page = tmp_path / "policy.html"
    # one batch size: every column and cheater, in fewer rows than the probe need walk
    result = invoke("policy", "--rcps", "6.0.0", "--benchmark", "gpt_oss_20b", "--batch-size", "64", "--sims", "300",
                    "--html", str(page))
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert re.findall(r'<img id="fig-(\w+)"', text) == ["catch", "honest"]
    assert "http://" not in text and "https://" not in text
    opened = tmp_path / "opened.html"
    opened.write_text(text.replace("<details>", "<details open>"))
    for width in (1200, 700):
        layout = layout_problems(opened, width, tmp_path)
        assert layout["tables"] == 2 and layout["problems"] == [], (width, layout)
    # the frontier's report: its front as a plot, self-contained (here, where matplotlib is loaded already)
    front = tmp_path / "front.html"
    result = invoke("policy", "--rcps", "6.0.0", "--benchmark", "gpt_oss_20b", "--batch-size", "64", "--frontier",
                    "--rule", "today", "--rule", "m=2", "--factor", "1.08", "--pick", "5", "--pick-mode", "sets",
                    "--sims", "100", "--html", str(front))
    assert result.exit_code == 0, result.output
    text = front.read_text()
    assert re.findall(r'<img id="fig-(\w+)"', text) == ["front"] and "https://" not in text


def test_campaign_form_uses_the_campaigns_runs(campaign):
    result = invoke("policy", str(campaign), "--reference", "bf16", "--candidate", "fp8_tensorwise",
                    "--sims", "2000", "--pick", "1", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert {r["batch_size"] for r in rows} == {16, 64} and {r["factor"] for r in rows} == {1.0}
    assert {r["benchmark"] for r in rows} == {"rcpforge_tiny"}
    # N = 3 (the campaign's rcp.submission_runs): an own-precision RCP costs 2N runs, M > N runs M - N
    assert {r["policy"]: r["extra_runs"] for r in rows}["precision_rcp"] == 6
    today = [r for r in rows if r["policy"] == "today"]
    assert all(r["honest_rejected"] < 0.05 for r in today)  # 10% slower than bf16: today's rule lets it through


WRONG = [
    (["--rcps", "5.1.0", "--benchmark", "nosuch"], "--benchmark 'nosuch': ruleset 5.1.0 ships no RCPs for it"),
    (["--rcps", "5.1.0", "--benchmark", "llama31_8b", "--batch-size", "48"], "--batch-size 48"),
    (["--rcps", "5.1.0", "--benchmark", "llama31_8b", "--factor", "-0.5"], "--factor -0.5"),
    (["--rcps", "5.1.0", "--benchmark", "llama31_8b", "--pick", "0"], "--pick 0"),
    (["--rcps", "5.1.0", "--benchmark", "llama31_8b", "--pick-mode", "lucky"], "--pick-mode 'lucky'"),
    (["--rcps", "5.1.0", "--benchmark", "llama31_8b", "--m", "10"], "--m 10"),
    (["--rcps", "9.9.9", "--benchmark", "llama31_8b"], "--rcps '9.9.9'"),
    (["--rcps", "5.1.0", "--batch-size", "64"], "--batch-size needs --benchmark"),
    (["--rcps", "5.1.0", "--benchmark", "llama31_8b", "--rule", "m0=1"], "--rule 'm0=1': m0 is out of range"),
    (["--rcps", "5.1.0", "--benchmark", "llama31_8b", "--z-threshold", "0"], "--z-threshold 0"),
    (["--rcps", "5.1.0", "--benchmark", "llama31_8b", "--rule", "m=2,lucky=3"], "unknown knob 'lucky'"),
    (["--rcps", "5.1.0", "--benchmark", "llama31_8b", "--rule", "group=8,m=2"], "drop m or group"),
    (["--rcps", "5.1.0", "--benchmark", "llama31_8b", "--frontier", "--rule", "m=2"],
     "--frontier weighs rules against each other"),
    ([], "give either --rcps"),
]


@pytest.mark.parametrize("args,names", WRONG, ids=[w[1].split(":")[0] for w in WRONG])
def test_wrong_input_is_one_line_naming_the_flag_exit_2(args, names):
    one_line_usage_error(invoke("policy", *args), names)


def test_a_campaign_without_the_named_recipe_is_one_line_exit_2(campaign):
    one_line_usage_error(invoke("policy", str(campaign), "--reference", "bf16", "--candidate", "nvfp4"),
                         "--candidate 'nvfp4': not one of the campaign's recipes")
    one_line_usage_error(invoke("policy", str(campaign), "--reference", "fp4", "--candidate", "fp8_tensorwise"),
                         "--reference 'fp4'")


def test_rcp_stats_shows_todays_honest_rejection_and_marks_coarse_rcps():
    result = invoke("rcp-stats", "6.1.0", "--benchmark", "llama31_8b", "--json")
    rows = {r["batch_size"]: r for r in json.loads(result.stdout)}
    assert rows[16]["coarse"] == "2 distinct values" and rows[128]["coarse"] is None
    assert all(0 <= r["honest_rejected"] < 0.1 and r["honest_rejected_se"] >= 0 for r in rows.values())
    shown = invoke("rcp-stats", "6.1.0", "--benchmark", "qwen35_397b_grpo")
    assert "zero spread" in shown.output and "honest rejected" in shown.output
