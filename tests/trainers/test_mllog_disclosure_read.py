"""Disclosure keys as real result files write them: AMD's v6.0 llama31_8b results write
`lowest_numerical_precision_linear` (no `_in_`); the reader records it under the rules'
name, and says what the file wrote in the run's `rcpforge.warning`."""

from __future__ import annotations

import json

from trainers.contract.mllog.read import events_facts, facts_tags, run_facts
from trainers.contract.schema import TAG_DISCLOSED, TAG_WARNING


def _write(path, *events):
    path.write_text("".join(":::MLLOG " + json.dumps({"key": k, "value": v, "time_ms": i, "metadata": {}}) + "\n"
                            for i, (k, v) in enumerate(events)))
    return path


def test_the_misspelled_key_is_read_under_the_rules_name_with_a_warning(tmp_path):
    path = _write(tmp_path / "result_0.txt", ("submission_benchmark", "llama31_8b"),
                  ("lowest_numerical_precision_linear", "mxfp4"), ("run_start", None), ("run_stop", None))
    facts = run_facts(path)
    assert facts.disclosed == {"lowest_numerical_precision_in_linear": "mxfp4"}
    tags = facts_tags(facts)
    assert tags[TAG_DISCLOSED + "lowest_numerical_precision_in_linear"] == "mxfp4"
    assert TAG_DISCLOSED + "lowest_numerical_precision_linear" not in tags
    assert "'lowest_numerical_precision_linear'" in tags[TAG_WARNING]
    assert "'lowest_numerical_precision_in_linear'" in tags[TAG_WARNING]


def test_the_rules_name_wins_over_a_misspelling_in_either_order_and_nothing_is_warned():
    for events in ([{"key": "lowest_numerical_precision_in_attn", "value": "bfloat16"},
                    {"key": "lowest_numerical_precision_attn", "value": "fp8"}],
                   [{"key": "lowest_numerical_precision_attn", "value": "fp8"},
                    {"key": "lowest_numerical_precision_in_attn", "value": "bfloat16"}]):
        facts = events_facts(events)
        assert facts.disclosed == {"lowest_numerical_precision_in_attn": "bfloat16"}
        assert facts.warnings == []
        assert TAG_WARNING not in facts_tags(facts)


def test_config_filename_is_a_disclosure_key():
    facts = events_facts([{"key": "config_filename", "value": "campaign.yaml"}])
    assert facts_tags(facts) == {TAG_DISCLOSED + "config_filename": "campaign.yaml"}
