"""The secrets of a campaign's `trainer.env`: kept out of every RunSpec, resolved as runs
launch (torch-free).

A secret is an entry given by reference (`HF_TOKEN: {from_env: HF_TOKEN}`: the launching
shell's variable, read when `rcpforge run` starts), or a literal whose name looks like a
credential (`trainers/contract/redact.py`'s `looks_secret`). A RunSpec holds the reference,
or `***` for the literal, never a value: so the run key, the store, the ledger and every
print hold none, and a rotated token keeps every run key. The values travel beside the
RunSpec, as each job's `secret_env` (cluster/backend.py says how each backend carries it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rcpforge.trainers.contract.redact import MASK, looks_secret, reference_of


class MissingSecret(ValueError):
    """A variable an entry takes its value from is not set where `rcpforge run` started:
    one line naming it, before anything is launched (exit 2)."""


def split_literals(settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Trainer settings as a RunSpec may hold them (each credential-named literal in `env`
    as ***) and the literals taken out of them."""
    env = settings.get("env")
    if not isinstance(env, Mapping):
        return dict(settings), {}
    literals = {k: v for k, v in env.items() if isinstance(v, str) and looks_secret(k) and v != MASK}
    if not literals:
        return dict(settings), {}
    return {**settings, "env": {k: MASK if k in literals else v for k, v in env.items()}}, literals


def masked_models(models: list[Any] | None) -> tuple[list[Any] | None, dict[str, dict[str, str]]]:
    """A model axis (sweeps/models_spec.py's ModelChoice) with each model's literals taken
    out of its trainer settings and of its settings as written; the literals by model."""
    if models is None:
        return None, {}
    out, literals = [], {}
    for model in models:
        trainer, taken = split_literals(model.trainer)
        settings, written = split_literals(model.settings)
        out.append(model.model_copy(update={"trainer": trainer, "settings": settings}))
        literals[model.name] = {**written, **taken}
    return out, literals


def literal_warning(trainers: list[Mapping[str, Any]]) -> str | None:
    """The campaign's one warning for credentials written in the open."""
    names = sorted({name for trainer in trainers for name, value in (trainer.get("env") or {}).items()
                    if value == MASK and looks_secret(name)})
    if not names:
        return None
    what = f"{names[0]} looks like a credential" if len(names) == 1 else f"{', '.join(names)} look like credentials"
    return (f"trainer.env: {what} written in the campaign file: rcpforge records and shows *** for it, but the "
            f"file itself holds the value; give it by reference instead, e.g. {names[0]}: {{from_env: {names[0]}}}, "
            "with the variable exported in the shell that runs `rcpforge run`")


def secret_env(trainer: Mapping[str, Any], literals: Mapping[str, str],
               environ: Mapping[str, str]) -> dict[str, str]:
    """What a run's tasks get in their environment beside its RunSpec: each entry given by
    reference from `environ` (the launching shell's), each literal taken out at load.
    MissingSecret names every variable `environ` lacks."""
    out: dict[str, str] = {}
    missing: dict[str, str] = {}  # entry -> the variable it names
    for name, value in (trainer.get("env") or {}).items():
        variable = reference_of(value)
        if variable is not None:
            if variable in environ:
                out[name] = environ[variable]
            else:
                missing[name] = variable
        elif name in literals:
            out[name] = literals[name]
    if missing:
        entries = ", ".join(f"trainer.env.{k}" for k in missing)
        variables = sorted(set(missing.values()))
        raise MissingSecret(
            f"{entries}: from_env {', '.join(variables)} is not set in the environment `rcpforge run` started in; "
            f"export {variables[0]}=... (or correct the name after from_env) and run again; nothing was launched")
    return out


def take_out_literals(campaign: Any) -> None:
    """A validated campaign's literals out of its trainer settings and models, into its
    `secret_literals` (excluded from every dump), as its validator's last step."""
    trainer, literals = split_literals(campaign.trainer)
    models, by_model = masked_models(campaign.models)
    object.__setattr__(campaign, "trainer", trainer)
    object.__setattr__(campaign, "models", models)
    object.__setattr__(campaign, "secret_literals", {"": literals, **by_model})


def campaign_secret_env(campaign: Any, model: str, environ: Mapping[str, str]) -> dict[str, str]:
    """`secret_env` of a campaign's runs of `model` ("": a campaign without a model axis)."""
    trainer = next((m.trainer for m in campaign.models or [] if m.name == model), campaign.trainer)
    return secret_env(trainer, campaign.secret_literals.get(model, {}), environ)


def launch_secrets(campaign: Any, environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Each model's `secret_env` ("": a campaign without a model axis), read once as the
    campaign launches, so that a missing variable stops it before anything starts."""
    models = [m.name for m in campaign.models] if campaign.models else [""]
    return {model: campaign_secret_env(campaign, model, environ) for model in models}
