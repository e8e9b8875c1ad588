"""Fuzzing the campaign file: every input gives a Campaign or one CampaignError line."""

from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rcpforge.sweeps.spec import Campaign, CampaignError, load_campaign, parse_campaign
from rcpforge.trainers.contract.redact import redact_uri
from tests.helpers.campaigns import TINY

FIELDS = sorted(TINY)
junk = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True), st.text(max_size=12),
    st.lists(st.integers(-5, 300), max_size=4), st.dictionaries(st.text(max_size=6), st.integers(), max_size=3),
)


@st.composite
def mutated_campaigns(draw):
    data = copy.deepcopy(TINY)
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["drop", "replace", "nested", "extra"]))
        field = draw(st.sampled_from(FIELDS))
        if action == "drop":
            data.pop(field, None)
        elif action == "replace":
            data[field] = draw(junk)
        elif action == "nested" and isinstance(data.get(field), dict) and data[field]:
            key = draw(st.sampled_from(sorted(data[field], key=str)))
            data[field][key] = draw(junk)
        else:
            data[draw(st.text(min_size=1, max_size=8))] = draw(junk)
    return data


def _check(call) -> None:
    try:
        result = call()
    except CampaignError as err:
        message = str(err)
        assert message and "\n" not in message and "Traceback" not in message
    else:
        assert isinstance(result, Campaign)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_campaigns())
def test_mutated_campaigns_validate_or_fail_in_one_line(data):
    _check(lambda: parse_campaign(data, source="fuzz.yaml"))


@settings(max_examples=1000, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_files_validate_or_fail_in_one_line(tmp_path_factory, text):
    path = tmp_path_factory.getbasetemp() / "fuzz.yaml"
    path.write_text(text)
    _check(lambda: load_campaign(path))


@pytest.mark.parametrize("text", ["- a\n- b\n", "42\n", "", "name: only\n"])
def test_valid_yaml_of_the_wrong_shape_is_named(text):
    with pytest.raises(CampaignError, match="x.yaml"):
        parse_campaign(yaml.safe_load(text), source="x.yaml")


def test_control_characters_in_field_names_are_escaped():
    data = copy.deepcopy(TINY)
    data["bad\nkey"] = 1
    with pytest.raises(CampaignError) as info:
        parse_campaign(data)
    assert "\n" not in str(info.value) and "bad\\nkey" in str(info.value)


def test_passwords_in_tracking_uris_are_masked():
    assert redact_uri("postgresql+psycopg2://rcp:s3cr3t@127.0.0.1:5432/mlflow") == (
        "postgresql+psycopg2://rcp:***@127.0.0.1:5432/mlflow"
    )
    assert "pw" not in redact_uri("http://user:pw@localhost:5000")
    for untouched in ("sqlite:////tmp/a.db", "http://host:5000/path@x", "postgresql://user@host/db"):
        assert redact_uri(untouched) == untouched
