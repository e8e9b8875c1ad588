"""A campaign's secrets (sweeps/secrets.py): out of every RunSpec and run key as it loads,
resolved from the launching environment as it launches."""

from __future__ import annotations

import pytest

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.secrets import MissingSecret, launch_secrets, literal_warning
from rcpforge.sweeps.spec import parse_campaign

BASE = {
    "name": "s", "target": {"metric": "eval_accuracy", "mode": "max", "value": 0.9},
    "budget": {"max_tokens": 100, "eval_every_tokens": 10}, "recipes": ["a"], "batch_sizes": [1, 2], "seeds": 1,
    "hparams": {1: {}, 2: {}}, "rcp": {"benchmark": "s", "submission_runs": 3},
}


def campaign(env: dict, **more):
    return parse_campaign({**BASE, "trainer": {"kind": "command", "argv": ["prog"], "env": env}, **more})


def test_no_value_enters_a_runspec_or_its_key():
    loaded = campaign({"HF_TOKEN": {"from_env": "MY_HF"}, "WANDB_API_KEY": "lit-1", "OMP_NUM_THREADS": "1"})
    specs = expand(loaded)
    assert all(s.trainer["env"] == {"HF_TOKEN": {"from_env": "MY_HF"}, "WANDB_API_KEY": "***",
                                    "OMP_NUM_THREADS": "1"} for s in specs)
    assert "lit-1" not in loaded.model_dump_json() and "lit-1" not in repr(loaded)
    other = campaign({"HF_TOKEN": {"from_env": "MY_HF"}, "WANDB_API_KEY": "lit-2", "OMP_NUM_THREADS": "1"})
    assert [s.run_key for s in expand(other)] == [s.run_key for s in specs]  # a rotated literal
    renamed = campaign({"HF_TOKEN": {"from_env": "MY_HF"}, "WANDB_KEY": "lit-1", "OMP_NUM_THREADS": "1"})
    assert [s.run_key for s in expand(renamed)] != [s.run_key for s in specs]  # the name enters


def test_a_plain_entry_is_as_it_was():
    loaded = campaign({"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    assert expand(loaded)[0].trainer["env"] == {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    assert literal_warning([loaded.trainer]) is None
    assert launch_secrets(loaded, {}) == {"": {}}


def test_values_come_from_the_launching_environment():
    loaded = campaign({"HF_TOKEN": {"from_env": "MY_HF"}, "WANDB_API_KEY": "lit"})
    assert launch_secrets(loaded, {"MY_HF": "v"}) == {"": {"HF_TOKEN": "v", "WANDB_API_KEY": "lit"}}
    with pytest.raises(MissingSecret, match=r"trainer.env.HF_TOKEN: from_env MY_HF is not set .*nothing was launched"):
        launch_secrets(loaded, {})
    warning = literal_warning([loaded.trainer])
    assert warning is not None and "WANDB_API_KEY: {from_env: WANDB_API_KEY}" in warning and "lit" not in warning


def test_a_models_own_literal_is_taken_out_too():
    loaded = campaign({"OMP_NUM_THREADS": "1"}, models=[{"name": "m1", "env": {"API_KEY": "m-lit"}},
                                                        {"name": "m2"}])
    assert "m-lit" not in loaded.model_dump_json()
    assert {s.model: s.trainer["env"] for s in expand(loaded)} == {"m1": {"API_KEY": "***"},
                                                                   "m2": {"OMP_NUM_THREADS": "1"}}
    assert launch_secrets(loaded, {}) == {"m1": {"API_KEY": "m-lit"}, "m2": {}}


@pytest.mark.parametrize("entry", [{"from_env": "1bad name"}, {"form_env": "HF_TOKEN"}, {"from_env": "A", "x": 1}])
def test_a_malformed_reference_is_one_message_naming_the_entry_and_the_form(entry):
    from rcpforge.trainers.command.settings import CommandSettings

    with pytest.raises(ValueError) as err:
        CommandSettings.model_validate({"argv": ["prog"], "env": {"HF_TOKEN": entry}})
    assert len(err.value.errors()) == 1  # not one error per form the entry could take
    assert "entry HF_TOKEN" in str(err.value) and "{from_env: NAME}" in str(err.value)
