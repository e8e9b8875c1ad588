"""The family of rules and its frontier: a zero allowance is today's rule exactly, the
front is non-dominated by construction, the recommendation follows the group's terms,
every RCP of a ruleset is simulated with its coarseness marked, and a seed reproduces the
frontier bit for bit."""

from __future__ import annotations

import json

from rcpforge.analysis.policy.cases import rcp_set_cases
from rcpforge.analysis.policy.distributions import rcp_distributions
from rcpforge.analysis.policy.frontier import AXES, AXES_ALLOWED, dominates, pareto_front, recommend
from rcpforge.analysis.policy.output import brief_table
from rcpforge.analysis.policy.rules import Rule, parse_rule, preset_rules
from rcpforge.analysis.policy.simulate import PolicySettings, simulate_case
from rcpforge.analysis.rcp_set import load_rcp_sets
from tests.analysis.policy.exact import small_set
from tests.helpers.cli import invoke


def test_a_zero_allowance_reduces_exactly_to_today():
    today, m_of_n = preset_rules()["today"], preset_rules()["m_of_n"]
    rules = (today, Rule(name="zero", allowance=0.0), m_of_n, parse_rule("m=2,allowance=0"))
    case = rcp_set_cases(small_set(), None, None, 500)[0]
    rows = simulate_case(case, PolicySettings(sims=500, seed=3, rules=rules, factors=(1.0, 1.08), picks=(1, 2, 5)))
    by = {}
    for r in rows:
        by.setdefault(r["policy"], []).append({k: v for k, v in r.items() if k != "policy"})
    assert by["zero"] == by["today"] and by["m=2"] == by["m_of_n"]
    assert by["today"] != by["m_of_n"]  # the comparison can fail: rules differ where they should
    assert parse_rule("allowance=0").spec == "today" and parse_rule("m=2,allowance=0.04").spec == "allowance=0.04,m=2"


def _summary(rule: str, honest: float, kept: float, extra: int) -> dict:
    """A rule's axes; its `runs` cheater keeps `kept`, its `sets` cheater half of it."""
    where = {"pick_mode": "runs", "factor": 1.08, "ruleset": "5.1.0", "benchmark": "b", "batch_size": 8, "caught": 0.1}
    return {"rule": rule, "honest_excess": honest, "worst_kept_evals": kept, "worst_kept_allowed": kept / 2,
            "extra_runs": extra,
            "worst_kept_by_mode": {"runs": kept, "sets": kept / 2},
            "worst_kept_at_by_mode": {"runs": where, "sets": {**where, "pick_mode": "sets"}}}


def test_front_is_non_dominated_and_every_other_rule_is_dominated():
    rules = [_summary("today", 0.0, 3.0, 0), _summary("a", 0.0, 3.0, 10), _summary("b", 0.02, 0.4, 20),
             _summary("c", 0.005, 0.9, 20), _summary("d", 0.005, 0.9, 20), _summary("e", -0.01, 2.0, 10),
             _summary("f", 0.3, 0.1, 0)]
    front = pareto_front(rules)
    assert front == ["f", "today", "e", "b", "c", "d"]  # "a" is today at a cost; c and d tie: both stay
    rules.append({**_summary("g", 0.0, 3.1, 0), "worst_kept_allowed": 0.2})  # worse on every cheater, best but runs
    for axes in (AXES, AXES_ALLOWED):
        front = pareto_front(rules, axes)
        for s in rules:
            assert any(dominates(o, s, axes) for o in rules) == (s["rule"] not in front), (axes, s["rule"])
    assert "g" in pareto_front(rules, AXES_ALLOWED) and "g" not in pareto_front(rules)
    assert set(AXES) == {"honest_excess", "worst_kept_evals", "extra_runs"}


def test_recommendation_is_the_cheapest_rule_on_the_terms_or_what_each_cost_buys():
    rules = [_summary("today", 0.0, 3.0, 0), _summary("b", 0.02, 0.4, 20), _summary("c", 0.005, 0.45, 40),
             _summary("g", 0.01, 0.5, 60)]
    advice = recommend(rules)
    assert advice["met"] and advice["rule"] == "c"
    advice = recommend(rules[:2])
    assert not advice["met"] and advice["rule"] is None
    assert [(s["extra_runs"], s["rule"]) for s in advice["by_cost"]] == [(0, "today")]  # b fails the honest bound
    assert advice["by_cost"][0]["stopped_by"]["pick_mode"] == "runs"
    allowed = recommend(rules, ["sets"])  # without the runs cheater: b keeps 0.2 but fails the honest bound
    assert allowed["met"] and allowed["rule"] == "c" and allowed["terms"]["pick_modes"] == ["sets"]


def test_every_rcp_of_a_ruleset_is_simulated_and_coarse_ones_are_marked():
    result = invoke("policy", "--rcps", "6.1.0", "--sims", "100", "--pick", "1", "--factor", "1",
                    "--pick-mode", "sets", "--rule", "today", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    shipped = {(s.benchmark, bs) for s in load_rcp_sets("6.1.0") for bs in rcp_distributions(s)}
    assert {(r["benchmark"], r["batch_size"]) for r in rows} == shipped and len(rows) == len(shipped) >= 20
    marks = {(r["benchmark"], r["batch_size"]): r["coarse"] for r in rows}
    assert marks[("llama31_8b", 16)] == "2 distinct values" and marks[("llama31_8b", 128)] is None
    assert marks[("qwen35_397b_grpo", 256)] == "zero spread"
    assert {r["ruleset"] for r in rows} == {"6.1.0"}
    header, body = brief_table(rows)  # the console's and the brief's table: a row per benchmark, which it says
    benchmarks = sorted({s.benchmark for s in load_rcp_sets("6.1.0")})
    assert header[0] == "benchmark" and [line[0] for line in body] == benchmarks


FRONTIER = ("policy", "--rcps", "6.1.0", "--benchmark", "llama31_8b", "--batch-size", "64", "--frontier",
            "--rule", "m=2", "--rule", "m0=5,norm=point", "--factor", "1.08", "--pick", "2", "--sims", "200", "--json")


def test_frontier_is_bit_for_bit_with_a_seed_and_writes_its_brief(tmp_path):
    first = invoke(*FRONTIER, "--seed", "4", "--brief", str(tmp_path / "brief.md"))
    assert first.exit_code == 0, first.output
    again, other = invoke(*FRONTIER, "--seed", "4"), invoke(*FRONTIER, "--seed", "5")
    assert first.stdout == again.stdout and first.stdout != other.stdout
    doc = json.loads(first.stdout)
    assert [r["rule"] for r in doc["rules"]] == ["today", "m=2", "m0=5,norm=point"]  # today: the baseline
    assert doc["factors"] == [1.0, 1.08] and doc["picks"] == [1, 2, 5]  # today at f = 1 and k = 5: the terms' own
    assert set(doc["front"]) <= {r["rule"] for r in doc["rules"]} and "today" in doc["front"]
    kept = doc["rules"][2]["cheaters"]["strategic"]["5"]["1.08"]
    assert set(kept) == {"caught", "kept_pct", "kept_evals"}
    brief = (tmp_path / "brief.md").read_text()
    assert brief.startswith("# Which RCP rule to adopt") and "## `today` per benchmark" in brief
    assert "**Against every cheater" in brief and "**Against the cheaters the rules allow for" in brief
    assert doc["recommendation_without_runs"]["terms"]["pick_modes"] == ["sets", "window", "strategic", "poisoned"]
