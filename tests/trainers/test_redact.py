"""The one redaction rule (trainers/contract/redact.py): which names are credentials, and
what of them a record or a print may hold."""

from __future__ import annotations

import pytest

from rcpforge.trainers.contract.redact import MASK, looks_secret, redact, redact_argv, redact_env, redact_uri


@pytest.mark.parametrize("name", ["HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD", "DB_PASS",
                                  "GOOGLE_APPLICATION_CREDENTIALS", "AUTH_HEADER", "hfToken", "api-key"])
def test_credential_names(name):
    assert looks_secret(name)


@pytest.mark.parametrize("name", ["OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM", "RCPFORGE_MAX_TOKENS",
                                  "RCPFORGE_EVAL_EVERY_TOKENS", "CUDA_VISIBLE_DEVICES", "AUTHOR"])
def test_plain_names(name):
    assert not looks_secret(name)


def test_env_masks_literals_and_keeps_references():
    env = {"HF_TOKEN": {"from_env": "MY_HF"}, "WANDB_API_KEY": "w123", "OMP_NUM_THREADS": "1"}
    assert redact_env(env) == {"HF_TOKEN": {"from_env": "MY_HF"}, "WANDB_API_KEY": MASK, "OMP_NUM_THREADS": "1"}
    assert redact_env(env, shown=True)["HF_TOKEN"] == "<from the environment: MY_HF>"


def test_argv_masks_credential_options_only():
    argv = ["train.py", "--hf-token", "abc", "--api_key=def", "--lr", "0.1", "--token", "--seed", "1"]
    assert redact_argv(argv) == ["train.py", "--hf-token", MASK, f"--api_key={MASK}", "--lr", "0.1", "--token",
                                 "--seed", "1"]


def test_uri_password_and_records_throughout():
    assert redact_uri("postgresql://bob:pw@db:5432/mlflow") == "postgresql://bob:***@db:5432/mlflow"
    record = {"trainer": {"env": {"DB_PASSWORD": "pw"}, "argv": ["x", "--secret=pw"]},
              "tracking": {"uri": "http://u:pw@host:5000"}, "models": [{"settings": {"env": {"KEY": "pw"}}}]}
    assert "pw" not in str(redact(record))
    assert redact({"hparams": {"lr": 0.1}, "argv": ["a"]}) == {"hparams": {"lr": 0.1}, "argv": ["a"]}
