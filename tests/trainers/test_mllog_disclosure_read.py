"""Disclosure keys as real result files write them: AMD's v6.0 llama31_8b results write
`lowest_numerical_precision_linear` (no `_in_`); the reader records it under the rules'
name, and says what the file wrote in the run's `rcpforge.warning`."""

from __future__ import annotations

import json

from rcpforge.trainers.contract.mllog.read import events_facts, facts_tags, run_facts
from rcpforge.trainers.contract.schema import TAG_DISCLOSED, TAG_WARNING


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


def test_the_keys_a_file_leaves_out_are_appended_once_and_its_own_are_kept(tmp_path):
    from rcpforge.trainers.contract.mllog.write import add_missing_disclosure

    path = _write(tmp_path / "result.txt", ("lowest_numerical_precision_in_linear", "fp8"), ("run_stop", None))
    path.write_text(path.read_text().rstrip("\n"))  # a last line without its newline
    said = {"lowest_numerical_precision_in_linear": "nvfp4", "config_filename": "c.yaml", "tensor_parallelism": 1,
            "rcpforge_precision_map": {"x": 1}}  # not a disclosure key: never appended
    assert add_missing_disclosure(path, said) == ["config_filename", "tensor_parallelism"]
    assert add_missing_disclosure(path, said) == []
    facts = run_facts(path)
    assert facts.disclosed == {"lowest_numerical_precision_in_linear": "fp8", "config_filename": "c.yaml",
                               "tensor_parallelism": 1}
    assert facts.stopped_ms == 1  # the cut-off line was not swallowed
    assert len(path.read_text().splitlines()) == 4


def test_an_exported_file_from_before_config_filename_gets_it(tmp_path):
    from rcpforge.orchestrator.results_dirs import write_result_files

    old = _write(tmp_path / "old.txt", ("submission_benchmark", "llama31_8b"), ("run_stop", None))
    write_result_files(tmp_path / "a", [old], "campaign.yaml")
    write_result_files(tmp_path / "b", [old], "campaign.yaml")
    assert run_facts(tmp_path / "a" / "result_0.txt").disclosed == {"config_filename": "campaign.yaml"}
    # stamped with the file's own time: the same file exported twice is the same bytes
    assert (tmp_path / "a" / "result_0.txt").read_bytes() == (tmp_path / "b" / "result_0.txt").read_bytes()
