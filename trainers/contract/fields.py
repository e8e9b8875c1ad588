"""A pydantic validation error in the project's words: one line naming each field, and for
a misspelt field name the valid one closest to it, found by walking the models along the
error's location."""

from __future__ import annotations

import difflib
import re
import typing
from typing import Any

from pydantic import BaseModel, ValidationError


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's annotation can hold (through Optional, Union,
    Annotated, list and dict)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _tag(model: type[BaseModel]) -> Any:
    kind = model.model_fields.get("kind")
    return kind.default if kind is not None else None


def known_fields(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names valid beside the last part of `loc` (a pydantic error location
    under `root`); empty where the walk loses its way."""
    models = [root]
    for part in loc[:-1]:
        if isinstance(part, int):  # a list's index: its items' models are already here
            continue
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if fields:
            models = [m for f in fields for m in _models(f.annotation)]
        else:  # a tagged union's tag (backend.slurm...) or a mapping's key
            models = [m for m in models if _tag(m) == part] or models
        if not models:
            return []
    return sorted({n for m in models for n in m.model_fields})


def unknown_field(name: Any, known: list[str]) -> str:
    """The message for a field nobody declared: the closest valid name, or the valid ones."""
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
    if close:
        return f"is not a known field; did you mean `{close[0]}`?"
    if known:
        return f"is not a known field; check its spelling (the fields here: {', '.join(known)})"
    return "is not a known field; check its spelling"


_NAMES_ITS_FIELD = re.compile(r"^[a-z_]+(\.[A-Za-z0-9_+-]+|\[\d+\])*: ")


def validation_message(err: ValidationError, root: type[BaseModel], hidden: tuple[str, ...] = (),
                       messages: dict[tuple[str, tuple[Any, ...]], str] | None = None) -> str:
    """Every problem of `err` (from validating `root`) on one line, each naming its field:
    `hidden` fields are never suggested; `messages` replaces pydantic's words for an error
    (type, location) with the project's own."""
    messages, lines = messages or {}, []
    for e in err.errors():
        loc = ".".join(p if isinstance(p, str) and p.isidentifier() else repr(p) if isinstance(p, str) else str(p)
                       for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if (e["type"], tuple(e["loc"])) in messages:
            msg = messages[(e["type"], tuple(e["loc"]))]
        elif e["type"] == "missing":
            msg = "is required but missing; add it to the campaign file"
        elif e["type"] == "extra_forbidden":
            msg = unknown_field(e["loc"][-1], [n for n in known_fields(root, e["loc"]) if n not in hidden])
        if (loc == "(top level)" or msg.startswith(loc + ".")) and _NAMES_ITS_FIELD.match(msg):
            lines.append(msg)  # a cross-field check that already says which field
        else:
            lines.append(f"{loc}: {msg}")
    return "; ".join(lines)
