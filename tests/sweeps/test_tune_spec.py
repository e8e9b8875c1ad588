"""The `tune:` section and `hparams_from:`: bad search spaces fail at load, with one
line that names the field, before any trial could run."""

from __future__ import annotations

import pytest
import yaml

from rcpforge.sweeps.spec import CampaignError, load_campaign, parse_campaign
from rcpforge.sweeps.tune_spec import ParamSpace
from tests.helpers.campaigns import tiny_campaign, write_campaign


def _tuned(space, **tune):
    return tiny_campaign(tune={"space": space, **tune})


def _error(data) -> str:
    with pytest.raises(CampaignError) as info:
        parse_campaign(data, source="c.yaml")
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_valid_space_parses_with_defaults():
    campaign = parse_campaign(_tuned({"lr": {"low": 1e-4, "high": 0.1, "log": True},
                                      "warmup_tokens": {"low": 0, "high": 16384, "step": 4096},
                                      "beta2": {"choices": [0.95, 0.99]}}))
    tune = campaign.tune
    assert tune.sampler.kind == "tpe" and tune.pruner.kind == "hopeless" and tune.seeds == 1
    assert tune.space["warmup_tokens"].is_int and not tune.space["lr"].is_int


def test_low_above_high():
    message = _error(_tuned({"lr": {"low": 0.1, "high": 0.001}}))
    assert "tune.space.lr" in message and "low (0.1) is above high (0.001)" in message


def test_log_with_nonpositive_low():
    message = _error(_tuned({"lr": {"low": 0, "high": 0.1, "log": True}}))
    assert "tune.space.lr" in message and "log: true needs low > 0" in message


def test_unknown_hyperparameter_lists_the_trainers_names():
    message = _error(_tuned({"learning_rate": {"low": 0.001, "high": 0.1}}))
    assert "learning_rate" in message
    for name in ("lr", "warmup_tokens", "beta1", "beta2"):
        assert name in message


def test_a_range_the_trainer_rejects():
    # warmup_tokens must be >= 0 for the tiny LM: the low end of the range is checked
    message = _error(_tuned({"warmup_tokens": {"low": -100, "high": 100}}))
    assert "warmup_tokens" in message and "-100" in message


def test_choices_and_range_together():
    message = _error(_tuned({"lr": {"low": 0.001, "high": 0.1, "choices": [0.01]}}))
    assert "tune.space.lr" in message and "not both" in message


def test_empty_space_and_unknown_sampler():
    assert "tune.space" in _error(_tuned({}))
    message = _error(_tuned({"lr": {"low": 0.001, "high": 0.1}}, sampler={"kind": "cmaes"}))
    assert "tune.sampler.kind" in message and "tpe" in message


def test_grid_needs_finite_values():
    message = _error(_tuned({"lr": {"low": 0.001, "high": 0.1}}, sampler={"kind": "grid"}))
    assert "grid" in message and "lr" in message


def test_grid_values_of_a_stepped_range():
    assert ParamSpace(low=0, high=10, step=4).model_copy() and ParamSpace(low=0, high=10, step=4).is_int
    campaign = parse_campaign(_tuned({"warmup_tokens": {"low": 0, "high": 10, "step": 4},
                                      "lr": {"choices": [0.01, 0.02]}}, sampler={"kind": "grid"}))
    assert campaign.tune.grid_values() == {"warmup_tokens": [0, 4, 8], "lr": [0.01, 0.02]}


def test_hparams_from_overrides_the_inline_values(tmp_path):
    (tmp_path / "hparams.bf16.yaml").write_text(yaml.safe_dump(
        {"recipe": "bf16", "hparams": {16: {"lr": 0.0042}, 64: {"lr": 0.0084, "warmup_tokens": 0}}}))
    data = tiny_campaign(hparams_from="hparams.bf16.yaml")
    campaign = load_campaign(write_campaign(tmp_path, data))
    assert campaign.hparams[16]["lr"] == 0.0042 and campaign.hparams[16]["warmup_tokens"] == 8192
    assert campaign.hparams[64]["lr"] == 0.0084 and campaign.hparams[64]["warmup_tokens"] == 0


def test_hparams_from_alone_is_enough(tmp_path):
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(
        {"hparams": {16: {"lr": 0.01, "warmup_tokens": 0}, 64: {"lr": 0.02, "warmup_tokens": 0}}}))
    data = tiny_campaign(hparams_from="t.yaml")
    del data["hparams"]
    assert load_campaign(write_campaign(tmp_path, data)).hparams[64]["lr"] == 0.02


def test_hparams_from_a_missing_or_bad_file(tmp_path):
    path = write_campaign(tmp_path, tiny_campaign(hparams_from="nope.yaml"))
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    assert "hparams_from" in str(info.value) and "nope.yaml" in str(info.value)
    (tmp_path / "bad.yaml").write_text("just: text\n")
    path = write_campaign(tmp_path, tiny_campaign(hparams_from="bad.yaml"))
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    assert "no `hparams:` mapping" in str(info.value)


def test_cli_rejects_a_bad_space_before_any_trial(tmp_path, cli):
    path = write_campaign(tmp_path, _tuned({"lr": {"low": 0.1, "high": 0.001, "log": True}}))
    result = cli("tune", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "tune.space.lr" in lines[0] and "Traceback" not in result.stderr
    # nothing was started: neither the study storage nor the tracking store exists
    assert not (tmp_path / "rcpforge-optuna.db").exists() and not (tmp_path / "rcpforge-mlflow.db").exists()


def test_cli_names_an_unknown_recipe_and_a_missing_tune_section(tmp_path, cli):
    path = write_campaign(tmp_path, _tuned({"lr": {"low": 0.001, "high": 0.1}}))
    result = cli("tune", str(path), "--recipe", "fp9")
    assert result.returncode == 2 and "--recipe fp9" in result.stderr and "bf16" in result.stderr
    path = write_campaign(tmp_path, tiny_campaign(), "plain.yaml")
    result = cli("tune", str(path))
    assert result.returncode == 2 and "no `tune:` section" in result.stderr
    assert not (tmp_path / "rcpforge-optuna.db").exists()


def test_the_tune_example_is_valid():
    from tests.conftest import ROOT

    campaign = load_campaign(ROOT / "sweeps/examples/tune.yaml")
    assert set(campaign.tune.space) == {"lr", "warmup_tokens"} and campaign.tune.space["warmup_tokens"].is_int
