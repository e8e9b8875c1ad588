"""The one rule of what enters a run key (trainers/contract/run_key.py), and the lists of
settings added later that it is applied with (tests/trainers/test_run_key_golden.py pins
the keys it gives)."""

from __future__ import annotations

import pytest
from pydantic_core import to_jsonable_python

from rcpforge.trainers.command.settings import ADDED_LATER as COMMAND_ADDED_LATER
from rcpforge.trainers.command.settings import CommandSettings
from rcpforge.trainers.contract import RunSpec
from rcpforge.trainers.contract.run import RUNSPEC_ADDED_LATER
from rcpforge.trainers.contract.run_key import FIRST_REVISION, digest, keyed, revision_entries
from rcpforge.trainers.recipes.options import ADDED_LATER as RECIPE_ADDED_LATER
from rcpforge.trainers.recipes.options import RecipeOptions
from rcpforge.trainers.recipes.written import _ADDED_LATER as WRITTEN_ADDED_LATER
from rcpforge.trainers.recipes.written import _WGRAD_ADDED_LATER, WgradSpec, WrittenOptions
from rcpforge.trainers.tinylm.settings import ADDED_LATER as TINYLM_ADDED_LATER
from rcpforge.trainers.tinylm.settings import TinyLMSettings


def test_a_setting_added_later_enters_only_off_its_default_and_the_rest_as_it_is():
    data = {"a": 1, "late": None, "later": [], "kept": 0, "off": "x"}
    added_later = {"late": None, "later": [], "off": "default"}
    assert keyed(data, added_later) == {"a": 1, "kept": 0, "off": "x"}
    assert list(keyed(data, added_later)) == ["a", "kept", "off"]  # in its order
    assert keyed(data, {}) == data and keyed(data, {}) is not data
    assert data == {"a": 1, "late": None, "later": [], "kept": 0, "off": "x"}  # not changed


def test_a_revision_enters_only_above_its_first():
    assert FIRST_REVISION == 1
    assert revision_entries(recipe=1, switch=1, trainer=1) == {}
    assert revision_entries(recipe=2, switch=1, trainer=3) == {"_recipe_revision": 2, "_trainer_revision": 3}


def test_the_digest_is_of_the_sorted_entries_and_the_key_format_s_version():
    assert digest({"b": 1, "a": [1, 2]}) == digest({"a": [1, 2], "b": 1})
    assert digest({"a": 1}) != digest({"a": 2})
    assert len(digest({})) == 24


@pytest.mark.parametrize("model, added_later", [
    (RunSpec, RUNSPEC_ADDED_LATER),
    (RecipeOptions, RECIPE_ADDED_LATER),
    (WrittenOptions, WRITTEN_ADDED_LATER),
    (WgradSpec, _WGRAD_ADDED_LATER),
    (TinyLMSettings, TINYLM_ADDED_LATER),
    (CommandSettings, COMMAND_ADDED_LATER),
], ids=["RunSpec", "RecipeOptions", "WrittenOptions", "WgradSpec", "TinyLMSettings", "CommandSettings"])
def test_each_list_of_settings_added_later_holds_their_defaults(model, added_later):
    """Each default as the key has it (the field's default in JSON): one changed without its
    list would move every key that leaves the setting out."""
    for name, default in added_later.items():
        if name in model.model_fields:
            field_default = model.model_fields[name].get_default(call_default_factory=True)
            assert to_jsonable_python(field_default) == default, name
            continue
        # one recipe family's option (nvfp4_4over6's `error`): the family that brings it in
        # has the listed default; another family may declare its own (nvfp4_4over6_te's
        # mae), and then its options always stay in its key
        defaults = [to_jsonable_python(m.model_fields[name].get_default(call_default_factory=True))
                    for m in _subclasses(model) if name in m.model_fields]
        assert default in defaults, (name, defaults)


def _subclasses(model: type) -> list[type]:
    return [sub for direct in model.__subclasses__() for sub in (direct, *_subclasses(direct))]
