"""The one redaction rule: what of a secret rcpforge may record or print. Everything it
writes to the tracking store (a run's spec tag), prints (`run --dry-run`, `status`,
errors) or exports (reports, studies) goes through here:

- a tracking URI's password (`postgresql://bob:***@host/db`);
- an environment entry whose name looks like a credential (`looks_secret`): its value is
  `***`; an entry given by reference (`{from_env: NAME}`) is shown as where it comes from,
  never as its value;
- an argv value that looks like a credential: `--hf-token=***`, or `--api-key ***`.

Secret values themselves never enter a RunSpec (sweeps/secrets.py keeps them beside it),
so what is masked here is what a person wrote in the open. Plain Python: the contract
imports it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "***"
# The key of an environment entry given by reference: `HF_TOKEN: {from_env: HF_TOKEN}`.
FROM_ENV = "from_env"
# Words in a name that say its value is a credential (case-insensitive, anywhere in a part
# of the name): HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, PGPASSWORD, DB_PASS,
# GOOGLE_APPLICATION_CREDENTIALS, AUTH_HEADER, hfToken.
_CREDENTIAL = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASS|CREDENTIAL|AUTH", re.IGNORECASE)
# Parts that hold such a word and are no credential: a token count (MAX_TOKENS, rcpforge's
# own RCPFORGE_MAX_TOKENS), Hugging Face's TOKENIZERS_PARALLELISM. Masking these would
# take their values out of run keys that have always held them.
_PLAIN_WORDS = frozenset({"TOKENS", "TOKENIZER", "TOKENIZERS", "AUTHOR", "AUTHORS", "BYPASS", "PASSTHROUGH",
                          "COMPASS", "KEYBOARD", "MONKEY"})
# userinfo "user:password@" sits before the first "/" of the authority
_URI_PASSWORD = re.compile(r"(?P<head>://[^/:@\s]*:)[^@\s/]*(?P<at>@)")
# An argv flag named as a credential: --hf-token, --api_key, -password
_FLAG = re.compile(r"^--?(?P<name>[A-Za-z][A-Za-z0-9_.-]*)$")


def looks_secret(name: str) -> bool:
    """Whether a variable or option named so holds a credential."""
    parts = re.split(r"[^A-Za-z0-9]+", name)
    return any(_CREDENTIAL.search(part) and part.upper() not in _PLAIN_WORDS for part in parts)


def redact_uri(uri: str) -> str:
    """The URI with any password replaced by ***, for everything a person or a log sees."""
    return _URI_PASSWORD.sub(rf"\g<head>{MASK}\g<at>", uri)


def reference_of(value: Any) -> str | None:
    """The variable an entry given by reference names (`{from_env: NAME}`), else None."""
    if isinstance(value, Mapping) and isinstance(value.get(FROM_ENV), str):
        return str(value[FROM_ENV])
    return None


def shown_reference(variable: str) -> str:
    """How an entry given by reference is shown wherever its value would be."""
    return f"<from the environment: {variable}>"


def is_secret_entry(name: str, value: Any) -> bool:
    """Whether an environment entry is a secret: given by reference, or a literal whose
    name looks like a credential."""
    return reference_of(value) is not None or (isinstance(value, str) and looks_secret(name))


def redact_env(env: Mapping[str, Any], *, shown: bool = False) -> dict[str, Any]:
    """Environment entries as they may be recorded: a credential's literal is ***; an entry
    by reference stays the reference (`shown`: in words, for a person)."""
    out: dict[str, Any] = {}
    for name, value in env.items():
        variable = reference_of(value)
        if variable is not None:
            out[name] = shown_reference(variable) if shown else dict(value)
        elif isinstance(value, str) and looks_secret(name):
            out[name] = MASK
        else:
            out[name] = value
    return out


def redact_argv(argv: list[str]) -> list[str]:
    """An argv with the values of credential-named options masked: `--token=abc` and
    `--token abc` become `--token=***` and `--token ***`."""
    out: list[str] = []
    masks_next = False
    for arg in argv:
        if masks_next and not arg.startswith("-"):
            out.append(MASK)
            masks_next = False
            continue
        flag, eq, _ = arg.partition("=")
        match = _FLAG.match(flag)
        secret = bool(match) and looks_secret(match.group("name"))  # type: ignore[union-attr]
        out.append(f"{flag}={MASK}" if secret and eq else arg)
        masks_next = secret and not eq
    return out


def redact(value: Any, *, shown: bool = False) -> Any:
    """Any record (trainer settings, a campaign's settings, a dry run's launch) with the
    rule applied throughout: `env` mappings and `argv` lists by name, URIs' passwords in
    every text."""
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if key == "env" and isinstance(item, Mapping):
                out[key] = redact_env(item, shown=shown)
            elif key == "argv" and isinstance(item, list) and all(isinstance(a, str) for a in item):
                out[key] = redact_argv(item)
            else:
                out[key] = redact(item, shown=shown)
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(redact(item, shown=shown) for item in value)
    if isinstance(value, str) and "://" in value:
        return redact_uri(value)
    return value
